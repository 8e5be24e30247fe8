"""Per-box CLEval outcomes: each kind on a worked example, and totals equal to the metric's counts."""

from __future__ import annotations

import numpy as np
import pytest

from ocr.metrics.cleval.evaluate import match_image
from ocr.metrics.cleval.outcomes import box_outcomes, count_outcomes
from tests.helpers.cleval_cases import WORD, options, rect


def outcomes(preds: list, gts: list, ignore: list | None = None, max_detections: int | None = 500):
    flags = ignore or [False] * len(gts)
    image = match_image(preds, gts, flags, None, options(max_detections=max_detections))
    return image, box_outcomes(image, len(gts), len(preds))


def test_one_to_one_match() -> None:
    _, result = outcomes([WORD], [WORD])
    assert (result.gt, result.det) == (["matched"], ["matched"])


def test_split_gt_and_its_detections() -> None:
    _, result = outcomes([rect(10, 10, 60, 30), rect(60, 10, 110, 30)], [WORD])
    assert (result.gt, result.det) == (["split"], ["split", "split"])


def test_merging_detection_and_its_gt() -> None:
    _, result = outcomes([rect(10, 10, 230, 30)], [WORD, rect(130, 10, 230, 30)])
    assert (result.gt, result.det) == (["merged", "merged"], ["merged"])


def test_missed_gt_false_positive_dont_care_and_dropped() -> None:
    gts = [WORD, rect(10, 100, 110, 120), rect(300, 300, 400, 320)]
    preds = [WORD, rect(500, 500, 600, 520), rect(300, 300, 400, 320), rect(10, 200, 50, 220)]
    _, result = outcomes(preds, gts, ignore=[False, False, True], max_detections=3)
    assert result.gt == ["matched", "missed", "ignored"]
    assert result.det == ["matched", "false_positive", "ignored", "ignored"]


def test_totals_equal_the_metric_counts() -> None:
    rng = np.random.default_rng(0)
    seen: dict[str, int] = {"split": 0, "merged": 0, "missed": 0, "false_positive": 0}
    for _ in range(40):
        boxes = rng.integers(0, 300, size=(int(rng.integers(0, 8)), 3))
        gts = [rect(x, y, x + w, y + 20) for x, y, w in boxes]
        preds = [g + rng.normal(0, 15, size=g.shape).astype(np.float32) for g in gts if rng.random() < 0.8]
        strays = rng.integers(0, 300, size=(int(rng.integers(0, 4)), 3))
        preds += [rect(x, y, x + w, y + 25) for x, y, w in strays]
        ignore = [bool(rng.random() < 0.15) for _ in gts]
        image, result = outcomes(preds, gts, ignore)
        gt, det, counts = count_outcomes(result.gt), count_outcomes(result.det), image.result
        assert gt["split"] == counts.num_split
        assert det["merged"] == counts.num_merged
        assert len(gts) - gt["ignored"] == counts.num_gt
        assert len(preds) - det["ignored"] == counts.num_det
        assert (det["false_positive"] > 0) == (counts.fp_chars > 0)
        assert gt["missed"] + gt["matched"] + gt["split"] + gt["merged"] == counts.num_gt
        for name in seen:
            seen[name] += gt[name] + det[name]
    assert all(seen.values()), seen  # every kind occurred, so the equalities were exercised


@pytest.mark.parametrize("mode", ["competition", "upstream"])
def test_per_box_characters_sum_to_the_image_counts(mode: str) -> None:
    rng = np.random.default_rng(1)
    for _ in range(40):
        boxes = rng.integers(0, 300, size=(int(rng.integers(0, 8)), 3))
        gts = [rect(x, y, x + w, y + 20) for x, y, w in boxes]
        preds = [g + rng.normal(0, 15, size=g.shape).astype(np.float32) for g in gts if rng.random() < 0.8]
        preds += [rect(x, y, x + w, y + 25) for x, y, w in rng.integers(0, 300, size=(2, 3))]
        ignore = [bool(rng.random() < 0.15) for _ in gts]
        image = match_image(preds, gts, ignore, None, options(mode))
        chars, result = image.chars, image.result
        assert chars.gt_chars.sum() == result.num_gt_chars
        assert chars.gt_tp_chars.sum() == result.tp_chars
        assert chars.gt_recall_penalty.sum() == pytest.approx(result.recall_penalty)
        assert chars.det_chars.sum() == result.num_det_chars
        assert chars.det_fp_chars.sum() == result.fp_chars
        assert chars.det_precision_penalty.sum() == pytest.approx(result.precision_penalty)
        matched = image.match.any(axis=0)
        assert (chars.det_gt >= 0).tolist() == matched.tolist()
        assert all(image.match[g, d] for d, g in enumerate(chars.det_gt) if g >= 0)


def test_a_merging_detection_belongs_to_the_gt_with_most_centres_inside() -> None:
    image = match_image(
        [rect(10, 10, 230, 30)], [rect(10, 10, 50, 30), rect(60, 10, 230, 30)], [False] * 2, None, options()
    )
    assert image.chars.det_gt.tolist() == [1]
    assert image.chars.gt_tp_chars.tolist() == image.chars.gt_chars.tolist()
