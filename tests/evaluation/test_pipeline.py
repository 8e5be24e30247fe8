"""The evaluation pipeline: the device's bitmap and codes, workers in threads or processes, outcomes in
batch order and identical to post-processing and scoring in the calling thread."""

from __future__ import annotations

import pickle
import re
import time
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch

from ocr.evaluation.device_maps import code_table, maps_to_host
from ocr.evaluation.host_work import CodedProbMap, ImageWorkError
from ocr.evaluation.pipeline import EvalPipeline, PipelineSettings
from ocr.geometry import letterbox_geometry
from ocr.metrics.cleval.evaluate import evaluate_image
from ocr.metrics.cleval.options import CLEvalOptions
from ocr.models.postprocess import DBPostProcessor
from ocr.utils.submission import submission_points

POSTPROCESS = DBPostProcessor(
    thresh=0.3, box_thresh=0.5, unclip_ratio=1.5, max_candidates=1000, min_size=3, output="box"
)
CLEVAL = CLEvalOptions(
    mode="competition",
    max_detections=500,
    area_precision_threshold=0.5,
    recall_granularity_weight=1.0,
    precision_granularity_weight=1.0,
    vertical_aspect_ratio_threshold=0.5,
    case_sensitive=True,
)


def _batch(seed: int, size: int = 96) -> tuple[torch.Tensor, dict]:
    """Logits of 2 images with a few text-like blobs (and values right at the threshold), and labels."""
    rng = np.random.default_rng(seed)
    logits = torch.full((2, 1, size, size), -6.0)
    gts = []
    for i in range(2):
        boxes = []
        for _ in range(3):
            x, y = int(rng.integers(2, size - 40)), int(rng.integers(2, size - 12))
            logits[i, 0, y : y + 8, x : x + 30] = float(rng.uniform(0.5, 4.0))
            boxes.append(np.array([[x, y], [x + 30, y], [x + 30, y + 8], [x, y + 8]], np.float32) * 2)
        gts.append(boxes)
    logits[0, 0, 0, 0] = float(torch.logit(torch.tensor(np.float32(0.3))))  # on the threshold itself
    geometry, _ = letterbox_geometry(size * 2, size * 2, size)
    batch = {
        "image_id": [f"img{seed}_{i}.png" for i in range(2)],
        "geometry": [geometry, geometry],
        "polygons": gts,
        "ignore": [[False] * len(g) for g in gts],
        "texts": [["WORD"] * len(g) for g in gts],
    }
    return logits, batch


def _expected(logits: torch.Tensor, batch: dict) -> list[tuple]:
    """Post-processing and scoring in the calling thread, as the module did before the pipeline (points
    rounded to the submission's integer pixels, then scored)."""
    results = POSTPROCESS(torch.sigmoid(logits.float()), batch["geometry"])
    expected = []
    for (found, scores), gt, ignore, texts in zip(
        results, batch["polygons"], batch["ignore"], batch["texts"], strict=True
    ):
        polygons = [submission_points(p) for p in found]
        expected.append((polygons, scores, evaluate_image(polygons, gt, ignore, texts, CLEVAL)))
    return expected


@pytest.mark.parametrize("kind", ["process", "thread", "inline"])
def test_outcomes_come_back_in_batch_order_and_equal_the_calling_threads(kind: str) -> None:
    pipeline = EvalPipeline(
        settings=PipelineSettings(kind=kind, workers=2, max_pending_batches=2), postprocess=POSTPROCESS
    )
    batches = [_batch(seed) for seed in range(5)]
    pipeline.start(device=torch.device("cpu"), cleval=CLEVAL, keep_predictions=True)
    delivered = []
    for logits, batch in batches:
        pipeline.begin_step()
        delivered += pipeline.submit_logits(logits, batch, scored=True)
    delivered += pipeline.finish()
    pipeline.close()
    assert [[o.job.image_id for o in outcomes] for outcomes in delivered] == [
        b["image_id"] for _, b in batches
    ]
    outcomes = [o for batch_outcomes in delivered for o in batch_outcomes]
    expected = [e for logits, batch in batches for e in _expected(logits, batch)]
    assert sum(len(o.prediction["polygons"]) for o in outcomes) >= 20
    for outcome, (polygons, scores, cleval) in zip(outcomes, expected, strict=True):
        assert len(outcome.prediction["polygons"]) == len(polygons)
        assert all(
            np.array_equal(a, b) for a, b in zip(outcome.prediction["polygons"], polygons, strict=True)
        )
        assert outcome.prediction["scores"] == scores and outcome.cleval == cleval
    assert pipeline.times.images == 10 and pipeline.predictions == [o.prediction for o in outcomes]


