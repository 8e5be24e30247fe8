"""Threshold-map field of ``ocr.data.targets.db``: ``max_p (1 - d_p / D_p)`` over text polygons, vectorised.

Each polygon only matters on its crop (its bounding box grown by its offset ``D``). Rectangles are
done in batches: the crops of a batch are stacked row by row into one (R, Wc) block (R = sum of crop
heights, Wc = widest crop; batches are cut from the rectangles sorted by crop width, so little is
padding), and a closed form fills it with no loop over edges: separable in x and y for axis-aligned
rectangles, two affine coordinates for rotated ones. Other polygons are split into their edges: the
distance to a polygon's border is the least distance to one of its edges, so its field is the max
over its edges of ``1 - d_edge / D``, and an edge is a rectangle of zero width that goes through the
same batched closed form; a fill of the polygon with 0 gives the pixels deeper inside than ``D``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from ocr.data.targets.geometry import (
    AXIS_RECT,
    AXIS_SIN,
    GENERAL,
    ROTATED_RECT,
    PolygonMeasures,
    fill_polygons,
)

__all__ = ["draw_border_field"]

FloatMap = npt.NDArray[np.float32]
_BATCH_PIXELS = 1 << 17  # stacked crop pixels per batch (512 KB float32): few numpy calls, cache-sized


@dataclass(frozen=True)
class _Boxes:
    """N rectangles (of zero width for polygon edges), each with the offset D of its polygon."""

    kind: np.ndarray  # (N,) AXIS_RECT or ROTATED_RECT
    center: np.ndarray  # (N, 2)
    axis: np.ndarray  # (N, 2) unit vector along the first side
    half: np.ndarray  # (N, 2) half sizes along axis and normal; along x and y if axis-aligned
    offset: np.ndarray  # (N,) D of the polygon, px
    bbox: np.ndarray  # (N, 4) x_min, y_min, x_max, y_max of the rectangle itself


@dataclass(frozen=True)
class _Stack:
    """Crops of G boxes stacked row by row; coordinates are relative to each box's centre and in units
    of its offset D."""

    rows: np.ndarray  # (G,) rows into the _Boxes being drawn
    heights: np.ndarray  # (G,) crop heights; stacked rows of box g: start[g] .. start[g] + heights[g] - 1
    start: np.ndarray  # (G,) first stacked row of each box
    ys: np.ndarray  # (R,) float32 y of each stacked row
    xs: np.ndarray  # (G, Wc) float32 x of each column of each box's crop
    crops: np.ndarray  # (G, 4) x0, y0, x1, y1 inclusive, in map pixels

    def per_row(self, values: np.ndarray) -> np.ndarray:
        """(G, ...) per-box values -> (R, ...), repeated for each stacked row of the box."""
        return np.repeat(values, self.heights, axis=0)


def _reaches(bbox: np.ndarray, offsets: np.ndarray, height: int, width: int) -> np.ndarray:
    """(N,) True where an (N, 4) bbox grown by its offset overlaps the map."""
    return (
        (bbox[:, 0] - offsets <= width - 1)
        & (bbox[:, 1] - offsets <= height - 1)
        & (bbox[:, 2] + offsets >= 0)
        & (bbox[:, 3] + offsets >= 0)
    )


def _crop_boxes(bbox: np.ndarray, offsets: np.ndarray, height: int, width: int) -> np.ndarray:
    """Inclusive (N, 4) int x0, y0, x1, y1: each bbox grown by its offset, clipped to the map."""
    grow = offsets[:, None] * np.array([-1.0, -1.0, 1.0, 1.0])
    crops = np.concatenate([np.floor(bbox[:, :2] + grow[:, :2]), np.ceil(bbox[:, 2:] + grow[:, 2:])], axis=1)
    return np.clip(crops, 0, [width - 1, height - 1, width - 1, height - 1]).astype(np.int64)


def draw_border_field(
    border: FloatMap, measures: PolygonMeasures, offsets: np.ndarray, drawn: np.ndarray
) -> None:
    """Fill (H, W) ``border`` with ``max_p (1 - d_p / D_p)`` over drawn polygons: >= 0 inside them and
    within ``D_p`` of them, -1 where no polygon reaches."""
    height, width = border.shape
    border.fill(-1.0)
    general = np.flatnonzero(
        drawn & (measures.kind == GENERAL) & _reaches(measures.bbox, offsets, height, width)
    )
    polygons = _points_of(measures, general)
    # Interiors first: the fill overwrites, the fields below are max-pasted. Vertices are rounded to
    # pixels, which only matters within 0.5 px of an edge, where the edge's own field is >= 1 - 0.5 / D.
    interiors = [ring for stacked in polygons for ring in np.round(stacked).astype(np.int32)]
    fill_polygons(
        border, interiors, measures.bbox[general].round().astype(np.int64), np.zeros(len(general), bool), 0.0
    )
    rects = np.flatnonzero(drawn & (measures.kind != GENERAL))
    rect_boxes = _Boxes(
        measures.kind[rects],
        measures.center[rects],
        measures.axis[rects],
        measures.half[rects],
        offsets[rects],
        measures.bbox[rects],
    )
    _draw_boxes(border, rect_boxes, _rect_values)
    _draw_boxes(border, _edges_of(polygons, offsets[general], height, width), _segment_values)


def _points_of(measures: PolygonMeasures, rows: np.ndarray) -> list[np.ndarray]:
    """(G, K, 2) points of the sorted ``rows``, one array per point count, in row order."""
    picked = []
    for group_rows, stacked in measures.groups:
        inside = (rows >= group_rows[0]) & (rows <= group_rows[-1])  # groups are consecutive rows
        if inside.any():
            picked.append(stacked[rows[inside] - group_rows[0]])
    return picked


def _edges_of(polygons: list[np.ndarray], offsets: np.ndarray, height: int, width: int) -> _Boxes:
    """Every edge of ``polygons`` ((G, K, 2) arrays) that comes within its polygon's offset of the
    (height, width) map, as a zero-width rectangle with that offset."""
    empty = np.zeros((0, 2))
    if not polygons:
        return _Boxes(np.zeros(0, np.int8), empty, empty, empty, np.zeros(0), np.zeros((0, 4)))
    start = np.concatenate([stacked.reshape(-1, 2) for stacked in polygons])  # (E, 2)
    end = np.concatenate([np.roll(stacked, -1, axis=1).reshape(-1, 2) for stacked in polygons])
    edge_offsets = np.repeat(offsets, [stacked.shape[1] for stacked in polygons for _ in stacked])
    start, end, near = _clip_segments(start, end, edge_offsets + 1, height, width)
    start, end, edge_offsets = start[near], end[near], edge_offsets[near]
    delta = end - start
    length = np.hypot(delta[:, 0], delta[:, 1])
    with np.errstate(invalid="ignore", divide="ignore"):
        axis = np.where(length[:, None] > 0, delta / length[:, None], [1.0, 0.0])
    aligned = np.minimum(np.abs(axis[:, 0]), np.abs(axis[:, 1])) <= AXIS_SIN
    half = np.where(
        aligned[:, None], np.abs(delta) / 2, np.stack([length / 2, np.zeros_like(length)], axis=1)
    )
    bbox = np.concatenate([np.minimum(start, end), np.maximum(start, end)], axis=1)
    kind = np.where(aligned, AXIS_RECT, ROTATED_RECT).astype(np.int8)
    return _Boxes(kind, (start + end) / 2, axis, half, edge_offsets, bbox)


def _clip_segments(
    start: np.ndarray, end: np.ndarray, margin: np.ndarray, height: int, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clip (E, 2) segments to the map grown by ``margin`` (E,) (Liang-Barsky); False where none is left.

    A map pixel within the margin of a segment has its nearest point on the clipped part, so the
    field on the map is unchanged; the clipped segment keeps its centre near the map, where float32
    stays exact (an edge reaching 1e7 px away would otherwise lose about 0.03 of the field).
    """
    delta = end - start
    low, high = np.zeros(len(start)), np.ones(len(start))
    for axis, size in ((0, width), (1, height)):
        lo, hi, d = -margin - start[:, axis], size - 1 + margin - start[:, axis], delta[:, axis]
        with np.errstate(divide="ignore", invalid="ignore"):
            t1, t2 = lo / d, hi / d
        moving = d != 0
        low = np.where(moving, np.maximum(low, np.minimum(t1, t2)), low)
        high = np.where(moving, np.minimum(high, np.maximum(t1, t2)), high)
        high = np.where(~moving & ((lo > 0) | (hi < 0)), -1.0, high)  # parallel to the axis and outside
    near = low <= high
    return start + low[:, None] * delta, start + high[:, None] * delta, near


