"""Oracle for ``ocr.data.targets.db``: the classic per-polygon DBNet target generation, plus word-box layouts.

``reference_db_targets`` re-states MhLiao/DB's ``MakeSegDetectionData`` + ``MakeBorderMap`` one polygon
at a time and with the same structure: shapely area/length, pyclipper offsets, and for the threshold
map a float64 grid over the dilated polygon's bounding box, one clipped distance map per edge stacked
into (K, h, w) and reduced with ``min``. It is deliberately simple and slow; it stands for the classic
implementation in ``scripts/benchmark_targets.py``. The point-to-segment distance is the projection
form (the classic law-of-cosines form gives NaN on vertex pixels).

Deviations from MhLiao/DB, shared with the fast implementation on purpose:
- the short side compared with ``min_text_size`` is that of the minimum-area rectangle (rotation
  invariant), not of the axis-aligned bounding box;
- degenerate polygons (< 3 points, non-finite, empty offsets) are masked or skipped instead of raising,
  and polygons are not clipped to the image (sanitation upstream does that geometrically).

As in MhLiao/DB, ignored, too-small, near-zero-area (< 1 px^2) and empty-shrink polygons are masked
out of ``prob_mask`` and get no threshold border (the border map skips every ignore tag).
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np
import numpy.typing as npt
import pyclipper
from shapely.geometry import Polygon as ShapelyPolygon

FloatMap = npt.NDArray[np.float32]


def reference_db_targets(
    polygons: Sequence[np.ndarray],
    ignore: Sequence[bool],
    height: int,
    width: int,
    shrink_ratio: float = 0.4,
    thresh_min: float = 0.3,
    thresh_max: float = 0.7,
    min_text_size: int = 8,
) -> dict[str, FloatMap]:
    """Classic DB targets; same contract as ``ocr.data.targets.db.make_db_targets``."""
    prob_map = np.zeros((height, width), np.float32)
    prob_mask = np.ones((height, width), np.float32)
    border = np.zeros((height, width), np.float32)
    thresh_mask = np.zeros((height, width), np.float32)
    for polygon, is_ignored in zip(polygons, ignore, strict=True):
        pts = np.asarray(polygon, dtype=np.float64).reshape(-1, 2)
        if len(pts) < 3 or not np.isfinite(pts).all():
            continue
        shape = ShapelyPolygon(pts)
        area, length = shape.area, shape.length
        if is_ignored or area < 1 or _short_side(pts) < min_text_size:
            cv2.fillPoly(prob_mask, [pts.astype(np.int32)], 0.0)
            continue
        offset = area * (1 - shrink_ratio**2) / length
        shrunk = _offset(pts, -offset)
        if not shrunk:
            cv2.fillPoly(prob_mask, [pts.astype(np.int32)], 0.0)
            continue
        cv2.fillPoly(prob_map, [np.array(shrunk[0], np.int32)], 1.0)
        _draw_border(pts, offset, border, thresh_mask)
    thresh_map = border * (thresh_max - thresh_min) + thresh_min
    return {
        "prob_map": prob_map,
        "prob_mask": prob_mask,
        "thresh_map": thresh_map,
        "thresh_mask": thresh_mask,
    }


def _short_side(pts: np.ndarray) -> float:
    (_, _), (w, h), _ = cv2.minAreaRect(pts.astype(np.float32))
    return float(min(w, h))


def _offset(pts: np.ndarray, delta: float) -> list[list[list[int]]]:
    offsetter = pyclipper.PyclipperOffset()
    offsetter.AddPath([tuple(p) for p in pts], pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    return offsetter.Execute(delta)


def _draw_border(pts: np.ndarray, offset: float, border: FloatMap, thresh_mask: FloatMap) -> None:
    """MakeBorderMap for one polygon: per-edge normalised distances on the dilated polygon's bbox."""
    dilated = _offset(pts, offset)
    if not dilated:
        return
    ring = np.array(dilated[0], dtype=np.int64)
    cv2.fillPoly(thresh_mask, [ring.astype(np.int32)], 1.0)
    (x0, y0), (x1, y1) = ring.min(axis=0), ring.max(axis=0)
    box_w, box_h = x1 - x0 + 1, y1 - y0 + 1
    local = pts - [x0, y0]
    gx = np.broadcast_to(np.linspace(0, box_w - 1, num=box_w)[None, :], (box_h, box_w))
    gy = np.broadcast_to(np.linspace(0, box_h - 1, num=box_h)[:, None], (box_h, box_w))
    per_edge = np.zeros((len(local), box_h, box_w), dtype=np.float32)
    for k in range(len(local)):
        per_edge[k] = np.clip(_segment_distance(gx, gy, local[k], local[(k + 1) % len(local)]) / offset, 0, 1)
    value = 1.0 - per_edge.min(axis=0)
    height, width = border.shape
    cx0, cy0, cx1, cy1 = max(x0, 0), max(y0, 0), min(x1, width - 1), min(y1, height - 1)
    if cx0 > cx1 or cy0 > cy1:
        return
    window = value[cy0 - y0 : cy1 - y0 + 1, cx0 - x0 : cx1 - x0 + 1]
    border[cy0 : cy1 + 1, cx0 : cx1 + 1] = np.fmax(border[cy0 : cy1 + 1, cx0 : cx1 + 1], window)