def test_a_failing_image_is_named_in_the_error() -> None:
    pipeline = EvalPipeline(
        settings=PipelineSettings(kind="thread", workers=1, max_pending_batches=1), postprocess=POSTPROCESS
    )
    logits, batch = _batch(0)
    batch["polygons"][1] = [np.zeros((2, 2), np.float32)]  # a malformed ground-truth polygon
    pipeline.start(device=torch.device("cpu"), cleval=CLEVAL, keep_predictions=False)
    pipeline.submit_logits(logits, batch, scored=True)
    with pytest.raises(ImageWorkError, match="img0_1.png: ValueError"):
        pipeline.finish()
    pipeline.close()


def test_the_bitmap_compares_in_float32_as_numpy_did() -> None:
    prob = np.array([np.float32(0.3), np.nextafter(np.float32(0.3), np.float32(1)), 0.29], np.float32)
    logits = torch.logit(torch.from_numpy(prob).double()).float().reshape(1, 1, 1, 3)
    maps = maps_to_host(logits, 0.3)
    reference = torch.sigmoid(logits.float())[0, 0].numpy()
    np.testing.assert_array_equal(maps.image(0).bitmap, (reference > 0.3).astype(np.uint8))
    np.testing.assert_array_equal(maps.image(0).prob, reference)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_logit_codes_decode_to_the_float32_probabilities(dtype: torch.dtype) -> None:
    logits = (torch.randn(1, 1, 40, 50) * 6).to(dtype)
    table = code_table(dtype, torch.device("cpu"))
    coded = CodedProbMap(logits[0, 0].view(torch.int16).numpy(), table)
    expected = torch.sigmoid(logits.float())[0, 0].numpy()
    # The table holds the same function of every code (CPU kernels may differ in the last place between
    # their vector body and scalar tail; CUDA applies one).
    np.testing.assert_allclose(coded[5:30, 7:41], expected[5:30, 7:41], rtol=2e-7, atol=0)
    assert coded.shape == (40, 50) and coded[:, :].dtype == np.float32


def test_the_stage_times_add_up_where_the_time_went() -> None:
    """Data between steps, the network inside ``network()``, worker seconds per image, the caller's waits;
    the closing line says them all (a sleep stands in for each stage: each figure is at least its sleeps)."""
    pipeline = EvalPipeline(
        settings=PipelineSettings(kind="inline", workers=0, max_pending_batches=1), postprocess=POSTPROCESS
    )
    pipeline.start(device=torch.device("cpu"), cleval=None, keep_predictions=False)
    for seed in range(3):
        time.sleep(0.02)  # the loader
        pipeline.begin_step()
        with pipeline.network(torch.device("cpu")):
            time.sleep(0.03)
        pipeline.submit_logits(*_batch(seed), scored=False)
    pipeline.finish()
    pipeline.close()
    times = pipeline.times
    assert times.images == 6 and times.data >= 0.06 and times.network >= 0.09
    assert 0 < times.postprocess <= times.waited  # inline: the main thread did the work itself
    assert times.wall >= times.data + times.network + times.waited
    line = times.summary("predict", pipeline.workers, writing=0.5)
    assert re.fullmatch(
        r"predict: 6 images in [\d.]+ s, [\d.]+ img/s, network \d+% of the time \| "
        r"data 0\.\d s, network 0\.\d s, post-processing "
        r"[\d.]+ s in the main thread \(main thread waited [\d.]+ s\), writing 0\.5 s",
        line,
    ), line
    rate = float(re.search(r"([\d.]+) img/s", line)[1])  # type: ignore[index]
    assert rate == pytest.approx(6 / (times.wall + 0.5), abs=0.01)
    assert "writing" not in times.summary("test", "2 worker processes")


def test_a_worker_process_receives_the_maps_as_a_handle_not_a_copy() -> None:
    """A 1024 px image's float32 map is 4 MB: the process pool sends a handle to shared memory."""
    maps = maps_to_host(torch.randn(2, 1, 256, 256), 0.3).shared()
    assert maps.bitmap.is_shared() and maps.prob.is_shared()
    sent = ForkingPickler.dumps(maps.prob[1])
    assert len(sent) < 4_096 < maps.prob[1].numel() * 4
    received = pickle.loads(sent)
    torch.testing.assert_close(received, maps.prob[1])