def _draw_boxes(
    border: FloatMap, boxes: _Boxes, rotated_values: Callable[[_Stack, _Boxes], FloatMap]
) -> None:
    """Max-paste the fields of ``boxes``: axis-aligned ones by the separable form, the others by
    ``rotated_values``."""
    if not len(boxes.kind):
        return
    height, width = border.shape
    crops = _crop_boxes(boxes.bbox, boxes.offset, height, width)
    reachable = _reaches(boxes.bbox, boxes.offset, height, width)
    for kind, values in ((AXIS_RECT, _axis_rect_values), (ROTATED_RECT, rotated_values)):
        for batch in _batches(np.flatnonzero(reachable & (boxes.kind == kind)), crops):
            stack = _stack(batch, crops[batch], boxes.center[batch], 1.0 / boxes.offset[batch])
            _paste(border, values(stack, boxes), stack)


def _batches(rows: np.ndarray, crops: np.ndarray) -> list[np.ndarray]:
    """Split rows, sorted by crop width, into batches whose stacked crops stay under ``_BATCH_PIXELS``."""
    if not len(rows):
        return []
    sizes = crops[rows, 2:] - crops[rows, :2] + 1  # (R, 2) w, h
    order = np.argsort(sizes[:, 0], kind="stable")
    widths, heights = sizes[order, 0], sizes[order, 1]
    batches, start = [], 0
    while start < len(rows):
        fits = np.cumsum(heights[start:]) * widths[start:] <= _BATCH_PIXELS  # widths ascend: True, then False
        stop = start + max(len(fits) if fits.all() else int(np.argmin(fits)), 1)
        batches.append(rows[order[start:stop]])
        start = stop
    return batches


