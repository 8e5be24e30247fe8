"""CLEval rules: the worked examples of docs/metrics.md and robustness on bad input."""

from __future__ import annotations

import numpy as np
import pytest

from ocr.metrics.cleval.evaluate import evaluate_dataset, evaluate_image, summarise
from tests.helpers.cleval_cases import WORD, options, rect


def score(
    preds: list, gts: list, mode: str = "competition", texts: list | None = None, ignore: list | None = None
):
    return evaluate_image(preds, gts, ignore or [False] * len(gts), texts, options(mode))


def prh(result) -> tuple[float, float, float]:
    return pytest.approx((result.precision, result.recall, result.hmean), abs=1e-9)


def test_perfect_box() -> None:
    r = score([WORD], [WORD])
    assert (r.num_gt_chars, r.num_det_chars, r.tp_chars) == (5, 5, 5)
    assert prh(r) == (1.0, 1.0, 1.0)


def test_split_word_costs_one_recall_character_per_extra_box() -> None:
    r = score([rect(10, 10, 60, 30), rect(60, 10, 110, 30)], [WORD])
    assert (r.tp_chars, r.recall_penalty, r.num_split) == (5, 1.0, 1)
    assert prh(r) == (1.0, 0.8, 2 * 0.8 / 1.8)


def test_merged_words_cost_one_precision_character_per_extra_word() -> None:
    r = score([rect(10, 10, 230, 30)], [WORD, rect(130, 10, 230, 30)])
    assert (r.num_gt_chars, r.tp_chars, r.precision_penalty, r.num_merged) == (10, 10, 1.0, 1)
    assert prh(r) == (0.9, 1.0, 2 * 0.9 / 1.9)


def test_half_covered_word_finds_two_of_five_characters() -> None:
    r = score([rect(10, 10, 60, 30)], [WORD])  # the centre at x = 60 lies on the box's right edge: out
    assert (r.tp_chars, r.num_det_chars) == (2, 2)
    assert prh(r) == (1.0, 0.4, 2 * 0.4 / 1.4)


def test_stray_box_costs_characters_by_its_shape() -> None:
    tall, wide, very_wide = rect(300, 10, 320, 70), rect(300, 10, 360, 30), rect(300, 100, 700, 120)
    # competition: about the box's own length in pseudo characters, round(0.5 + w / h - eps)
    comp = [score([WORD, stray], [WORD]) for stray in (tall, wide, very_wide)]
    assert [r.fp_chars for r in comp] == [1, 3, 20]
    assert prh(comp[0]) == (5 / 6, 1.0, 2 * (5 / 6) / (11 / 6))
    assert prh(comp[1]) == (5 / 8, 1.0, 2 * 0.625 / 1.625)
    # upstream: round(0.5 + h / w) capped at 10, so a wide box costs 1
    up = [score([WORD, stray], [WORD], "upstream") for stray in (tall, wide, very_wide)]
    assert [r.fp_chars for r in up] == [3, 1, 1]


def test_upstream_counts_transcription_characters() -> None:
    comp = score([WORD], [WORD], "competition", texts=["TOTAL:"])
    up = score([WORD], [WORD], "upstream", texts=["TOTAL:"])
    assert (comp.num_gt_chars, up.num_gt_chars) == (5, 6)
    assert score([WORD], [WORD], "upstream", texts=[None]).num_gt_chars == 5  # pseudo count without text


def test_area_precision_constraint_blocks_a_huge_box() -> None:
    r = score([rect(0, 0, 400, 400)], [WORD])  # holds every centre but WORD is 1.25 % of its area
    assert (r.tp_chars, r.fp_chars) == (0, 1)
    assert prh(r) == (0.0, 0.0, 0.0)


def test_dont_care_region_and_its_detection_are_left_out() -> None:
    r = score([WORD, rect(10, 50, 110, 70)], [WORD, rect(10, 50, 110, 70)], ignore=[False, True])
    assert (r.num_gt, r.num_gt_ignored, r.num_det, r.num_det_ignored) == (1, 1, 1, 1)
    assert prh(r) == (1.0, 1.0, 1.0)
    by_text = score(
        [WORD, rect(10, 50, 110, 70)], [WORD, rect(10, 50, 110, 70)], "upstream", texts=["HELLO", "###"]
    )
    assert by_text.num_det_ignored == 1 and by_text.hmean == 1.0


