"""Where the score goes: CLEval counts per image, the worst images and P/R/H per text-height bucket.

``runners/test.py`` writes ``errors.json``, ``errors_images.csv`` and ``errors_buckets.csv`` into the
run directory, and ``report.html`` shows the bucket table and the worst images (docs/reporting.md).

A box's height is the short side of its minimum-area rectangle in original px. A GT's characters go to
its own bucket (recall: characters covered by a matched detection over all characters); a matched
detection goes to the bucket of the matched GT with the most character centres inside it, an unmatched
one to the bucket of its own height (precision: covered characters over the characters charged to the
bucket's detections). Bucket scores divide character counts summed over the dataset, as upstream mode
does; over all buckets together they give the upstream-mode P/R/H.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from ocr.metrics.cleval.evaluate import SCORE_FIELDS, ImageMatch, match_image, scores_from_counts, summarise
from ocr.metrics.cleval.options import CLEvalOptions
from ocr.metrics.cleval.outcomes import box_outcomes, count_outcomes
from ocr.utils.io import atomic_write_csv, atomic_write_json

__all__ = ["ScoreAnalysis", "analyse_records", "bucket_labels", "box_heights", "write_analysis"]

ANALYSIS_NAME = "errors.json"
_SUMMED = tuple(
    "gt_chars missed_chars fp_chars missed_words split_words merged_words false_positive_words".split()
)


@dataclass(frozen=True)
class ImageErrors:
    """One image's CLEval counts (don't-care boxes excluded)."""

    image_id: str
    precision: float
    recall: float
    hmean: float
    gt_words: int
    det_words: int
    gt_chars: int
    missed_chars: int  # GT characters no matched detection covers
    fp_chars: int  # characters charged for detections that match no GT
    missed_words: int
    split_words: int  # GT matched by two or more detections
    merged_words: int  # GT whose one detection also covers other GT
    false_positive_words: int


@dataclass(frozen=True)
class BucketScore:
    """P/R/H of one text-height bucket and the counts they come from."""

    bucket: str
    gt_words: int
    gt_chars: int
    tp_chars: int
    det_chars: int
    precision: float
    recall: float
    hmean: float


@dataclass(frozen=True)
class ScoreAnalysis:
    """The dataset totals (the metric's own mode), buckets, worst images and every image's counts."""

    mode: str
    totals: dict[str, float]
    buckets: list[BucketScore]
    worst: list[str]
    images: list[ImageErrors]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form written to ``errors.json`` and shown by ``report.html``."""
        return asdict(self)


def bucket_labels(edges: Sequence[float]) -> list[str]:
    """``[8, 12]`` -> ``["<8", "8-12", ">=12"]``."""
    inner = [f"{lo:g}-{hi:g}" for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    return [f"<{edges[0]:g}", *inner, f">={edges[-1]:g}"]


def box_heights(polygons: Sequence[npt.ArrayLike]) -> npt.NDArray[np.float64]:
    """(N,) short side of each (K, 2) polygon's minimum-area rectangle."""
    return np.array(
        [min(cv2.minAreaRect(np.asarray(p, dtype=np.float32).reshape(-1, 1, 2))[1]) for p in polygons],
        dtype=np.float64,
    )


def _image_errors(image_id: str, image: ImageMatch, num_gt: int, num_det: int) -> ImageErrors:
    result = image.result
    outcomes = box_outcomes(image, num_gt, num_det)
    gt_counts, det_counts = count_outcomes(outcomes.gt), count_outcomes(outcomes.det)
    return ImageErrors(
        image_id=image_id,
        precision=result.precision,
        recall=result.recall,
        hmean=result.hmean,
        gt_words=result.num_gt,
        det_words=result.num_det,
        gt_chars=result.num_gt_chars,
        missed_chars=result.num_gt_chars - result.tp_chars,
        fp_chars=result.fp_chars,
        missed_words=gt_counts["missed"],
        split_words=gt_counts["split"],
        merged_words=gt_counts["merged"],
        false_positive_words=det_counts["false_positive"],
    )


def analyse_records(
    records: Sequence[Mapping[str, Any]], options: CLEvalOptions, edges: Sequence[float], worst: int
) -> ScoreAnalysis:
    """Score each labelled record of the report collector and break the score down into the buckets of
    the increasing px ``edges`` (``[8, 12]``: < 8, 8-12, >= 12), naming the ``worst`` lowest-hmean images."""
    if not edges or any(b <= a for a, b in zip(edges[:-1], edges[1:], strict=True)):
        raise ValueError(f"report.height_buckets: expected increasing px edges, got {list(edges)}")
    labels = bucket_labels(edges)
    # Per bucket: GT words, GT chars, TP chars, recall penalty, det chars, precision penalty.
    sums = np.zeros((len(labels), 6), dtype=np.float64)
    images, results = [], []
    for record in records:
        preds, gts = list(record["polygons"]), list(record["gt_polygons"])
        image = match_image(preds, gts, record["gt_ignore"], record["gt_texts"], options)
        images.append(_image_errors(record["image_id"], image, len(gts), len(preds)))
        results.append(image.result)
        chars = image.chars
        gt_bucket = np.searchsorted(edges, box_heights([gts[i] for i in image.gt_index]), side="right")
        det_heights = box_heights([preds[i] for i in image.det_index])
        det_bucket = np.where(
            chars.det_gt >= 0,
            gt_bucket[np.maximum(chars.det_gt, 0)] if len(gt_bucket) else 0,
            np.searchsorted(edges, det_heights, side="right"),
        )
        scored_gt = ~image.gt_dc
        np.add.at(sums[:, 0], gt_bucket[scored_gt], 1)
        np.add.at(sums[:, 1], gt_bucket, chars.gt_chars)
        np.add.at(sums[:, 2], gt_bucket, chars.gt_tp_chars)
        np.add.at(sums[:, 3], gt_bucket, chars.gt_recall_penalty)
        np.add.at(sums[:, 4], det_bucket, chars.det_chars)
        np.add.at(sums[:, 5], det_bucket, chars.det_precision_penalty)
    buckets = []
    for label, (words, gt_chars, tp, r_penalty, det_chars, p_penalty) in zip(labels, sums, strict=True):
        scores = scores_from_counts(tp, r_penalty, p_penalty, gt_chars, det_chars)
        buckets.append(BucketScore(label, int(words), int(gt_chars), int(tp), int(det_chars), *scores))
    dataset = summarise(results, options.mode)
    totals = {k: getattr(dataset, k) for k in SCORE_FIELDS}
    totals |= {k: sum(getattr(i, k) for i in images) for k in _SUMMED}
    ranked = sorted(images, key=lambda i: (i.hmean, i.image_id))
    return ScoreAnalysis(options.mode, totals, buckets, [i.image_id for i in ranked[:worst]], images)


def _csv_rows(rows: Sequence[Any]) -> list[list[Any]]:
    return [list(asdict(rows[0])) if rows else [], *(list(asdict(r).values()) for r in rows)]


def write_analysis(directory: Path, analysis: ScoreAnalysis) -> Path:
    """Write ``errors.json``, ``errors_images.csv`` and ``errors_buckets.csv``; returns the JSON's path."""
    atomic_write_csv(directory / "errors_images.csv", _csv_rows(analysis.images))
    atomic_write_csv(directory / "errors_buckets.csv", _csv_rows(analysis.buckets))
    return atomic_write_json(directory / ANALYSIS_NAME, analysis.to_dict())
