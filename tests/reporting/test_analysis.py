"""Where the score goes: per-image counts, worst images and text-height buckets on hand-made cases."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ocr.metrics.cleval.evaluate import evaluate_image, scores_from_counts, summarise
from ocr.reporting.analysis import analyse_records, box_heights, bucket_labels, write_analysis
from tests.helpers.cleval_cases import WORD, options, rect

EDGES = [8, 12, 16, 24, 32]
SMALL = rect(10, 100, 40, 106)  # 6 px high, 5 pseudo characters
FALSE_POSITIVE = rect(200, 200, 300, 240)  # 40 px high
SPLIT_DETS = [rect(10, 10, 60, 30), rect(60, 10, 110, 30)]  # two halves of WORD
PAIR = [rect(10, 40, 50, 60), rect(60, 40, 110, 60)]  # two GT words ...
MERGING_DET = rect(10, 40, 110, 60)  # ... one detection over both


def record(name: str, preds: list, gts: list, ignore: list[bool] | None = None) -> dict[str, Any]:
    return {
        "image_id": name,
        "polygons": preds,
        "gt_polygons": gts,
        "gt_ignore": ignore or [False] * len(gts),
        "gt_texts": [None] * len(gts),
    }


RECORDS = [
    record("a.png", [WORD, FALSE_POSITIVE], [WORD, SMALL]),  # a small word missed, a false positive
    record("b.png", [*SPLIT_DETS, MERGING_DET], [WORD, *PAIR]),  # a split word, two merged words
    record("c.png", [WORD], [WORD, rect(10, 200, 110, 220)], [False, True]),  # perfect, a don't-care GT
]


def test_labels_and_heights() -> None:
    assert bucket_labels(EDGES) == ["<8", "8-12", "12-16", "16-24", "24-32", ">=32"]
    tilted = np.array([[0, 0], [40, 30], [34, 38], [-6, 8]], dtype=np.float32)  # 50 x 10, rotated
    assert box_heights([WORD, SMALL, tilted]) == pytest.approx([20, 6, 10], abs=1e-3)


def test_per_image_counts_and_worst_images() -> None:
    analysis = analyse_records(RECORDS, options(), EDGES, worst=2)
    a, b, c = analysis.images
    assert (a.missed_chars, a.fp_chars, a.missed_words, a.false_positive_words) == (5, 3, 1, 1)
    assert (a.split_words, a.merged_words, a.gt_words, a.det_words) == (0, 0, 2, 2)
    assert (a.precision, a.recall) == (0.625, 0.5)
    assert (b.split_words, b.merged_words, b.missed_words, b.false_positive_words, b.fp_chars) == (
        1,
        2,
        0,
        0,
        0,
    )
    assert (c.hmean, c.gt_words, c.missed_chars) == (1.0, 1, 0)
    assert a.hmean < b.hmean < c.hmean
    assert analysis.worst == ["a.png", "b.png"]
    assert analysis.totals["missed_words"] == 1 and analysis.totals["merged_words"] == 2
    assert analysis.totals["fp_chars"] == 3 and analysis.totals["missed_chars"] == 5


def test_buckets_hold_their_characters() -> None:
    analysis = analyse_records(RECORDS, options(), EDGES, worst=2)
    buckets = {bucket.bucket: bucket for bucket in analysis.buckets}
    # The missed 6 px word alone: recall 0, and no detection belongs here.
    assert (buckets["<8"].gt_words, buckets["<8"].gt_chars, buckets["<8"].tp_chars) == (1, 5, 0)
    assert (buckets["<8"].det_chars, buckets["<8"].recall, buckets["<8"].precision) == (0, 0.0, 0.0)
    # The 40 px false positive is charged to its own height; no GT there.
    assert (buckets[">=32"].gt_words, buckets[">=32"].det_chars, buckets[">=32"].precision) == (0, 3, 0.0)
    # Every other box is 20 px high: WORD of a and c, and all of b (its penalties included).
    b = evaluate_image(
        *[RECORDS[1][k] for k in ("polygons", "gt_polygons", "gt_ignore", "gt_texts")], options()
    )
    mid = buckets["16-24"]
    assert (mid.gt_words, mid.gt_chars, mid.tp_chars, mid.det_chars) == (
        5,
        10 + b.num_gt_chars,
        10 + b.tp_chars,
        10 + b.num_det_chars,
    )
    expected = scores_from_counts(
        mid.tp_chars, b.recall_penalty, b.precision_penalty, mid.gt_chars, mid.det_chars
    )
    assert (mid.precision, mid.recall, mid.hmean) == pytest.approx(expected)
    assert all(buckets[k].gt_words == buckets[k].det_chars == 0 for k in ("8-12", "12-16", "24-32"))


def test_all_buckets_together_give_the_upstream_scores() -> None:
    rng = np.random.default_rng(0)
    records = []
    for i in range(20):
        boxes = rng.integers(0, 300, size=(int(rng.integers(1, 8)), 4))
        gts = [rect(x, y, x + w, y + 4 + h % 40) for x, y, w, h in boxes]
        preds = [g + rng.normal(0, 3, size=g.shape).astype(np.float32) for g in gts if rng.random() < 0.8]
        preds += [rect(x, y, x + w, y + 25) for x, y, w, _ in rng.integers(0, 300, size=(2, 4))]
        records.append(record(f"{i}.png", preds, gts, [bool(rng.random() < 0.1) for _ in gts]))
    upstream = options("upstream")
    one_bucket = analyse_records(records, upstream, [1e6], worst=3).buckets[0]
    results = [
        evaluate_image(r["polygons"], r["gt_polygons"], r["gt_ignore"], None, upstream) for r in records
    ]
    dataset = summarise(results, "upstream")
    assert (one_bucket.precision, one_bucket.recall) == pytest.approx((dataset.precision, dataset.recall))
    split = analyse_records(records, upstream, EDGES, worst=3)
    assert sum(b.tp_chars for b in split.buckets) == sum(r.tp_chars for r in results)
    assert sum(b.det_chars for b in split.buckets) == sum(r.num_det_chars for r in results)
    assert sum(b.gt_chars for b in split.buckets) == sum(r.num_gt_chars for r in results)
    assert (split.totals["precision"], split.totals["recall"]) == (dataset.precision, dataset.recall)


def test_files_and_bad_edges(tmp_path: Path) -> None:
    analysis = analyse_records(RECORDS, options(), EDGES, worst=1)
    path = write_analysis(tmp_path, analysis)
    assert json.loads(path.read_text())["worst"] == ["a.png"]
    with (tmp_path / "errors_buckets.csv").open() as f:
        assert [row["bucket"] for row in csv.DictReader(f)] == bucket_labels(EDGES)
    with (tmp_path / "errors_images.csv").open() as f:
        assert [row["missed_chars"] for row in csv.DictReader(f)] == ["5", "0", "0"]
    with pytest.raises(
        ValueError, match=r"report.height_buckets: expected increasing px edges, got \[8, 8\]"
    ):
        analyse_records(RECORDS, options(), [8, 8], worst=1)
