"""CLEval (Baek et al. 2020, character-level evaluation) for detection, for polygons of any point count,
in two modes (docs/metrics.md): ``upstream``, the reference ``cleval`` 0.1.1 package's rules
micro-averaged over the dataset, and ``competition``, the receipt competition's scorer (pseudo character
counts from each box's minimum-area rectangle, P/R/H the mean of per-image values)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ocr.metrics.cleval.boxes import pad_polygons
from ocr.metrics.cleval.competition import COMPETITION_MIN_POINTS
from ocr.metrics.cleval.geometry import ImageGeometry, measure_image
from ocr.metrics.cleval.match import PairTables, dont_care_detections, match_matrix
from ocr.metrics.cleval.options import MODES, CLEvalOptions, Mode

__all__ = [
    "BoxChars",
    "ImageMatch",
    "ImageResult",
    "DatasetResult",
    "evaluate_image",
    "evaluate_images",
    "match_image",
    "evaluate_dataset",
    "summarise",
    "scores_from_counts",
    "warn_unscored",
    "DONT_CARE_TEXT",
    "COUNT_FIELDS",
    "SCORE_FIELDS",
]

log = logging.getLogger(__name__)

DONT_CARE_TEXT = "###"
# The ImageResult fields a dataset score is made of: character counts in the order scores_from_counts
# takes them (upstream mode sums them), and the per-image scores (competition mode averages them).
COUNT_FIELDS = ("tp_chars", "recall_penalty", "precision_penalty", "num_gt_chars", "num_det_chars")
SCORE_FIELDS = ("precision", "recall", "hmean")


@dataclass(frozen=True)
class ImageResult:
    """CLEval counts and scores of one image (don't-care boxes excluded from every count)."""

    num_gt_chars: int
    num_det_chars: int  # centres inside matched pairs + characters charged for unmatched detections
    tp_chars: int
    fp_chars: int
    recall_penalty: float
    precision_penalty: float
    num_gt: int
    num_det: int
    num_gt_ignored: int
    num_det_ignored: int
    num_split: int
    num_merged: int
    num_dropped_detections: int  # beyond max_detections
    num_skipped_polygons: int  # competition mode: GT and detections with fewer than 4 points, not scored
    precision: float
    recall: float
    hmean: float


@dataclass(frozen=True)
class ImageMatch:
    """One image's score with its pairing: ``result``, the (G, D) ``match`` over the scored boxes, their
    don't-care flags (``gt_dc`` (G,), ``det_dc`` (D,)), each scored box's index in the caller's lists
    (``max_detections`` and competition mode leave some out) and the per-box ``chars``."""

    result: ImageResult
    match: npt.NDArray[np.bool_]
    gt_dc: npt.NDArray[np.bool_]
    det_dc: npt.NDArray[np.bool_]
    gt_index: npt.NDArray[np.intp]
    det_index: npt.NDArray[np.intp]
    chars: BoxChars


@dataclass(frozen=True)
class BoxChars:
    """One image's character counts per scored box ((G,) for GT, (D,) for detections; don't-care boxes hold
    0), summing to the result's ``num_gt_chars``, ``tp_chars``, ``recall_penalty``, ``num_det_chars`` (centre
    hits in matched pairs, or the false-positive cost), ``fp_chars`` and ``precision_penalty``; ``det_gt`` is
    the matched GT with the most centres inside each detection (-1 when unmatched)."""

    gt_chars: npt.NDArray[np.int64]
    gt_tp_chars: npt.NDArray[np.int64]
    gt_recall_penalty: npt.NDArray[np.float64]
    det_chars: npt.NDArray[np.int64]
    det_fp_chars: npt.NDArray[np.int64]
    det_precision_penalty: npt.NDArray[np.float64]
    det_gt: npt.NDArray[np.intp]


@dataclass(frozen=True)
class DatasetResult:
    """Per-image results and the dataset scores of the chosen mode."""

    images: list[ImageResult]
    precision: float
    recall: float
    hmean: float


def scores_from_counts(
    tp: float, recall_penalty: float, precision_penalty: float, num_gt_chars: float, num_det_chars: float
) -> tuple[float, float, float]:
    """(precision, recall, hmean) from character counts; 0 where a denominator is 0."""
    recall = max(0.0, tp - recall_penalty) / num_gt_chars if num_gt_chars > 0 else 0.0
    precision = max(0.0, tp - precision_penalty) / num_det_chars if num_det_chars > 0 else 0.0
    hmean = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, hmean


def evaluate_image(
    pred_polygons: Sequence[npt.ArrayLike],
    gt_polygons: Sequence[npt.ArrayLike],
    gt_ignore: Sequence[bool],
    gt_texts: Sequence[str | None] | None,
    options: CLEvalOptions,
) -> ImageResult:
    """Score one image (:func:`match_image` without the pairing)."""
    return match_image(pred_polygons, gt_polygons, gt_ignore, gt_texts, options).result


def match_image(
    pred_polygons: Sequence[npt.ArrayLike],
    gt_polygons: Sequence[npt.ArrayLike],
    gt_ignore: Sequence[bool],
    gt_texts: Sequence[str | None] | None,
    options: CLEvalOptions,
) -> ImageMatch:
    """Score one image and keep the pairing: (K >= 3, 2) detections and GT in one pixel frame, a don't-care
    flag per GT ("###" also marks one), the transcriptions (upstream counts their characters) or None.
    Competition mode reads float32 and leaves out polygons of fewer than 4 points, as its scorer does.
    ValueError names the polygon: too few points, a wrong shape, non-finite, or mismatched list lengths."""
    if len(gt_ignore) != len(gt_polygons) or (gt_texts is not None and len(gt_texts) != len(gt_polygons)):
        raise ValueError(
            f"CLEval: expected one ignore flag (and text) per GT polygon, got {len(gt_polygons)} polygons, "
            f"{len(gt_ignore)} flags, {None if gt_texts is None else len(gt_texts)} texts"
        )
    limit = options.max_detections
    dropped = 0 if limit is None else max(0, len(pred_polygons) - limit)
    pred_polygons = pred_polygons[:limit]
    texts = list(gt_texts) if gt_texts is not None else [None] * len(gt_polygons)
    gt_dc = np.array(
        [bool(f) or t == DONT_CARE_TEXT for f, t in zip(gt_ignore, texts, strict=True)], dtype=bool
    )
    competition = options.mode == "competition"
    gt_verts, gt_counts = pad_polygons(gt_polygons, "gt_polygons", drop_closing=not competition)
    det_verts, det_counts = pad_polygons(pred_polygons, "pred_polygons", drop_closing=not competition)
    skipped = 0
    gt_index = np.arange(len(gt_counts), dtype=np.intp)
    det_index = np.arange(len(det_counts), dtype=np.intp)
    if competition:
        keep_gt, keep_det = gt_counts >= COMPETITION_MIN_POINTS, det_counts >= COMPETITION_MIN_POINTS
        gt_verts, gt_counts, gt_dc = gt_verts[keep_gt], gt_counts[keep_gt], gt_dc[keep_gt]
        gt_index, texts = gt_index[keep_gt], [t for t, keep in zip(texts, keep_gt, strict=True) if keep]
        det_verts, det_counts, det_index = det_verts[keep_det], det_counts[keep_det], det_index[keep_det]
        skipped = len(keep_gt) + len(keep_det) - len(gt_counts) - len(det_counts)
        gt_verts = gt_verts.astype(np.float32).astype(np.float64)
        det_verts = det_verts.astype(np.float32).astype(np.float64)
    geo = measure_image(det_verts, det_counts, gt_verts, gt_counts, gt_dc, texts, options)
    result, match, det_dc, chars = _score(geo, gt_dc, options, dropped, skipped)
    return ImageMatch(result, match, gt_dc, det_dc, gt_index, det_index, chars)


def _score(
    geo: ImageGeometry, gt_dc: npt.NDArray[np.bool_], options: CLEvalOptions, dropped: int, skipped: int
) -> tuple[ImageResult, npt.NDArray[np.bool_], npt.NDArray[np.bool_], BoxChars]:
    """The image's result, its (G, D) match matrix, its (D,) don't-care detections and per-box counts."""
    tables = PairTables(geo.area_precision, geo.pcc_count, gt_dc, options.area_precision_threshold)
    det_dc = dont_care_detections(tables)
    match = match_matrix(tables, ~det_dc)
    chars = _box_chars(geo, match, gt_dc, det_dc, options)
    dets_per_gt, gts_per_det = match.sum(axis=1), match.sum(axis=0)
    tp, fp_chars = int(chars.gt_tp_chars.sum()), int(chars.det_fp_chars.sum())
    recall_penalty = float(np.maximum(dets_per_gt - 1, 0).sum()) * options.recall_granularity_weight
    precision_penalty = float(np.maximum(gts_per_det - 1, 0).sum()) * options.precision_granularity_weight
    num_gt_chars, num_det_chars = int(chars.gt_chars.sum()), int(chars.det_chars.sum())
    precision, recall, hmean = scores_from_counts(
        tp, recall_penalty, precision_penalty, num_gt_chars, num_det_chars
    )
    result = ImageResult(
        num_gt_chars=num_gt_chars,
        num_det_chars=num_det_chars,
        tp_chars=tp,
        fp_chars=fp_chars,
        recall_penalty=recall_penalty,
        precision_penalty=precision_penalty,
        num_gt=int(np.count_nonzero(~gt_dc)),
        num_det=int(np.count_nonzero(~det_dc)),
        num_gt_ignored=int(np.count_nonzero(gt_dc)),
        num_det_ignored=int(np.count_nonzero(det_dc)),
        num_split=int(np.count_nonzero(dets_per_gt > 1)),
        num_merged=int(np.count_nonzero(gts_per_det > 1)),
        num_dropped_detections=dropped,
        num_skipped_polygons=skipped,
        precision=precision,
        recall=recall,
        hmean=hmean,
    )
    return result, match, det_dc, chars


def _box_chars(
    geo: ImageGeometry,
    match: npt.NDArray[np.bool_],
    gt_dc: npt.NDArray[np.bool_],
    det_dc: npt.NDArray[np.bool_],
    options: CLEvalOptions,
) -> BoxChars:
    """Per-box character counts of one image's (G, D) ``match``; the image's totals are their sums."""
    num_gt, num_det = match.shape
    kept = match[geo.hit_gt, geo.hit_det]
    # A centre covered by several matched detections counts once, for the GT that owns it.
    _, first = np.unique(geo.hit_pcc[kept], return_index=True)
    gt_tp = np.bincount(geo.hit_gt[kept][first], minlength=num_gt).astype(np.int64)
    det_side = np.bincount(geo.hit_det[kept], minlength=num_det).astype(np.int64)
    unmatched = ~det_dc & ~match.any(axis=0)
    det_fp = np.where(unmatched, geo.det_fp_chars, 0).astype(np.int64)
    pair_hits = np.where(match, geo.pcc_count, -1)
    det_gt = pair_hits.argmax(axis=0) if num_gt else np.zeros(num_det, dtype=np.intp)
    return BoxChars(
        gt_chars=np.where(gt_dc, 0, geo.gt_chars).astype(np.int64),
        gt_tp_chars=gt_tp,
        gt_recall_penalty=np.maximum(match.sum(axis=1) - 1, 0) * options.recall_granularity_weight,
        det_chars=det_side + det_fp,
        det_fp_chars=det_fp,
        det_precision_penalty=np.maximum(match.sum(axis=0) - 1, 0) * options.precision_granularity_weight,
        det_gt=np.where(match.any(axis=0), det_gt, -1).astype(np.intp),
    )


def summarise(images: Sequence[ImageResult], mode: Mode) -> DatasetResult:
    """Dataset scores: summed character counts (upstream) or the mean of per-image scores (competition)."""
    if mode not in MODES:
        raise ValueError(f"CLEval mode: expected one of {MODES}, got {mode!r}")
    if mode == "competition":
        n = len(images)
        precision, recall, hmean = (
            sum(getattr(r, k) for r in images) / n if n else 0.0 for k in SCORE_FIELDS
        )
    else:
        precision, recall, hmean = scores_from_counts(
            *(sum(getattr(r, k) for r in images) for k in COUNT_FIELDS)
        )
    return DatasetResult(list(images), precision, recall, hmean)


def evaluate_images(
    pred_polygons: Sequence[Sequence[npt.ArrayLike]],
    gt_polygons: Sequence[Sequence[npt.ArrayLike]],
    gt_ignore: Sequence[Sequence[bool]],
    gt_texts: Sequence[Sequence[str | None]] | None,
    options: CLEvalOptions,
    labels: Sequence[str] | None = None,
) -> list[ImageResult]:
    """:func:`evaluate_image` for each image of parallel per-image lists; ValueError names the image
    (``labels``, default ``image <index>``)."""
    n = len(gt_polygons)
    if len(pred_polygons) != n or len(gt_ignore) != n or (gt_texts is not None and len(gt_texts) != n):
        raise ValueError(
            f"CLEval: expected one entry per image in every list, got {len(pred_polygons)} predictions, "
            f"{n} GT, {len(gt_ignore)} ignore lists, {None if gt_texts is None else len(gt_texts)} text lists"
        )
    results = []
    for i in range(n):
        texts = None if gt_texts is None else gt_texts[i]
        try:
            results.append(evaluate_image(pred_polygons[i], gt_polygons[i], gt_ignore[i], texts, options))
        except ValueError as exc:
            raise ValueError(f"{labels[i] if labels is not None else f'image {i}'}: {exc}") from None
    return results


def warn_unscored(dropped: int, skipped: int, options: CLEvalOptions) -> None:
    """Say how many detections ``max_detections`` left unscored and how many polygons competition mode
    left out for having fewer than 4 points (nothing when none)."""
    if dropped:
        log.warning(
            "CLEval: %d detections beyond max_detections=%s were not scored", dropped, options.max_detections
        )
    if skipped:
        log.warning(
            "CLEval (competition mode): %d polygons with fewer than %d points were not scored, as the "
            "competition's scorer skips them",
            skipped,
            COMPETITION_MIN_POINTS,
        )


def evaluate_dataset(
    pred_polygons: Sequence[Sequence[npt.ArrayLike]],
    gt_polygons: Sequence[Sequence[npt.ArrayLike]],
    gt_ignore: Sequence[Sequence[bool]],
    gt_texts: Sequence[Sequence[str | None]] | None,
    options: CLEvalOptions,
    names: Sequence[str] | None = None,
) -> DatasetResult:
    """Score a dataset of per-image lists (as :func:`evaluate_image` takes): :func:`evaluate_images`, then
    :func:`summarise`; ``names`` label error messages."""
    labels = None if names is None else [f"image {name}" for name in names]
    results = evaluate_images(pred_polygons, gt_polygons, gt_ignore, gt_texts, options, labels)
    dropped = sum(r.num_dropped_detections for r in results)
    warn_unscored(dropped, sum(r.num_skipped_polygons for r in results), options)
    return summarise(results, options.mode)
