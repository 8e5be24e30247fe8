"""Vectorised measurements of polygons stacked as (N, K, 2) float64 arrays: N polygons of K points each,
and their clip to a box.

Points are x, y in image pixels (y down); edge k runs from point k to point k + 1, and from the last
point back to the first. Signs follow the shoelace formula in those axes: a positive area or turn is
clockwise as the image is shown (counter-clockwise in y-up math axes). The functions only measure;
what counts as too small, degenerate or convex enough is each caller's decision.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = [
    "clip_polygons_to_box",
    "compact_points",
    "convex_min_rect_short_sides",
    "cross",
    "edge_vectors",
    "group_by_point_count",
    "is_convex",
    "signed_areas",
    "turn_crosses",
    "winds_once",
]

F64 = npt.NDArray[np.float64]


def _following(values: F64) -> F64:
    """``values`` moved one step back along axis 1 (entry k holds entry k + 1, cyclically)."""
    return np.concatenate([values[:, 1:], values[:, :1]], axis=1)  # faster than np.roll on small arrays


def cross(a: F64, b: F64) -> F64:
    """z of the cross product of (..., 2) vectors: ``a_x b_y - a_y b_x``, shape (...)."""
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def edge_vectors(points: F64) -> F64:
    """(N, K, 2) edge vectors: point k + 1 minus point k, cyclically."""
    return _following(points) - points


def signed_areas(points: F64) -> F64:
    """(N,) shoelace areas, positive for clockwise order on screen; 0 for a segment or a point."""
    x, y = points[..., 0], points[..., 1]
    return 0.5 * (x * _following(y) - _following(x) * y).sum(axis=1)


def turn_crosses(points: F64) -> F64:
    """(N, K) cross product of edge k and edge k + 1: the turn at point k + 1, of the sign of
    :func:`signed_areas` where the polygon is convex, 0 where the two edges are parallel."""
    edges = edge_vectors(points)
    return cross(edges, _following(edges))


def is_convex(points: F64, *, strict: bool) -> npt.NDArray[np.bool_]:
    """(N,) whether every turn has the same sign; ``strict`` also refuses straight and reversing turns.

    For K >= 5 a self-intersecting star turns the same way everywhere too: :func:`winds_once` tells it
    apart. For K <= 4 same-signed turns (strict) make a simple convex polygon.
    """
    turns = turn_crosses(points)
    # numpy's stubs type all(axis=...) as bool | array; these are (N,) arrays.
    if strict:
        return (turns > 0).all(axis=1) | (turns < 0).all(axis=1)  # type: ignore[return-value]
    return (turns >= 0).all(axis=1) | (turns <= 0).all(axis=1)  # type: ignore[return-value]


def winds_once(points: F64) -> npt.NDArray[np.bool_]:
    """(N,) whether the edge direction turns through exactly one full circle (within 1e-6 rad)."""
    edges = edge_vectors(points)
    nxt = _following(edges)
    angles = np.arctan2(cross(edges, nxt), (edges * nxt).sum(axis=2))  # (N, K) signed turn angles
    return np.abs(np.abs(angles.sum(axis=1)) - 2 * np.pi) < 1e-6


def convex_min_rect_short_sides(points: F64) -> F64:
    """(N,) shorter side of the minimum-area rectangle of each convex polygon (rotating calipers), px.

    The minimum-area rectangle of a convex polygon has a side along one of its edges; zero-length edges
    give no direction, and a polygon with none of nonzero length gets NaN. For a polygon that is not
    convex the result is not its minimum-area rectangle: callers check (:func:`is_convex`) and use
    ``cv2.minAreaRect`` there.
    """
    edges = edge_vectors(points)
    lengths = np.hypot(edges[..., 0], edges[..., 1])  # (N, K)
    with np.errstate(invalid="ignore", divide="ignore"):
        along = edges / lengths[..., None]  # (N, K, 2) unit edge directions, NaN for zero-length edges
    normal = np.stack([-along[..., 1], along[..., 0]], axis=-1)
    extent_a = np.ptp(np.einsum("nkd,njd->nkj", along, points), axis=2)  # (N, K directions)
    extent_n = np.ptp(np.einsum("nkd,njd->nkj", normal, points), axis=2)
    rect_area = extent_a * extent_n
    rect_area[~np.isfinite(rect_area)] = np.inf
    best = np.argmin(rect_area, axis=1)[:, None]
    return np.take_along_axis(np.fmin(extent_a, extent_n), best, axis=1)[:, 0]


def group_by_point_count(
    polygons: Sequence[F64],
) -> list[tuple[npt.NDArray[np.int64], F64]]:
    """Stack (K, 2) float64 polygons of equal K.

    Returns:
        Per point count, in order of first appearance: the (G,) positions in ``polygons`` and the
        (G, K, 2) stacked points, in input order.
    """
    by_count: dict[int, list[int]] = {}
    for i, pts in enumerate(polygons):
        by_count.setdefault(len(pts), []).append(i)
    return [
        (np.array(positions, dtype=np.int64), np.stack([polygons[i] for i in positions]))
        for positions in by_count.values()
    ]


def clip_polygons_to_box(
    points: F64, x_min: float, y_min: float, x_max: float, y_max: float
) -> tuple[F64, npt.NDArray[np.int64]]:
    """The parts of (N, K, 2) polygons inside an axis-aligned box, all at once (Sutherland-Hodgman).

    Exact for convex polygons; a concave one may come out with edges doubling back along the box (what a
    fill needs, not a valid polygon). Consecutive points may repeat where a vertex lies on the box.

    Returns:
        (N, M, 2) points and (N,) counts: row n's first ``counts[n]`` points are its part (fewer than 3:
        none), the rest repeat its last point (zeros when there is none).
    """
    pts = np.asarray(points, dtype=np.float64)
    counts = np.full(len(pts), pts.shape[1], dtype=np.int64)
    for axis, bound, keep_below in ((0, x_min, False), (0, x_max, True), (1, y_min, False), (1, y_max, True)):
        if not pts.shape[1]:
            break
        inside = pts[..., axis] <= bound if keep_below else pts[..., axis] >= bound
        if inside.all():  # padding repeats a point of its row: this bound cuts nothing
            continue
        column = np.arange(pts.shape[1])
        valid = column < counts[:, None]  # (N, M)
        following = np.where(column + 1 < counts[:, None], column + 1, 0)  # cyclic within each row
        rows = np.arange(len(pts))[:, None]
        nxt, nxt_inside = pts[rows, following], inside[rows, following]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (bound - pts[..., axis]) / (nxt[..., axis] - pts[..., axis])
            crossing = pts + t[..., None] * (nxt - pts)
        crossing[..., axis] = bound  # exactly on the box, whatever the rounding
        # each point emits itself when inside, then the crossing of its edge when the edge crosses
        emitted = np.stack([pts, crossing], axis=2).reshape(len(pts), 2 * pts.shape[1], 2)
        keep = np.stack([inside & valid, (inside != nxt_inside) & valid], axis=2).reshape(emitted.shape[:2])
        pts, counts = compact_points(emitted, keep)
    return pts, counts


def compact_points(points: F64, keep: npt.NDArray[np.bool_]) -> tuple[F64, npt.NDArray[np.int64]]:
    """Move the kept points of each row of (N, M, 2) ``points`` to its front, in order, and pad the row
    with its last kept point (zeros when it has none).

    Returns:
        (N, largest count, 2) points and (N,) counts.
    """
    counts = keep.sum(axis=1)
    width = int(counts.max(initial=0))
    if not width:
        return points[:, :0], counts
    rows = np.arange(len(points))[:, None]
    order = np.argsort(~keep, axis=1, kind="stable")[:, :width]
    last = order[rows, np.maximum(counts - 1, 0)[:, None]]
    order = np.where(np.arange(width) < counts[:, None], order, last)
    compacted = points[rows, order]
    compacted[counts == 0] = 0.0
    return compacted, counts
