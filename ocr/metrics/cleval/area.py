"""Polygon areas and pairwise intersection areas for CLEval.

Pairs of convex quads (nearly all text boxes) are intersected in numpy, vectorised over pairs: directly
for axis-aligned rectangles, by clipping each quad's edges to the other otherwise. Every other pair goes
through shapely (GEOS, ~50 us per pair), on polygons repaired with ``make_valid`` when they self-intersect.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import shapely

from ocr.polygons import edge_vectors, is_convex, signed_areas

__all__ = [
    "QuadSet",
    "axis_aligned",
    "convex_intersection_areas",
    "intersection_areas",
]

F64 = npt.NDArray[np.float64]
IntArr = npt.NDArray[np.intp]
BoolArr = npt.NDArray[np.bool_]


_NEXT = np.array([1, 2, 3, 0])


def axis_aligned(quads: F64) -> BoolArr:
    """(N,) quads whose edges alternate horizontal and vertical (axis-aligned rectangles)."""
    flat = edge_vectors(quads) == 0  # (N, 4, 2) zero x / y steps
    return (flat[:, 0::2, 1].all(1) & flat[:, 1::2, 0].all(1)) | (
        flat[:, 0::2, 0].all(1) & flat[:, 1::2, 1].all(1)
    )


class QuadSet:
    """Truncated polygons of one side (GT or detections) with what the intersection paths need."""

    def __init__(self, verts: F64, counts: IntArr) -> None:
        """Classify (N, Kmax, 2) padded vertices with (N,) point counts."""
        self.verts = verts
        n = len(verts)
        self.quads = verts[:, :4] if verts.shape[1] >= 4 else np.zeros((n, 4, 2))
        is_quad = counts == 4
        signed = signed_areas(self.quads)
        convex = is_quad & is_convex(self.quads, strict=False)
        self.fast = convex & (signed != 0)  # convex quads with area
        self.rect = self.fast & axis_aligned(self.quads)
        self._shapes: npt.NDArray[np.object_] | None = None
        self.areas = np.abs(signed)
        self.empty = convex & (signed == 0)  # degenerate: a segment or a point
        self.areas[self.empty] = 0.0
        slow = ~self.fast & ~self.empty
        if slow.any():
            self.areas[slow] = shapely.area(self.shapes()[slow])
        self.bbox = np.concatenate([verts.min(axis=1), verts.max(axis=1)], axis=1) if n else np.zeros((0, 4))

    def shapes(self) -> npt.NDArray[np.object_]:
        """(N,) shapely polygons, built on first use; invalid ones repaired with ``make_valid``."""
        if self._shapes is None:
            polys = shapely.polygons(self.verts) if len(self.verts) else np.empty(0, dtype=object)
            invalid = ~shapely.is_valid(polys)
            if invalid.any():
                polys[invalid] = shapely.make_valid(polys[invalid])
            self._shapes = polys
        return self._shapes

    def replace(self, index: int, shape: shapely.Geometry) -> None:
        """Give box ``index`` a new shape (a don't-care region minus the GT it overlaps)."""
        self.shapes()[index] = shape
        self.fast[index] = self.rect[index] = self.empty[index] = False


def convex_intersection_areas(p: F64, q: F64) -> F64:
    """(n,) area of ``p[i]`` and ``q[i]``'s intersection, for convex (n, 4, 2) quads with nonzero area.
    Green's theorem on the intersection's boundary: the parts of each quad's edges inside the other
    (Cyrus-Beck clipping, no loop), each contributing cross(start, end) / 2. An edge lying on an edge of the
    other quad counts once: for ``p`` when both run the same way (shared boundary), for neither when they run
    opposite ways (the quads only touch). The tests are exact on integer input."""
    origin = p[:, :1]
    p, q = p - origin, q - origin
    p = np.where((signed_areas(p) < 0)[:, None, None], p[:, ::-1], p)  # counter-clockwise (math axes)
    q = np.where((signed_areas(q) < 0)[:, None, None], q[:, ::-1], q)
    a = np.stack([p, q], axis=1)  # (n, 2, 4, 2) edges to clip: p's, then q's
    c = a[:, ::-1]  # (n, 2, 4, 2) the quad clipping them
    d = a[:, :, _NEXT] - a  # edge vectors
    e = c[:, :, _NEXT] - c  # clipping edge vectors
    ex, ey = e[:, :, None, :, 0], e[:, :, None, :, 1]  # (n, 2, 1, 4): clipping half-plane j
    dx, dy = d[:, :, :, None, 0], d[:, :, :, None, 1]  # (n, 2, 4, 1): clipped edge i
    rx = a[:, :, :, None, 0] - c[:, :, None, :, 0]  # (n, 2, 4, 4)
    ry = a[:, :, :, None, 1] - c[:, :, None, :, 1]
    s_a = ex * ry - ey * rx  # side of edge i's start w.r.t. half-plane j (> 0 inside)
    ds = ex * dy - ey * dx  # its change along edge i
    plane = (ex != 0) | (ey != 0)
    parallel = ds == 0
    cut = -s_a / np.where(parallel, 1.0, ds)
    t0 = np.where(plane & (ds > 0), cut, 0.0).max(axis=3).clip(min=0.0)
    t1 = np.where(plane & (ds < 0), cut, 1.0).min(axis=3).clip(max=1.0)
    same_way = (ex * dx + ey * dy) > 0
    own = np.array([True, False])[None, :, None, None]
    inside_parallel = (s_a > 0) | ((s_a == 0) & same_way & own)
    keep = ~(plane & parallel & ~inside_parallel).any(axis=3) & (t1 > t0)
    x0, y0 = a[..., 0] + t0 * d[..., 0], a[..., 1] + t0 * d[..., 1]
    x1, y1 = a[..., 0] + t1 * d[..., 0], a[..., 1] + t1 * d[..., 1]
    return np.maximum(np.where(keep, x0 * y1 - x1 * y0, 0.0).sum(axis=(1, 2)) / 2, 0.0)


def _rect_overlap(a: F64, b: F64) -> F64:
    """(n,) overlap area of axis-aligned rectangles given as (n, 4, 2) quads."""
    w = np.minimum(a[..., 0].max(1), b[..., 0].max(1)) - np.maximum(a[..., 0].min(1), b[..., 0].min(1))
    h = np.minimum(a[..., 1].max(1), b[..., 1].max(1)) - np.maximum(a[..., 1].min(1), b[..., 1].min(1))
    return np.maximum(w, 0.0) * np.maximum(h, 0.0)


def intersection_areas(gt: QuadSet, det: QuadSet, g: IntArr, d: IntArr) -> F64:
    """(len(g),) intersection area of GT ``g[i]`` with detection ``d[i]``."""
    out = np.zeros(len(g))
    fast = gt.fast[g] & det.fast[d]
    rect = fast & gt.rect[g] & det.rect[d]
    if rect.any():
        out[rect] = _rect_overlap(gt.quads[g[rect]], det.quads[d[rect]])
    clip = fast & ~rect
    if clip.any():
        out[clip] = convex_intersection_areas(gt.quads[g[clip]], det.quads[d[clip]])
    slow = ~fast & ~gt.empty[g] & ~det.empty[d]
    if slow.any():
        out[slow] = shapely.area(shapely.intersection(gt.shapes()[g[slow]], det.shapes()[d[slow]]))
    return out
