"""Vectorised polygon measurements and DB shrinking for ``ocr.data.targets.db``.

Polygons are grouped by point count so that area, perimeter, minimum-area-rectangle short side,
rectangle detection and the inward offset of convex polygons run as array operations, not per polygon.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt
import pyclipper

from ocr.polygons import (
    clip_polygons_to_box,
    convex_min_rect_short_sides,
    cross,
    edge_vectors,
    group_by_point_count,
    is_convex,
    signed_areas,
    turn_crosses,
)

__all__ = [
    "AXIS_SIN",
    "clip_to_box",
    "fill_polygons",
    "GENERAL",
    "ROTATED_RECT",
    "AXIS_RECT",
    "PolygonMeasures",
    "measure_polygons",
    "offset_polygon",
    "shrink_convex",
]

GENERAL, ROTATED_RECT, AXIS_RECT = 0, 1, 2
_RIGHT_ANGLE_COS = 1e-4  # |cos| of every corner below this makes a quad a rectangle (float32 input noise)
AXIS_SIN = 1e-6  # |sin| of the first edge below this makes a rectangle axis-aligned
_NEAR = 4096  # px outside the map beyond which a polygon is clipped before cv2.fillPoly (cost ~ extent)
_COORD_LIMIT = float(2**30)  # coordinates are clamped to +-2^30 px so int32 drawing cannot overflow

IntPolygon = npt.NDArray[np.int32]


@dataclass(frozen=True)
class PolygonMeasures:
    """Measurements of the N usable polygons (>= 3 finite points), grouped by point count."""

    index: npt.NDArray[np.int64]  # (N,) position of each row in the caller's list
    groups: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]  # (rows, (G, K, 2) points) per K
    area: npt.NDArray[np.float64]  # (N,) px^2, absolute shoelace area
    perimeter: npt.NDArray[np.float64]  # (N,) px
    short_side: npt.NDArray[np.float64]  # (N,) short side of the minimum-area rectangle, px
    bbox: npt.NDArray[np.float64]  # (N, 4) x_min, y_min, x_max, y_max
    kind: npt.NDArray[np.int8]  # (N,) GENERAL, ROTATED_RECT or AXIS_RECT
    center: npt.NDArray[np.float64]  # (N, 2) rectangle centre (rectangles only)
    axis: npt.NDArray[np.float64]  # (N, 2) unit vector along the first edge (rectangles only)
    half: npt.NDArray[np.float64]  # (N, 2) half sizes along axis and normal; along x and y if axis-aligned

    def points(self, row: int) -> npt.NDArray[np.float64]:
        """(K, 2) points of one row."""
        for rows, stacked in self.groups:
            if rows[0] <= row <= rows[-1]:
                return stacked[row - rows[0]]
        raise IndexError(f"row {row} out of range for {len(self.index)} polygons")


def offset_polygon(points: npt.ArrayLike, delta: float) -> IntPolygon | None:
    """pyclipper offset with round joins (coordinates truncated to int first, as pyclipper does, and
    clamped to +-2^30 px).

    Returns:
        (M, 2) int32 vertices of the first resulting path, ``None`` when nothing results.
    """
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    if len(pts) < 3 or not np.isfinite(pts).all():
        return None
    offsetter = pyclipper.PyclipperOffset()
    ints = np.trunc(np.clip(pts, -_COORD_LIMIT, _COORD_LIMIT)).astype(np.int64)  # inside pyclipper's range
    offsetter.AddPath(ints.tolist(), pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    paths = offsetter.Execute(delta)
    if not paths or len(paths[0]) < 3:
        return None
    return np.asarray(paths[0], dtype=np.int32)


def measure_polygons(polygons: Sequence[npt.ArrayLike]) -> PolygonMeasures:
    """Measure every polygon with >= 3 finite points; the others are left out.

    Coordinates beyond +-2^30 px are clamped there (far outside any target map).

    Raises:
        ValueError: when a polygon cannot be read as (K, 2) numbers.
    """
    inputs = _usable_by_point_count(polygons)
    count = sum(len(positions) for positions, _ in inputs)
    area, perimeter, short_side = np.zeros(count), np.zeros(count), np.zeros(count)
    bbox, kind = np.zeros((count, 4)), np.zeros(count, np.int8)
    center, axis, half = np.zeros((count, 2)), np.zeros((count, 2)), np.zeros((count, 2))
    groups, start = [], 0
    for _, stacked in inputs:
        rows = np.arange(start, start + len(stacked))
        start += len(stacked)
        groups.append((rows, stacked))
        edges = edge_vectors(stacked)  # (G, K, 2)
        lengths = np.hypot(edges[..., 0], edges[..., 1])  # (G, K)
        area[rows] = np.abs(signed_areas(stacked))
        perimeter[rows] = lengths.sum(axis=1)
        bbox[rows] = np.concatenate([stacked.min(axis=1), stacked.max(axis=1)], axis=1)
        rect = _is_rectangle(edges, lengths)
        if rect.any():
            _describe_rectangles(
                stacked[rect], edges[rect], lengths[rect], rows[rect], kind, center, axis, half
            )
            short_side[rows[rect]] = 2 * half[rows[rect]].min(axis=1)
        if not rect.all():
            short_side[rows[~rect]] = _min_rect_short_sides(stacked[~rect])
    index = np.concatenate([positions for positions, _ in inputs]) if inputs else np.zeros(0, np.int64)
    return PolygonMeasures(index, groups, area, perimeter, short_side, bbox, kind, center, axis, half)


def _usable_by_point_count(polygons: Sequence[npt.ArrayLike]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(input positions, (G, K, 2) float64 points) per point count K, usable polygons only."""
    try:
        stacked = np.asarray(polygons, dtype=np.float64)  # one call for the common all-quads case
    except (TypeError, ValueError):
        stacked = None
    if stacked is not None and stacked.ndim == 3 and stacked.shape[2] == 2 and stacked.shape[1] >= 3:
        positions = np.flatnonzero(np.isfinite(stacked).all(axis=(1, 2)))
        return (
            [(positions, np.clip(stacked[positions], -_COORD_LIMIT, _COORD_LIMIT))] if len(positions) else []
        )
    usable, where = [], []
    for i, polygon in enumerate(polygons):
        try:
            pts = np.asarray(polygon, dtype=np.float64).reshape(-1, 2)
        except (TypeError, ValueError) as err:
            raise ValueError(f"polygons[{i}]: expected (K, 2) numbers, got {polygon!r}") from err
        if len(pts) >= 3 and np.isfinite(pts).all():
            usable.append(pts)
            where.append(i)
    positions = np.array(where, dtype=np.int64)
    return [
        (positions[rows], np.clip(stacked, -_COORD_LIMIT, _COORD_LIMIT))
        for rows, stacked in group_by_point_count(usable)
    ]


