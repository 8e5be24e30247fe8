"""Test and the submission score the same polygons: predictions are integer pixels where they are made."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ocr.evaluation.pipeline import EvalPipeline, PipelineSettings
from ocr.models.postprocess import DBPostProcessor
from ocr.types import Geometry
from ocr.utils.submission import read_submission_csv, write_submission_csv


def test_the_submission_holds_exactly_the_polygons_test_scores(tmp_path: Path) -> None:
    """runners/evaluate.py on predict's submission.csv gave 0.5368 where runners/test.py gave 0.5361 for
    the same checkpoint: the CSV holds integer pixels, and test scored the unrounded polygons."""
    prob = torch.zeros(1, 1, 64, 64)
    prob[..., 10:17, 5:40] = 0.9
    prob[..., 30:34, 8:21] = 0.8
    # A letterbox scale that puts the boxes' corners between original pixels.
    geometry = Geometry(np.array([[1.37, 0.0, 0.3], [0.0, 1.37, 0.3], [0.0, 0.0, 1.0]]), 88, 88, 64, 64)
    postprocess = DBPostProcessor(
        thresh=0.3, box_thresh=0.5, unclip_ratio=1.5, max_candidates=100, min_size=1, output="box"
    )
    pipeline = EvalPipeline(
        settings=PipelineSettings(kind="inline", workers=0, max_pending_batches=1), postprocess=postprocess
    )
    pipeline.start(device=torch.device("cpu"), cleval=None, keep_predictions=True)
    pipeline.begin_step()
    batch = {"geometry": [geometry], "image_id": ["a.jpg"]}
    pipeline.submit_probabilities(prob, batch, scored=False)  # type: ignore[arg-type]
    pipeline.finish()
    pipeline.close()
    [prediction] = pipeline.predictions
    written = read_submission_csv(write_submission_csv(tmp_path / "s.csv", {"a.jpg": prediction["polygons"]}))
    assert len(written["a.jpg"]) == len(prediction["polygons"]) == 2
    for scored, submitted in zip(prediction["polygons"], written["a.jpg"], strict=True):
        np.testing.assert_array_equal(scored, submitted)  # so test's CLEval is evaluate's on the CSV
