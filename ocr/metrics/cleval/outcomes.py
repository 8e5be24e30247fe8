"""Per-box CLEval outcomes, read from the pairing the metric scored (no second matcher)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from ocr.metrics.cleval.evaluate import ImageMatch

__all__ = ["BoxOutcomes", "Outcome", "OUTCOMES", "box_outcomes", "count_outcomes"]

Outcome = Literal["matched", "split", "merged", "missed", "false_positive", "ignored"]
OUTCOMES: tuple[Outcome, ...] = ("matched", "split", "merged", "missed", "false_positive", "ignored")


@dataclass(frozen=True)
class BoxOutcomes:
    """The outcome of every box the caller passed, in the caller's order. GT: ``matched`` (one detection,
    one-to-one), ``split`` (matched by >= 2 detections), ``merged`` (its one detection also covers other GT),
    ``missed``, ``ignored`` (don't-care, or not scored). Detections: ``matched``, ``split`` (one of the
    detections of a split GT), ``merged`` (matches >= 2 GT), ``false_positive``, ``ignored`` (on a don't-care
    region, beyond ``max_detections``, or not scored)."""

    gt: list[Outcome]
    det: list[Outcome]


def box_outcomes(image: ImageMatch, num_gt: int, num_det: int) -> BoxOutcomes:
    """Outcomes of the ``num_gt`` GT and ``num_det`` detections that :func:`match_image` was given. Counts
    agree with the image's result: GT ``split`` = ``num_split``, detections ``merged`` = ``num_merged``, GT
    not ``ignored`` = ``num_gt``, detections not ``ignored`` = ``num_det``."""
    match = image.match
    dets_per_gt, gts_per_det = match.sum(axis=1), match.sum(axis=0)
    merging_det = gts_per_det >= 2
    split_gt = dets_per_gt >= 2
    gt: list[Outcome] = ["ignored"] * num_gt
    for row, index in enumerate(image.gt_index):
        if image.gt_dc[row]:
            continue
        if dets_per_gt[row] == 0:
            gt[index] = "missed"
        elif split_gt[row]:
            gt[index] = "split"
        else:
            gt[index] = "merged" if merging_det[match[row]].any() else "matched"
    det: list[Outcome] = ["ignored"] * num_det
    for col, index in enumerate(image.det_index):
        if image.det_dc[col]:
            continue
        if gts_per_det[col] == 0:
            det[index] = "false_positive"
        elif merging_det[col]:
            det[index] = "merged"
        else:
            det[index] = "split" if split_gt[match[:, col]].any() else "matched"
    return BoxOutcomes(gt, det)


def count_outcomes(outcomes: list[Outcome]) -> dict[Outcome, int]:
    """How many boxes have each outcome (every outcome present, 0 when none)."""
    found = Counter(outcomes)
    return {name: found[name] for name in OUTCOMES}
