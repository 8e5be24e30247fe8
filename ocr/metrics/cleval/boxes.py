"""Per-box quantities for upstream-mode CLEval, vectorised over a padded batch of polygons.

Conventions (docs/metrics.md; competition mode: ``ocr.metrics.cleval.competition``): a 4-point box is
read in its stored order (edges 0-1 and 2-3 "horizontal"); a GT of even K >= 6 points is a reading-order
chain (top edge left to right, then bottom right to left: TotalText); any other polygon is read through
its minimum rotated rectangle, clockwise from the corner starting its most left-to-right edge.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import shapely

from ocr.polygons import edge_vectors, signed_areas

__all__ = [
    "UPSTREAM_MAX_PSEUDO_CHARS",
    "pad_polygons",
    "reading_quads",
    "box_sides",
    "aspect_ratios",
    "pseudo_char_counts",
    "fp_char_counts",
    "char_centres",
    "points_in_polygons",
]

UPSTREAM_MAX_PSEUDO_CHARS = 10
_UPSTREAM_EPS = 1e-5

F64 = npt.NDArray[np.float64]
IntArr = npt.NDArray[np.intp]


def _dist(a: F64, b: F64) -> F64:
    return np.sqrt((a[..., 0] - b[..., 0]) ** 2 + (a[..., 1] - b[..., 1]) ** 2)


def pad_polygons(polygons: Sequence[npt.ArrayLike], what: str, drop_closing: bool) -> tuple[F64, IntArr]:
    """Validated polygons as (N, Kmax, 2) float64 padded by repeating each last vertex, and (N,) counts;
    ``drop_closing`` drops a closing vertex equal to the first. ValueError names ``what[i]`` for a shape
    other than (K >= 3, 2) or a non-finite coordinate."""
    if len(polygons) == 0:
        return np.zeros((0, 4, 2)), np.zeros(0, dtype=np.intp)
    try:
        verts = np.asarray(polygons, dtype=np.float64)
    except ValueError:
        verts = None
    if verts is None or verts.ndim != 3 or verts.shape[2] != 2 or verts.shape[1] < 3:
        return _pad_ragged(polygons, what, drop_closing)
    counts = np.full(len(verts), verts.shape[1], dtype=np.intp)
    _check_finite(verts, what)
    closing = np.all(verts[:, 0] == verts[:, -1], axis=1) & drop_closing
    if closing.any():
        verts = verts.copy()
        verts[closing, -1] = verts[closing, -2]
        counts[closing] -= 1
    return verts, counts


def _pad_ragged(polygons: Sequence[npt.ArrayLike], what: str, drop_closing: bool) -> tuple[F64, IntArr]:
    arrays = []
    for i, poly in enumerate(polygons):
        pts = np.asarray(poly, dtype=np.float64)
        if pts.ndim != 2 or pts.shape[1] != 2 or pts.shape[0] < 3:
            raise ValueError(f"{what}[{i}]: expected a (K, 2) polygon with K >= 3, got shape {pts.shape}")
        if drop_closing and np.array_equal(pts[0], pts[-1]):
            pts = pts[:-1]
        arrays.append(pts)
    counts = np.array([len(a) for a in arrays], dtype=np.intp)
    verts = np.empty((len(arrays), int(counts.max()), 2))
    for i, pts in enumerate(arrays):
        verts[i, : len(pts)] = pts
        verts[i, len(pts) :] = pts[-1]
    _check_finite(verts, what)
    return verts, counts


def _check_finite(verts: F64, what: str) -> None:
    bad = ~np.isfinite(verts).all(axis=(1, 2))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{what}[{i}]: expected finite coordinates, got {verts[i].tolist()}")


def _rect_quads(verts: F64, counts: IntArr) -> F64:
    """(N, 4, 2) minimum rotated rectangles, clockwise on screen, starting at the start of the top edge."""
    flat = np.concatenate([v[:c] for v, c in zip(verts, counts, strict=True)])
    owner = np.repeat(np.arange(len(counts)), counts)
    rects = shapely.minimum_rotated_rectangle(shapely.multipoints(flat, indices=owner))
    quads = np.empty((len(counts), 4, 2))
    for i, rect in enumerate(rects):
        coords = shapely.get_coordinates(rect)
        if len(coords) < 5:  # a point or a segment: use its bounding box
            lo, hi = verts[i, : counts[i]].min(axis=0), verts[i, : counts[i]].max(axis=0)
            coords = np.array([lo, [hi[0], lo[1]], hi, [lo[0], hi[1]]])
        quads[i] = coords[:4]
    ccw = signed_areas(quads) < 0
    quads[ccw] = quads[ccw, ::-1]  # clockwise in image coordinates (y down)
    edges = edge_vectors(quads)
    lengths = np.maximum(np.hypot(edges[..., 0], edges[..., 1]), 1e-12)
    start = np.argmax(edges[..., 0] / lengths, axis=1)
    order = (start[:, None] + np.arange(4)[None, :]) % 4
    return np.take_along_axis(quads, order[..., None], axis=1)


def reading_quads(verts: F64, counts: IntArr, is_gt: bool) -> tuple[F64, npt.NDArray[np.bool_]]:
    """(N, 4, 2) quads the boxes are read through and an (N,) mask of GT chains (quad unused there)."""
    quads = np.array(verts[:, :4]) if verts.shape[1] >= 4 else np.zeros((len(verts), 4, 2))
    chain = (counts >= 6) & (counts % 2 == 0) if is_gt else np.zeros(len(counts), dtype=bool)
    other = (counts != 4) & ~chain
    if other.any():
        quads[other] = _rect_quads(verts[other], counts[other])
    return quads, chain


def box_sides(verts: F64, counts: IntArr, quads: F64, chain: npt.NDArray[np.bool_]) -> tuple[F64, F64]:
    """(N,) horizontal and vertical side lengths: means of the top/bottom and left/right sides."""
    hor = (_dist(quads[:, 0], quads[:, 1]) + _dist(quads[:, 2], quads[:, 3])) / 2
    ver = (_dist(quads[:, 1], quads[:, 2]) + _dist(quads[:, 3], quads[:, 0])) / 2
    for i in np.flatnonzero(chain):
        half = counts[i] // 2
        top, bottom = verts[i, :half], verts[i, half : counts[i]][::-1]
        hor[i] = (_dist(top[1:], top[:-1]).sum() + _dist(bottom[1:], bottom[:-1]).sum()) / 2
        ver[i] = (_dist(top[0], bottom[0]) + _dist(top[-1], bottom[-1])) / 2
    return hor, ver


def aspect_ratios(hor: F64, ver: F64) -> F64:
    """Width / height: (hor + 1e-5) / (ver + 1e-5)."""
    return (hor + _UPSTREAM_EPS) / (ver + _UPSTREAM_EPS)


def pseudo_char_counts(ar: F64) -> npt.NDArray[np.int64]:
    """Characters of boxes without a transcription: min(round(0.5 + max(ar, 1/ar)), 10), half to even."""
    return np.minimum(np.rint(0.5 + np.maximum(ar, 1.0 / ar)), UPSTREAM_MAX_PSEUDO_CHARS).astype(np.int64)


def fp_char_counts(ar: F64) -> npt.NDArray[np.int64]:
    """Characters unmatched detections cost: min(round(0.5 + 1/ar), 10), half to even."""
    return np.minimum(np.rint(0.5 + 1.0 / (_UPSTREAM_EPS + ar)), UPSTREAM_MAX_PSEUDO_CHARS).astype(np.int64)


def char_centres(
    verts: F64,
    counts: IntArr,
    quads: F64,
    chain: npt.NDArray[np.bool_],
    num_chars: npt.NDArray[np.int64],
    ar: F64,
    vertical_threshold: float,
) -> tuple[F64, IntArr]:
    """(P, 2) pseudo-character centres evenly spaced along each GT's mid-line, grouped by GT, and (P,) their
    GT."""
    vertical = ar < vertical_threshold  # vertical text reads from the 4th corner (reference rule)
    q = np.where(vertical[:, None, None], quads[:, [3, 0, 1, 2]], quads)
    start = (q[:, 0] + q[:, 3]) / 2
    end = (q[:, 1] + q[:, 2]) / 2
    n = np.maximum(num_chars, 1)[:, None]
    unit = (end - start) / n
    owner = np.repeat(np.arange(len(num_chars)), num_chars)
    step = np.arange(owner.size) - np.repeat(np.cumsum(num_chars) - num_chars, num_chars)
    # Same operation order as the reference, so centres on a box edge fall the same way.
    xy = start[owner] + unit[owner] / 2 + unit[owner] * step[:, None].astype(np.float64)
    for i in np.flatnonzero(chain & (num_chars > 0)):
        xy[owner == i] = _chain_centres(verts[i, : counts[i]], int(num_chars[i]))
    return xy, owner


def _chain_centres(points: F64, n: int) -> F64:
    half = len(points) // 2
    mid = (points[:half] + points[half:][::-1]) / 2  # (K/2, 2) mid-line polyline
    cum = np.concatenate([[0.0], np.cumsum(_dist(mid[1:], mid[:-1]))])
    if cum[-1] <= 0:
        return np.repeat(mid[:1], n, axis=0)
    targets = (np.arange(n) + 0.5) / n * cum[-1]
    return np.stack([np.interp(targets, cum, mid[:, 0]), np.interp(targets, cum, mid[:, 1])], axis=1)


def points_in_polygons(verts: F64, poly_idx: IntArr, xy: F64) -> npt.NDArray[np.bool_]:
    """(C,) even-odd ray-casting test of (C, 2) points ``xy`` against (N, Kmax, 2) padded polygons
    ``poly_idx[c]``, with the reference's half-open edge rule (on a left/top edge in, right/bottom out)."""
    vi = verts[poly_idx]  # (C, Kmax, 2)
    vj = np.roll(vi, 1, axis=1)
    x, y = xy[:, 0:1], xy[:, 1:2]
    yi, yj, xi, xj = vi[..., 1], vj[..., 1], vi[..., 0], vj[..., 0]
    spans = ((yi <= y) & (y < yj)) | ((yj <= y) & (y < yi))
    dy = np.where(spans, yj - yi, 1.0)
    crosses = spans & (x < (xj - xi) * (y - yi) / dy + xi)
    return (np.count_nonzero(crosses, axis=1) % 2) == 1
