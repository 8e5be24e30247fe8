"""DB post-processing: probability map -> text polygons + scores in original px.

Pixel convention: a pixel's index is its coordinate (as for ``cv2.fillPoly``, which draws the targets),
so a contour traced on the thresholded map lies on the same coordinates the target polygon was drawn at.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

import cv2
import numpy as np
import numpy.typing as npt
import pyclipper
from cv2.typing import MatLike

from ocr.geometry import to_original
from ocr.types import Geometry, Polygon
from ocr.utils.config_types import NonNegativeFloat, PositiveInt, Probability, check_arguments
from ocr.utils.errors import ConfigValueError

if TYPE_CHECKING:  # post-processing worker processes run without importing torch
    from torch import Tensor

__all__ = [
    "DBPostProcessor",
    "ProbMap",
    "boxes_from_bitmap",
    "unclip_polygon",
    "score_polygon",
    "min_area_box",
]

OutputMode = Literal["polygon", "box"]
OUTPUT_MODES = ("polygon", "box")
# Douglas-Peucker tolerance for polygon mode, relative to the contour perimeter (DB reference: 0.01).
APPROX_EPSILON_RATIO = 0.01
# pyclipper works on integers: offset in 1/256 px so the result keeps sub-pixel precision.
CLIPPER_SCALE = 256
ARC_TOLERANCE_PX = 0.25


class ProbMap(Protocol):
    """A (H, W) probability map as scoring reads it: its shape and float32 crops. A float32 array is one;
    ``ocr.evaluation.host_work.CodedProbMap`` decodes only the crops it is asked for."""

    @property
    def shape(self) -> tuple[int, ...]:
        """(H, W)."""
        ...

    def __getitem__(self, crop: tuple[slice, slice]) -> npt.NDArray[np.float32]:
        """The float32 probabilities of a (rows, columns) crop."""
        ...


def score_polygon(prob_map: ProbMap, polygon: Polygon) -> float:
    """Mean probability inside ``polygon`` (input px), computed on its bounding-box crop only."""
    height, width = prob_map.shape
    x0, y0 = np.clip(np.floor(polygon.min(axis=0)).astype(int), 0, [width - 1, height - 1])
    x1, y1 = np.clip(np.ceil(polygon.max(axis=0)).astype(int), 0, [width - 1, height - 1])
    mask = np.zeros((y1 - y0 + 1, x1 - x0 + 1), dtype=np.uint8)
    shifted = np.round(polygon - [x0, y0]).astype(np.int32)
    cv2.fillPoly(mask, [shifted.reshape(-1, 1, 2)], 1)
    return float(cv2.mean(prob_map[y0 : y1 + 1, x0 : x1 + 1], mask)[0])


def unclip_polygon(polygon: Polygon, unclip_ratio: float) -> Polygon | None:
    """Expand ``polygon`` by ``D = area * unclip_ratio / perimeter`` (rounded joins): (K, 2) float32, the
    largest piece when the offset splits it, or None when it vanishes."""
    area = abs(cv2.contourArea(polygon.astype(np.float32)))
    perimeter = cv2.arcLength(polygon.astype(np.float32).reshape(-1, 1, 2), True)
    if perimeter <= 0:
        return None
    offset = pyclipper.PyclipperOffset(arc_tolerance=ARC_TOLERANCE_PX * CLIPPER_SCALE)
    fixed_point = np.round(polygon.astype(np.float64) * CLIPPER_SCALE).astype(np.int64)
    offset.AddPath(fixed_point.tolist(), pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    pieces = offset.Execute(area * unclip_ratio / perimeter * CLIPPER_SCALE)
    if not pieces:
        return None
    largest = max(pieces, key=lambda p: abs(cv2.contourArea(np.asarray(p, dtype=np.float32))))
    return (np.asarray(largest, dtype=np.float64) / CLIPPER_SCALE).astype(np.float32).reshape(-1, 2)


def min_area_box(polygon: Polygon, extend_ends: float = 0.0) -> tuple[Polygon, float]:
    """Minimum-area rectangle of ``polygon``: (4, 2) float32 corners clockwise from top-left, short side.

    ``extend_ends`` moves both ends of the long side out by that many short sides: the isotropic unclip
    gives back a text line's height but not all of its length, since the network's kernel fades before a
    line's first and last glyphs (thin ``1``, ``:``, ``-``), and the score counts those characters.
    """
    center_xy, (width, height), angle = cv2.minAreaRect(polygon.astype(np.float32).reshape(-1, 1, 2))
    short = min(width, height)
    grow = 2.0 * extend_ends * short
    size = (width + grow, height) if width >= height else (width, height + grow)
    corners = cv2.boxPoints((center_xy, size, angle))  # (4, 2)
    center = corners.mean(axis=0)
    angles = np.arctan2(corners[:, 1] - center[1], corners[:, 0] - center[0])
    corners = corners[np.argsort(angles)]  # clockwise on screen, since y points down
    first = int(np.argmin(corners.sum(axis=1)))
    return np.roll(corners, -first, axis=0).astype(np.float32), float(short)


def _candidate(contour: MatLike, output: OutputMode) -> Polygon | None:
    """The polygon to score for one (N, 1, 2) int32 contour of ``cv2.findContours``: the contour itself
    (box) or its simplification (polygon), as (K, 2) float32."""
    if output == "polygon":
        epsilon = APPROX_EPSILON_RATIO * cv2.arcLength(contour, True)
        contour = cv2.approxPolyDP(contour, epsilon, True)
    points = contour.reshape(-1, 2).astype(np.float32)
    return points if len(points) >= 3 else None


def boxes_from_bitmap(
    prob_map: ProbMap,
    bitmap: npt.NDArray[np.bool_] | npt.NDArray[np.uint8],
    *,
    box_thresh: float,
    unclip_ratio: float,
    max_candidates: int,
    min_size: float,
    output: OutputMode,
    extend_ends: float = 0.0,
    relative_box_thresh: float = 0.0,
    small_box_thresh: float = 0.0,
    small_side: float = 0.0,
) -> tuple[list[Polygon], list[float]]:
    """Text regions of one image: (K, 2) float32 polygons in input px and their scores.

    ``bitmap`` is the (H, W) ``prob_map > thresh``; the ``max_candidates`` largest contours whose min-area
    rectangle's short side is at least ``min_size`` and whose mean probability is at least ``box_thresh``
    are unclipped, then kept as polygons or (``output="box"``) as min-area rectangles. Of those, a region
    scoring under ``relative_box_thresh`` times the image's median score is dropped: a floor that follows
    the image (high on a clean scan, lower on a photo). Then a region scoring under ``small_box_thresh``
    whose short side is under ``small_side`` times the median of the image's is dropped: specks and pen
    marks, thinner than the text lines around them.
    """
    contours, _ = cv2.findContours(
        bitmap.astype(np.uint8, copy=False), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE
    )
    contours = sorted(contours, key=cv2.contourArea, reverse=True)[:max_candidates]
    polygons: list[Polygon] = []
    scores: list[float] = []
    shorts: list[float] = []
    for contour in contours:
        candidate = _candidate(contour, output)
        if candidate is None or min_area_box(candidate)[1] < min_size:
            continue
        score = score_polygon(prob_map, candidate)
        if score < box_thresh:
            continue
        expanded = unclip_polygon(candidate, unclip_ratio)
        if expanded is None or len(expanded) < 3:
            continue
        box, short = min_area_box(expanded, extend_ends)
        polygons.append(box if output == "box" else expanded)
        scores.append(score)
        shorts.append(short)
    score_of, short_of = np.asarray(scores, dtype=np.float64), np.asarray(shorts, dtype=np.float64)
    keep = np.ones(len(polygons), dtype=bool)
    if relative_box_thresh > 0 and keep.any():
        keep &= score_of >= relative_box_thresh * np.median(score_of)
    if small_box_thresh > 0 and keep.any():  # the median line of the regions the floor kept
        keep &= (score_of >= small_box_thresh) | (short_of >= small_side * np.median(short_of[keep]))
    return [p for p, k in zip(polygons, keep, strict=True) if k], score_of[keep].tolist()


class DBPostProcessor:
    """:func:`boxes_from_bitmap` on the map binarised at ``thresh``, results mapped to original px."""

    def __init__(
        self,
        *,
        thresh: Probability,
        box_thresh: Probability,
        unclip_ratio: NonNegativeFloat,  # 0: no expansion
        max_candidates: PositiveInt,
        min_size: NonNegativeFloat,
        output: OutputMode,
        extend_ends: NonNegativeFloat = 0.0,
        relative_box_thresh: Probability = 0.0,  # 0: off
        small_box_thresh: Probability = 0.0,  # 0: off
        small_side: Probability = 0.0,
    ) -> None:
        if output not in OUTPUT_MODES:
            raise ConfigValueError(f"postprocess.output: expected one of {OUTPUT_MODES}, got {output!r}")
        if extend_ends and output != "box":
            raise ConfigValueError(
                f"postprocess.extend_ends: applies to output=box only, got {extend_ends} "
                f"with output={output!r}"
            )
        # The bounds are the annotations above; a config is checked against them when it is read.
        check_arguments(
            DBPostProcessor,
            "postprocess",
            thresh=thresh,
            box_thresh=box_thresh,
            unclip_ratio=unclip_ratio,
            max_candidates=max_candidates,
            min_size=min_size,
            extend_ends=extend_ends,
            relative_box_thresh=relative_box_thresh,
            small_box_thresh=small_box_thresh,
            small_side=small_side,
        )
        self.thresh = thresh
        self.box_thresh = box_thresh
        self.unclip_ratio = unclip_ratio
        self.max_candidates = max_candidates
        self.min_size = min_size
        self.output: OutputMode = output
        self.extend_ends = extend_ends
        self.relative_box_thresh = relative_box_thresh
        self.small_box_thresh = small_box_thresh
        self.small_side = small_side

    def __call__(self, prob_map: Tensor, geometry: list[Geometry]) -> list[tuple[list[Polygon], list[float]]]:
        """(B, 1, H, W) probabilities, any device, and one geometry per image -> per image :meth:`image`
        (evaluation and prediction run it in a worker pool instead)."""
        if prob_map.ndim != 4 or prob_map.shape[1] != 1:
            raise ValueError(f"prob_map: expected (B, 1, H, W), got {tuple(prob_map.shape)}")
        if len(geometry) != prob_map.shape[0]:
            raise ValueError(
                f"geometry: expected {prob_map.shape[0]} records (batch size), got {len(geometry)}"
            )
        maps = prob_map.detach().float().cpu().numpy()[:, 0]  # (B, H, W), one transfer per batch
        return [self.image(m, m > self.thresh, g) for m, g in zip(maps, geometry, strict=True)]

    def image(
        self,
        prob_map: ProbMap,
        bitmap: npt.NDArray[np.bool_] | npt.NDArray[np.uint8],
        geometry: Geometry,
    ) -> tuple[list[Polygon], list[float]]:
        """One (H, W) map and its bitmap: polygons (K, 2) float32 in original px, clipped to the image,
        and their scores."""
        polygons_px, scores = boxes_from_bitmap(
            prob_map,
            bitmap,
            box_thresh=self.box_thresh,
            unclip_ratio=self.unclip_ratio,
            max_candidates=self.max_candidates,
            min_size=self.min_size,
            output=self.output,
            extend_ends=self.extend_ends,
            relative_box_thresh=self.relative_box_thresh,
            small_box_thresh=self.small_box_thresh,
            small_side=self.small_side,
        )
        upper = np.array([geometry.orig_width, geometry.orig_height], dtype=np.float32)
        return [np.clip(p, 0.0, upper).astype(np.float32) for p in to_original(polygons_px, geometry)], scores
