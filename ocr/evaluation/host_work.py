"""What evaluation and prediction do per image on the host, in a worker thread or process: polygons and
scores from the device's bitmap and probabilities, CLEval's per-image counts, the report's small map.

This module and what it imports run without torch, so a worker process that starts fresh (``spawn``)
starts in about a second; the arrays it receives are NumPy.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from ocr.metrics.cleval.evaluate import ImageResult, match_image
from ocr.metrics.cleval.options import CLEvalOptions
from ocr.metrics.cleval.outcomes import BoxOutcomes, box_outcomes
from ocr.models.postprocess import DBPostProcessor, ProbMap
from ocr.types import Geometry, Polygon, Prediction
from ocr.utils.submission import submission_points

__all__ = [
    "CodedProbMap",
    "GroundTruth",
    "HostWork",
    "ImageJob",
    "ImageMaps",
    "ImageOutcome",
    "ImageWorkError",
    "prob_map_in_original_frame",
]


class ImageWorkError(RuntimeError):
    """Post-processing or scoring of one image failed; names the image and the original error."""


@dataclass(frozen=True)
class GroundTruth:
    """One image's labels, in original px, for CLEval and the report."""

    polygons: list[Polygon]
    ignore: list[bool]
    texts: list[str | None]


@dataclass(frozen=True)
class ImageJob:
    """What one image's host work needs besides its maps: the id, input px -> original px ``geometry``, the
    labels to score against (None: predict) and the report preview's long side (0: none)."""

    image_id: str
    geometry: Geometry
    gt: GroundTruth | None
    preview_long_side: int


@dataclass(frozen=True)
class ImageMaps:
    """One image's maps as they reached the host: (H, W) uint8 ``bitmap`` (thresholded on the device) and
    (H, W) ``prob``, float32 or int16 logit codes decoded by the :attr:`HostWork.tables` entry ``table``."""

    bitmap: npt.NDArray[np.uint8]
    prob: npt.NDArray[np.float32] | npt.NDArray[np.int16]
    table: str | None


@dataclass(frozen=True)
class ImageOutcome:
    """One image's result: its job, polygons and scores in original px, CLEval counts and each box's
    outcome (scored jobs), the (h, w) uint8 preview (when asked) and the worker's seconds."""

    job: ImageJob
    prediction: Prediction
    cleval: ImageResult | None
    preview: npt.NDArray[np.uint8] | None
    seconds: float
    boxes: BoxOutcomes | None = None


class CodedProbMap:
    """(H, W) int16 codes of 16-bit logits, decoded only where read by a (65536,) float32 table of the
    device's own ``sigmoid(logit.float())``: exact, at half the bytes of a float32 map."""

    def __init__(self, codes: npt.NDArray[np.int16], table: npt.NDArray[np.float32]) -> None:
        self.codes = codes
        self.table = table

    @property
    def shape(self) -> tuple[int, ...]:
        """(H, W)."""
        return self.codes.shape

    def __getitem__(self, crop: tuple[slice, slice]) -> npt.NDArray[np.float32]:
        """The float32 probabilities of a crop."""
        return self.table[self.codes[crop].view(np.uint16)]


def prob_map_in_original_frame(
    prob: npt.NDArray[np.float32], geometry: Geometry, long_side: int
) -> npt.NDArray[np.uint8]:
    """A (H, W) probability map in input px as uint8 in the original frame, long side ``long_side``. The map
    may be smaller than the network input (it is scaled up to the input first, as a matrix)."""
    scale = long_side / max(geometry.orig_width, geometry.orig_height)
    width = max(1, round(geometry.orig_width * scale))
    height = max(1, round(geometry.orig_height * scale))
    map_to_input = np.diag([geometry.input_width / prob.shape[1], geometry.input_height / prob.shape[0], 1.0])
    matrix = np.diag([scale, scale, 1.0]) @ geometry.matrix @ map_to_input
    warped = cv2.warpPerspective(prob, matrix, (width, height), flags=cv2.INTER_LINEAR)
    return np.clip(np.round(warped * 255), 0, 255).astype(np.uint8)


class HostWork:
    """The per-image host work (``postprocess``, ``cleval`` scoring, ``tables`` by logit dtype name)."""

    def __init__(
        self,
        *,
        postprocess: DBPostProcessor,
        cleval: CLEvalOptions | None,
        tables: Mapping[str, npt.NDArray[np.float32]],
    ) -> None:
        self.postprocess = postprocess
        self.cleval = cleval
        self.tables = dict(tables)

    def __call__(self, job: ImageJob, maps: ImageMaps) -> ImageOutcome:
        """Polygons, scores, CLEval counts and preview of one image (ImageWorkError naming it)."""
        start = time.perf_counter()
        try:
            prob = self._prob_map(maps)
            found, scores = self.postprocess.image(prob, maps.bitmap, job.geometry)
            # Integer pixels, as the submission CSV holds them: every score is the submission's.
            polygons = [submission_points(p) for p in found]
            cleval, boxes = None, None
            if job.gt is not None:
                if self.cleval is None:
                    raise ValueError("a scored image, but no CLEval options were given to the workers")
                match = match_image(polygons, job.gt.polygons, job.gt.ignore, job.gt.texts, self.cleval)
                cleval, boxes = match.result, box_outcomes(match, len(job.gt.polygons), len(polygons))
            preview = None
            if job.preview_long_side > 0:
                preview = prob_map_in_original_frame(prob[:, :], job.geometry, job.preview_long_side)
        except Exception as exc:  # any failure is reported with the image it happened on
            raise ImageWorkError(f"{job.image_id}: {type(exc).__name__}: {exc}") from exc
        prediction = Prediction(image_id=job.image_id, polygons=polygons, scores=scores)
        return ImageOutcome(job, prediction, cleval, preview, time.perf_counter() - start, boxes)

    def _prob_map(self, maps: ImageMaps) -> ProbMap:
        if maps.table is None:
            return maps.prob  # type: ignore[return-value]  # float32 when no table is named
        return CodedProbMap(maps.prob, self.tables[maps.table])  # type: ignore[arg-type]


_WORKER: HostWork | None = None


def init_worker(work: HostWork) -> None:
    """Process-pool initializer: no OpenCV thread pool (one worker per core already), keep ``work``."""
    global _WORKER
    cv2.setNumThreads(0)
    _WORKER = work


def run_in_worker(
    jobs: list[ImageJob], bitmaps: npt.ArrayLike, probs: npt.ArrayLike, table: str | None
) -> list[ImageOutcome]:
    """Process-pool task: the worker's :class:`HostWork` on a run of images, whose (N, H, W) maps arrive
    as tensors in shared memory (read here as NumPy views, without a copy)."""
    if _WORKER is None:  # an internal invariant: the pool always runs init_worker first
        raise RuntimeError("run_in_worker: the worker process was not initialised with init_worker")
    bitmap, prob = np.asarray(bitmaps), np.asarray(probs)
    return [_WORKER(job, ImageMaps(bitmap[i], prob[i], table)) for i, job in enumerate(jobs)]