def _stack(rows: np.ndarray, crops: np.ndarray, center: np.ndarray, inv: np.ndarray) -> _Stack:
    heights = crops[:, 3] - crops[:, 1] + 1
    start = np.cumsum(heights) - heights
    # row r of box g sits at map y = y0 + (r - start); relative to the centre and scaled by 1 / D
    shift = np.repeat(crops[:, 1] - start - center[:, 1], heights)  # (R,)
    ys = ((np.arange(int(heights.sum())) + shift) * np.repeat(inv, heights)).astype(np.float32)
    width = int((crops[:, 2] - crops[:, 0]).max()) + 1
    xs = ((crops[:, :1] + np.arange(width) - center[:, :1]) * inv[:, None]).astype(np.float32)
    return _Stack(rows, heights, start, ys, xs, crops)


def _paste(border: FloatMap, values: FloatMap, stack: _Stack) -> None:
    """``border = max(border, values)`` on each crop; ``values`` is the (R, Wc) stacked block."""
    x0, y0, x1, y1 = stack.crops.T + [[0], [0], [1], [1]]
    bounds = np.stack([y0, y1, x0, x1, stack.start, stack.start + y1 - y0, x1 - x0], axis=1).tolist()
    for top, bottom, left, right, first, last, width in bounds:
        window = border[top:bottom, left:right]
        cv2.max(window, values[first:last, :width], dst=window)


