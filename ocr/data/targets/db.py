"""DB (Differentiable Binarization) training targets from text polygons, vectorised.

Semantics are MhLiao/DB's ``MakeSegDetectionData`` + ``MakeBorderMap`` with the DB offset
``D = area * (1 - r^2) / perimeter``:

- ``prob_map`` is 1 inside each drawn polygon shrunk by ``D`` (pyclipper semantics, round joins);
- ``prob_mask`` is 0 on the polygons that are not drawn: ignored, short side of the minimum-area
  rectangle below ``min_text_size``, area below 1 px^2, or nothing left after shrinking;
- ``thresh_map`` is ``thresh_min + (thresh_max - thresh_min) * max_p (1 - min(d_p / D_p, 1))``, with
  ``d_p`` the distance from the pixel to the border of drawn polygon ``p``;
- ``thresh_mask`` is 1 inside the drawn polygons dilated by ``D`` (pixels within ``D_p`` of polygon ``p``).

As in MhLiao/DB, polygons that are not drawn get no threshold border. Pixel centres sit at integer
coordinates, as in ``cv2.fillPoly``. Why it is fast: measurements and the shrink of convex polygons are
array operations over all polygons (pyclipper only for the others); the threshold field is a closed
form evaluated for batches of rectangles, and of the edges of other polygons, at once
(``ocr.data.targets.border``); ``thresh_mask`` comes from that field instead of a second pyclipper
offset and fill; and the four maps share one allocation.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np
import numpy.typing as npt

from ocr.data.targets.border import draw_border_field
from ocr.data.targets.geometry import (
    AXIS_RECT,
    PolygonMeasures,
    fill_polygons,
    measure_polygons,
    offset_polygon,
    shrink_convex,
)
from ocr.types import TargetKey, TargetParams

__all__ = ["make_db_targets"]

FloatMap = npt.NDArray[np.float32]
IntPolygon = npt.NDArray[np.int32]


def make_db_targets(
    polygons: Sequence[np.ndarray],
    ignore: Sequence[bool],
    height: int,
    width: int,
    params: TargetParams = TargetParams(),
) -> dict[TargetKey, FloatMap]:
    """Build the four DB target maps of one image; never raises on degenerate geometry.

    Args:
        polygons: (K, 2) x, y arrays in target pixels; ones with < 3 points or non-finite
            coordinates are skipped.
        ignore: one don't-care flag per polygon.
        height: map height.
        width: map width.
        params: shrink ratio, threshold-map range and minimum text size (``ocr.types.TargetParams``).

    Returns:
        ``prob_map``, ``prob_mask``, ``thresh_map``, ``thresh_mask``: (height, width) float32 arrays,
        contiguous views of one (4, height, width) block (copy one to keep it without the others).

    Raises:
        ValueError: when the size is not positive, ``ignore`` and ``polygons`` differ in length or a
            polygon is not (K, 2) numbers.
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"make_db_targets: expected a positive size, got height={height}, width={width}")
    if len(ignore) != len(polygons):
        raise ValueError(
            f"make_db_targets: expected one ignore flag per polygon, got {len(ignore)} for {len(polygons)}"
        )
    measures = measure_polygons(polygons)
    offsets = measures.area * (1.0 - params.shrink_ratio**2) / np.maximum(measures.perimeter, 1e-12)
    flags = np.asarray(ignore, dtype=bool).reshape(-1)
    drawn = ~flags[measures.index] & (measures.area >= 1.0) & (measures.short_side >= params.min_text_size)
    rings, boxes = _shrink_all(measures, offsets, drawn)
    drawn &= np.array([ring is not None for ring in rings], dtype=bool)
    masked = np.flatnonzero(~drawn)

    # One block for the four maps: a steady stream of calls then reuses the same heap memory instead
    # of page-faulting four fresh arrays in every call (the biggest fixed cost per image).
    prob_map, prob_mask, border, thresh_mask = np.empty((4, height, width), np.float32)
    prob_map.fill(0.0)
    prob_mask.fill(1.0)
    fill_polygons(
        prob_map,
        [ring for i in np.flatnonzero(drawn) if (ring := rings[i]) is not None],  # all of them: drawn
        boxes[drawn],
        measures.kind[drawn] == AXIS_RECT,
        1.0,
    )
    masked_rings = [
        measures.points(i).astype(np.int32) for i in masked.tolist()
    ]  # truncated, like the classic
    masked_boxes = np.array([[*ring.min(axis=0), *ring.max(axis=0)] for ring in masked_rings]).reshape(-1, 4)
    fill_polygons(prob_mask, masked_rings, masked_boxes, measures.kind[masked] == AXIS_RECT, 0.0)
    draw_border_field(border, measures, offsets, drawn)
    cv2.threshold(border, -1e-6, 1.0, cv2.THRESH_BINARY, dst=thresh_mask)
    cv2.threshold(border, 0.0, 0.0, cv2.THRESH_TOZERO, dst=border)  # max(border, 0), faster than numpy's
    border *= np.float32(params.thresh_max - params.thresh_min)
    border += np.float32(params.thresh_min)
    return {"prob_map": prob_map, "prob_mask": prob_mask, "thresh_map": border, "thresh_mask": thresh_mask}


def _shrink_all(
    measures: PolygonMeasures, offsets: np.ndarray, drawn: np.ndarray
) -> tuple[list[IntPolygon | None], np.ndarray]:
    """Shrunk ring of every drawn polygon (``None`` when empty or not drawn) and its (N, 4) int bbox.

    Convex polygons (word boxes, rectangles or not) are shrunk as arrays by ``shrink_convex``, which
    reproduces pyclipper on them; the polygons it flags (non-convex ones among them) go through
    pyclipper itself.
    """
    rings: list[IntPolygon | None] = [None] * len(measures.index)
    boxes = np.zeros((len(measures.index), 4), np.int64)
    for rows, stacked in measures.groups:
        use = np.flatnonzero(drawn[rows])
        vertices, ok = shrink_convex(stacked[use], offsets[rows[use]])
        boxes[rows[use]] = np.concatenate([vertices.min(axis=1), vertices.max(axis=1)], axis=1)
        for r, ring in zip(rows[use[ok]].tolist(), vertices[ok], strict=True):
            rings[r] = ring
        for g in use[~ok].tolist():
            ring = rings[rows[g]] = offset_polygon(stacked[g], -offsets[rows[g]])
            if ring is not None:
                boxes[rows[g]] = [*ring.min(axis=0), *ring.max(axis=0)]
    return rings, boxes