def _segment_distance(gx: np.ndarray, gy: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Euclidean distance from every grid point to the segment ``start``-``end``."""
    dx, dy = end - start
    wx, wy = gx - start[0], gy - start[1]
    length_sq = dx * dx + dy * dy
    if length_sq == 0:
        return np.hypot(wx, wy)
    along = np.clip((wx * dx + wy * dy) / length_sq, 0.0, 1.0)
    return np.hypot(wx - along * dx, wy - along * dy)


def rotated_box(cx: float, cy: float, box_w: float, box_h: float, angle_deg: float) -> np.ndarray:
    """Corners (4, 2) float32 of a ``box_w`` x ``box_h`` rectangle centred at (cx, cy), rotated clockwise."""
    a = np.deg2rad(angle_deg)
    axis, normal = np.array([np.cos(a), np.sin(a)]), np.array([-np.sin(a), np.cos(a)])
    corners = [(-1, -1), (1, -1), (1, 1), (-1, 1)]
    pts = [np.array([cx, cy]) + su * box_w / 2 * axis + sn * box_h / 2 * normal for su, sn in corners]
    return np.array(pts, dtype=np.float32)


def receipt_word_boxes(
    rng: np.random.Generator,
    count: int,
    height: int,
    width: int,
    rotated_fraction: float = 0.3,
    max_angle_deg: float = 4.0,
) -> list[np.ndarray]:
    """``count`` receipt-like word quads (4, 2) float32: lines of boxes 8-30 px high and 20-200 px wide.

    Lines fill the page top to bottom; when the page is full the next line starts again near the top
    (so very dense pages overlap a little). A ``rotated_fraction`` of the boxes is slightly rotated.
    """
    boxes: list[np.ndarray] = []
    y = float(rng.uniform(2, 10))
    while len(boxes) < count:
        line_h = 8 + 22 * rng.random() ** 2
        if y + line_h > height - 2:
            y = float(rng.uniform(2, 10))
        x = float(rng.uniform(2, 40))
        while len(boxes) < count:
            box_w = 20 + 180 * rng.random() ** 2
            if x + box_w > width - 2:
                break
            angle = rng.uniform(-max_angle_deg, max_angle_deg) if rng.random() < rotated_fraction else 0.0
            boxes.append(rotated_box(x + box_w / 2, y + line_h / 2, box_w, line_h, angle))
            x += box_w + rng.uniform(6, 20)
        y += line_h + rng.uniform(2, 8)
    return boxes


def jitter_corners(
    rng: np.random.Generator, polygons: Sequence[np.ndarray], max_px: float = 1.0
) -> list[np.ndarray]:
    """Each corner moved by up to ``max_px`` in x and in y (uniform): rectangles become general
    quadrilaterals, as hand labels and perspective augmentation make them."""
    return [(p + rng.uniform(-max_px, max_px, np.shape(p))).astype(np.float32) for p in polygons]