def _next(stacked: np.ndarray) -> np.ndarray:
    """Index of the next vertex along axis 1 of (G, K, ...) arrays."""
    return (np.arange(stacked.shape[1]) + 1) % stacked.shape[1]


def _prev(stacked: np.ndarray) -> np.ndarray:
    """Index of the previous vertex along axis 1 of (G, K, ...) arrays."""
    return (np.arange(stacked.shape[1]) - 1) % stacked.shape[1]


def _min_rect_short_sides(stacked: np.ndarray) -> np.ndarray:
    """Short side of the minimum-area rectangle, (G,): calipers on convex polygons, ``cv2.minAreaRect``
    for the others."""
    short = convex_min_rect_short_sides(stacked)
    for g in np.flatnonzero(~is_convex(stacked, strict=False) | ~np.isfinite(short)):
        _, (w, h), _ = cv2.minAreaRect(stacked[g].astype(np.float32))
        short[g] = min(w, h)
    return short


def _describe_rectangles(
    stacked: np.ndarray,
    edges: np.ndarray,
    lengths: np.ndarray,
    rows: np.ndarray,
    kind: np.ndarray,
    center: np.ndarray,
    axis: np.ndarray,
    half: np.ndarray,
) -> None:
    """Write kind, centre, axis and half sizes of (R, 4, 2) rectangles into the given rows, in place."""
    unit = edges[:, 0] / lengths[:, :1]  # (R, 2)
    aligned = np.minimum(np.abs(unit[:, 0]), np.abs(unit[:, 1])) <= AXIS_SIN
    lo, hi = stacked.min(axis=1), stacked.max(axis=1)
    half_rot = np.stack([lengths[:, 0] + lengths[:, 2], lengths[:, 1] + lengths[:, 3]], axis=1) / 4
    kind[rows] = np.where(aligned, AXIS_RECT, ROTATED_RECT)
    axis[rows] = unit
    half[rows] = np.where(aligned[:, None], (hi - lo) / 2, half_rot)
    center[rows] = np.where(aligned[:, None], (hi + lo) / 2, stacked.mean(axis=1))