def _spread(column: np.ndarray, width: int) -> np.ndarray:
    """(R,) -> (R, W), each value repeated along the row.

    ``np.repeat`` is several times faster than letting a ufunc broadcast an (R, 1) operand.
    """
    return np.repeat(column[:, None], width, axis=1)


def _axis_rect_values(stack: _Stack, boxes: _Boxes) -> FloatMap:
    """(R, Wc) ``1 - d / D`` of axis-aligned rectangles, separable in x and y; >= 0 inside."""
    half = (boxes.half[stack.rows] / boxes.offset[stack.rows, None]).astype(np.float32)  # (G, 2)
    du = np.abs(stack.xs) - half[:, :1]  # (G, Wc) signed distance to the nearer vertical side
    dv = np.abs(stack.ys) - stack.per_row(half[:, 1])  # (R,) same for the horizontal sides
    width = stack.xs.shape[1]
    values = _spread(np.clip(dv + 1, 0, 1), width)  # (R, Wc): 1 - inside distance, clamped at 0
    np.maximum(values, stack.per_row(np.clip(du + 1, 0, 1)), out=values)
    outside = _spread(np.square(np.maximum(dv, 0)), width)  # (R, Wc): squared distance outside
    outside += stack.per_row(np.square(np.maximum(du, 0)))
    cv2.sqrt(outside, dst=outside)
    values -= outside
    return values


def _rect_values(stack: _Stack, boxes: _Boxes) -> FloatMap:
    """(R, Wc) ``1 - d / D`` of rotated rectangles from the signed box distance in their (u, v) frame."""
    ax, ay = boxes.axis[stack.rows].T.astype(np.float32)  # (G,) each
    half = (boxes.half[stack.rows] / boxes.offset[stack.rows, None]).astype(np.float32)  # (G, 2)
    width = stack.xs.shape[1]
    du = _spread(stack.ys * stack.per_row(ay), width)  # (R, Wc) coordinate along the first edge
    du += stack.per_row(stack.xs * ax[:, None])
    dv = _spread(stack.ys * stack.per_row(ax), width)  # (R, Wc) coordinate along the normal
    dv -= stack.per_row(stack.xs * ay[:, None])
    for signed, side in ((du, stack.per_row(half[:, :1])), (dv, stack.per_row(half[:, 1:]))):
        np.abs(signed, out=signed)
        signed -= side  # signed distance to the nearer of two opposite sides
    values = np.maximum(du, dv)
    values += 1
    cv2.threshold(values, 1, 1, cv2.THRESH_TRUNC, dst=values)
    cv2.threshold(values, 0, 0, cv2.THRESH_TOZERO, dst=values)  # 1 - inside distance, clamped at 0
    for signed in (du, dv):
        cv2.threshold(signed, 0, 0, cv2.THRESH_TOZERO, dst=signed)
    values -= cv2.magnitude(du, dv)  # distance outside (SIMD hypot: np.hypot is several times slower)
    return values


def _segment_values(stack: _Stack, boxes: _Boxes) -> FloatMap:
    """(R, Wc) ``1 - d / D`` of segments (zero-width rotated rectangles), ``d`` the distance to them."""
    ax, ay = boxes.axis[stack.rows].T.astype(np.float32)  # (G,) each
    half = (boxes.half[stack.rows, :1] / boxes.offset[stack.rows, None]).astype(np.float32)  # (G, 1)
    width = stack.xs.shape[1]
    du = _spread(stack.ys * stack.per_row(ay), width)  # (R, Wc) coordinate along the segment
    du += stack.per_row(stack.xs * ax[:, None])
    dv = _spread(stack.ys * stack.per_row(ax), width)  # (R, Wc) coordinate across it
    dv -= stack.per_row(stack.xs * ay[:, None])
    np.abs(du, out=du)
    du -= stack.per_row(half)
    cv2.threshold(du, 0, 0, cv2.THRESH_TOZERO, dst=du)  # beyond the nearer end
    values = cv2.magnitude(du, dv)
    np.subtract(np.float32(1), values, out=values)
    return values  # type: ignore[return-value]  # cv2 stubs: MatLike has no dtype
