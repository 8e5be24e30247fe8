"""Parity with the reference ``cleval`` 0.1.1 package (fixture made by fixtures/make_cleval_fixtures.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ocr.metrics.cleval.evaluate import evaluate_dataset, evaluate_image
from ocr.metrics.cleval.options import CLEvalOptions

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "cleval_upstream.json"
DOC = json.loads(FIXTURE.read_text())
CASES = DOC["images"]


def _upstream_options(changes: dict | None = None) -> CLEvalOptions:
    ref = {**DOC["options"], **(changes or {})}
    return CLEvalOptions(
        mode="upstream",
        max_detections=None,
        area_precision_threshold=ref["AREA_PRECISION_CONSTRAINT"],
        recall_granularity_weight=ref["RECALL_GRANULARITY_PENALTY_WEIGHT"],
        precision_granularity_weight=ref["PRECISION_GRANULARITY_PENALTY_WEIGHT"],
        vertical_aspect_ratio_threshold=ref["VERTICAL_ASPECT_RATIO_THRESH"],
        case_sensitive=ref["CASE_SENSITIVE"],
    )


def _inputs(case: dict) -> tuple[list[np.ndarray], list[np.ndarray], list[bool], list[str | None]]:
    preds = [np.asarray(q, dtype=np.float64) for q in case["pred"]]
    gts = [np.asarray(w["points"], dtype=np.float64) for w in case["gt"]]
    return preds, gts, [w["ignore"] for w in case["gt"]], [w["text"] for w in case["gt"]]


def test_fixture_covers_the_required_cases() -> None:
    names = {c["name"] for c in CASES}
    for required in (
        "perfect",
        "split_two",
        "merge_two",
        "partial_half",
        "false_positives",
        "dont_care_on",
        "vertical",
        "overlapping_gt",
        "empty_both",
        "empty_pred",
        "empty_gt",
    ):
        assert required in names
    assert sum(n.startswith("random_") for n in names) >= 50


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_image_matches_reference(case: dict) -> None:
    result = evaluate_image(*_inputs(case), options=_upstream_options())
    exp = case["expected"]
    assert (result.num_gt_chars, result.num_det_chars, result.tp_chars, result.fp_chars) == (
        exp["num_char_gt"],
        exp["num_char_det"],
        exp["num_char_tp"],
        exp["num_char_fp"],
    )
    assert result.precision == pytest.approx(exp["precision"], abs=1e-6)
    assert result.recall == pytest.approx(exp["recall"], abs=1e-6)
    assert result.hmean == pytest.approx(exp["hmean"], abs=1e-6)


def test_dataset_matches_reference() -> None:
    inputs = [_inputs(c) for c in CASES]
    result = evaluate_dataset(
        [i[0] for i in inputs],
        [i[1] for i in inputs],
        [i[2] for i in inputs],
        [i[3] for i in inputs],
        options=_upstream_options(),
    )
    for key in ("precision", "recall", "hmean"):
        assert getattr(result, key) == pytest.approx(DOC["overall"][key], abs=1e-6)


@pytest.mark.parametrize("variant", DOC["variants"], ids=[v["name"] for v in DOC["variants"]])
def test_non_default_option_matches_reference(variant: dict) -> None:
    """Each option acts as the reference's does: every case under one non-default value, and the dataset."""
    options = _upstream_options(variant["options"])
    wrong = []
    for case in CASES:
        result = evaluate_image(*_inputs(case), options=options)
        exp = variant["expected"][case["name"]]
        got = (result.num_gt_chars, result.num_det_chars, result.tp_chars, result.fp_chars, result.hmean)
        want = (exp["num_char_gt"], exp["num_char_det"], exp["num_char_tp"], exp["num_char_fp"], exp["hmean"])
        if got[:4] != want[:4] or abs(got[4] - want[4]) > 1e-6:
            wrong.append(f"{case['name']}: got {got}, expected {want}")
    assert not wrong, "\n".join(wrong)
    inputs = [_inputs(c) for c in CASES]
    overall = evaluate_dataset(*(list(column) for column in zip(*inputs, strict=True)), options=options)
    for key in ("precision", "recall", "hmean"):
        assert getattr(overall, key) == pytest.approx(variant["overall"][key], abs=1e-6)


def test_every_option_has_a_variant_that_changes_scores() -> None:
    """A variant that scored like the defaults could not catch an option pinned to its default."""
    changed = {key for v in DOC["variants"] for key in v["options"] if v["expected"] != _default_expected()}
    assert changed == set(DOC["options"]) - {"DUMP_SAMPLE_RESULT", "E2E", "ORIENTATION"}


def _default_expected() -> dict:
    return {c["name"]: c["expected"] for c in CASES}