def _is_rectangle(edges: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(G,) True for quads whose four corners are right angles (within float32 noise)."""
    if edges.shape[1] != 4:
        return np.zeros(len(edges), dtype=bool)
    following = _next(edges)
    dots = np.abs((edges * edges[:, following]).sum(axis=2))  # (G, 4)
    right = dots <= _RIGHT_ANGLE_COS * lengths * lengths[:, following]
    return (lengths > 0).all(axis=1) & right.all(axis=1)


def shrink_convex(stacked: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inward offset of (G, K, 2) polygons by ``offsets`` (G,), reproducing pyclipper on convex input.

    pyclipper truncates the input to integers, moves each edge inwards by the offset with rounded end
    points and intersects consecutive moved edges; for a convex polygon whose edges all survive that is
    the whole answer (round joins only act on the other side of a corner). Corners where
    ``|sin(turn)| * offset < 1`` are left to pyclipper, which takes a shortcut there.

    Returns:
        (G, K, 2) int32 vertices and a (G,) bool flag: False where the polygon is not convex, an edge
        vanished or flipped, or nothing is left; those need pyclipper itself.
    """
    pts = np.trunc(stacked)
    nxt = pts[:, _next(pts)]
    edges = nxt - pts  # (G, K, 2)
    lengths = np.hypot(edges[..., 0], edges[..., 1])
    orientation = np.sign(signed_areas(pts))[:, None]  # (G, 1): +1 when the interior is on the left
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = orientation * offsets[:, None] / lengths  # (G, K)
        inward = np.stack([-edges[..., 1], edges[..., 0]], axis=-1) * scale[..., None]
        start, end = np.round(pts + inward), np.round(nxt + inward)  # moved edges
        direction = end - start
        prev_start, prev_dir = start[:, _prev(start)], direction[:, _prev(start)]
        denom = cross(prev_dir, direction)  # (G, K)
        t = cross(start - prev_start, direction) / denom
        vertices = np.round(prev_start + t[..., None] * prev_dir)  # vertex k = moved edge k-1 x moved edge k
    new_edges = edge_vectors(vertices)
    turns = turn_crosses(pts)
    with np.errstate(invalid="ignore", divide="ignore"):
        turn_sin = turns / (lengths * lengths[:, _next(lengths)])
    ok = (
        (np.abs(denom) > 1e-9).all(axis=1)
        & (np.abs(turn_sin) * offsets[:, None] >= 1).all(axis=1)  # else pyclipper keeps a single point
        & ((turns * orientation) >= 0).all(axis=1)
        & ((new_edges * edges).sum(axis=2) > 0).all(axis=1)
        & (signed_areas(vertices) * orientation[:, 0] > 0)
        & np.isfinite(vertices).all(axis=(1, 2))
    )
    vertices[~ok] = 0
    return vertices.astype(np.int32), ok


def clip_to_box(points: np.ndarray, x_min: float, y_min: float, x_max: float, y_max: float) -> np.ndarray:
    """Part of a polygon inside an axis-aligned box (``ocr.polygons.clip_polygons_to_box``); (M, 2)
    float64, M may be 0.

    Used before ``cv2.fillPoly``, whose cost grows with the coordinate range: a polygon reaching
    1e9 px away takes seconds to fill.
    """
    pts = np.asarray(points, dtype=np.float64).reshape(1, -1, 2)
    clipped, counts = clip_polygons_to_box(pts, x_min, y_min, x_max, y_max)
    return clipped[0, : counts[0]]


def fill_polygons(
    canvas: npt.NDArray[np.float32],
    rings: list[IntPolygon],
    boxes: np.ndarray,
    is_box: np.ndarray,
    value: float,
) -> None:
    """Fill polygons with ``value``; axis-aligned rectangles (``is_box``) as slices of their (R, 4) ``boxes``.

    One ``cv2.fillPoly`` call over several polygons fills by parity, so their overlap would stay empty:
    each call gets polygons whose bounding boxes do not overlap (a few calls on dense pages).
    """
    if not len(boxes):
        return
    rects = boxes[is_box]
    rects = np.concatenate([np.maximum(rects[:, :2], 0), rects[:, 2:]], axis=1)[
        (rects[:, 2:] >= 0).all(axis=1)
    ]
    for x0, y0, x1, y1 in rects.tolist():
        canvas[y0 : y1 + 1, x0 : x1 + 1] = value
    rest = np.flatnonzero(~is_box)
    if not len(rest):
        return
    height, width = canvas.shape
    x0, y0, x1, y1 = boxes[rest].T
    far = (np.minimum(x0, y0) < -_NEAR) | (x1 > width + _NEAR) | (y1 > height + _NEAR)
    for i in rest[far].tolist():
        clipped = clip_to_box(rings[i], -2, -2, width + 1, height + 1)
        if len(clipped) >= 3:
            cv2.fillPoly(canvas, [np.round(clipped * 16).astype(np.int32)], value, shift=4)
    near = np.flatnonzero(~far)
    x0, y0, x1, y1 = x0[near], y0[near], x1[near], y1[near]
    overlap = (x0[:, None] <= x1) & (x0 <= x1[:, None]) & (y0[:, None] <= y1) & (y0 <= y1[:, None])
    overlap = np.triu(overlap, 1)  # [i, j]: i < j overlap
    while len(near):
        free = ~overlap.any(axis=0)  # overlaps no earlier polygon still to fill: these are disjoint
        cv2.fillPoly(canvas, [rings[i] for i in rest[near[free]].tolist()], value)
        near, overlap = near[~free], overlap[np.ix_(~free, ~free)]