def test_competition_averages_images_upstream_sums_characters() -> None:
    perfect = score([WORD], [WORD])
    missed = score([], [rect(10, 10, 1010, 30)])  # 50 characters, none found
    comp = summarise([perfect, missed], "competition")
    up = summarise([perfect, missed], "upstream")
    assert comp.hmean == pytest.approx(0.5)
    assert (up.precision, up.recall) == pytest.approx((1.0, 5 / 55))


def test_vertical_word_reads_top_to_bottom_upstream_only() -> None:
    column = rect(10, 10, 30, 110)  # 20 x 100
    halves = [rect(10, 10, 30, 60), rect(10, 60, 30, 110)]
    up = score(halves, [column], "upstream")
    assert (up.num_gt_chars, up.num_split, up.tp_chars) == (5, 1, 5)
    # The competition's scorer reads every box from its first two points to its last two: the centres
    # lie on the horizontal mid-line y = 60, the lower half's top edge, so the upper half matches nothing.
    comp = score(halves, [column])
    assert (comp.num_gt_chars, comp.num_split, comp.tp_chars, comp.fp_chars) == (6, 0, 6, 1)


def test_polygon_gt_chain_and_contour_detection() -> None:
    chain = np.array([[10, 10], [60, 10], [110, 10], [110, 30], [60, 30], [10, 30]], dtype=np.float32)
    contour = np.array(
        [[10 + 50 * (1 + np.cos(a)), 20 + 10 * np.sin(a)] for a in np.linspace(0, 2 * np.pi, 40)[:-1]]
    )
    r = score([contour], [chain])
    assert r.num_gt_chars == 5 and r.tp_chars == 5 and r.hmean == 1.0


@pytest.mark.parametrize("mode", ["competition", "upstream"])
def test_empty_inputs_score_zero_without_error(mode: str) -> None:
    assert prh(score([], [], mode)) == (0.0, 0.0, 0.0)
    assert prh(score([], [WORD], mode)) == (0.0, 0.0, 0.0)
    no_gt = score([WORD], [], mode)
    assert no_gt.fp_chars > 0 and no_gt.precision == 0.0


def test_degenerate_and_self_intersecting_polygons_have_defined_scores() -> None:
    bowtie = np.array([[10, 10], [110, 30], [110, 10], [10, 30]], dtype=np.float32)
    line = np.array([[10, 10], [60, 10], [110, 10], [60, 10]], dtype=np.float32)
    point = np.array([[50, 20]] * 4, dtype=np.float32)
    closed_triangle = np.array([[10, 10], [110, 10], [10, 30], [10, 10]], dtype=np.float32)
    for pred in (bowtie, line, point, closed_triangle):
        for gt in (WORD, bowtie, line, point):
            r = score([pred], [gt])
            assert 0.0 <= r.hmean <= 1.0
    assert score([line, point], [WORD]).tp_chars == 0


@pytest.mark.parametrize("bad", [np.array([[0, 0], [1, np.nan], [2, 2]]), np.zeros((2, 2)), np.zeros((4, 3))])
def test_malformed_polygons_raise_naming_the_polygon(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match=r"pred_polygons\[1\]"):
        score([WORD, bad], [WORD])
    with pytest.raises(ValueError, match=r"gt_polygons\[0\]"):
        score([WORD], [bad])
    with pytest.raises(ValueError, match=r"image img7"):
        evaluate_dataset([[bad]], [[WORD]], [[False]], None, options(), names=["img7"])


def test_detections_beyond_max_are_dropped_and_counted() -> None:
    preds = [WORD] + [rect(200 + i, 200, 210 + i, 260) for i in range(600)]
    r = evaluate_image(preds, [WORD], [False], None, options(max_detections=500))
    assert r.num_dropped_detections == 101 and r.num_det == 500


def test_mismatched_lengths_and_bad_options_raise() -> None:
    with pytest.raises(ValueError, match="one ignore flag"):
        evaluate_image([], [WORD], [], None, options())
    with pytest.raises(ValueError, match="one entry per image"):
        evaluate_dataset([[]], [], [], None, options())
    with pytest.raises(ValueError, match="mode"):
        options(mode="icdar")
