"""The probability map kept for the results page lands in the original frame."""

from __future__ import annotations

import numpy as np

from ocr.evaluation.host_work import prob_map_in_original_frame
from ocr.geometry import letterbox_geometry


def test_a_blob_in_input_px_lands_at_its_original_position() -> None:
    geometry, scale = letterbox_geometry(200, 100, 64)  # original 200 x 100, input 64 x 64
    prob = np.zeros((32, 32), np.float32)  # half the input resolution, as a head may return
    x, y = 150 * scale / 2, 50 * scale / 2  # original (150, 50) in map px
    prob[round(y) - 1 : round(y) + 2, round(x) - 1 : round(x) + 2] = 1.0
    small = prob_map_in_original_frame(prob, geometry, long_side=100)
    assert small.shape == (50, 100) and small.dtype == np.uint8
    ys, xs = np.nonzero(small > 128)
    assert abs(xs.mean() - 75) <= 1.5 and abs(ys.mean() - 25) <= 1.5


def test_the_collector_keeps_each_outcome_in_image_name_order() -> None:
    from ocr.evaluation.host_work import GroundTruth, ImageJob, ImageOutcome
    from ocr.reporting.collect import ReportCollector

    geometry, _ = letterbox_geometry(200, 100, 64)
    box = np.array([[1, 1], [9, 1], [9, 5], [1, 5]], np.float32)
    collector = ReportCollector(prob_long_side=32)
    for name in ("b.png", "a.png"):  # as batches of one input size may deliver them
        job = ImageJob(name, geometry, GroundTruth([box], [False], ["TOTAL"]), 32)
        prediction = {"image_id": name, "polygons": [box], "scores": [0.9]}
        collector.add(ImageOutcome(job, prediction, None, np.zeros((16, 32), np.uint8), 0.01))  # type: ignore[arg-type]
    records = collector.records()
    assert records is not None and [r["image_id"] for r in records] == ["a.png", "b.png"]
    assert records[0]["gt_texts"] == ["TOTAL"] and records[0]["scores"] == [0.9]
    assert records[0]["prob_map"].shape == (16, 32)
