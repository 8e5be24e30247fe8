"""The torchmetrics wrapper: same numbers as evaluate_dataset, and a correct DDP reduction."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ocr.metrics.cleval.evaluate import evaluate_dataset
from ocr.metrics.cleval.metric import CLEvalMetric
from ocr.metrics.cleval.options import CLEvalOptions

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "cleval_upstream.json"
KWARGS = dict(
    max_detections=500,
    area_precision_threshold=0.3,
    recall_granularity_weight=1.0,
    precision_granularity_weight=1.0,
    vertical_aspect_ratio_threshold=0.5,
    case_sensitive=True,
)


def _batches() -> list[tuple[list, list, list, list]]:
    images = json.loads(FIXTURE.read_text())["images"][-12:]
    out = []
    for c in images:
        out.append(
            (
                [np.asarray(q, dtype=np.float32) for q in c["pred"]],
                [np.asarray(w["points"], dtype=np.float32) for w in c["gt"]],
                [w["ignore"] for w in c["gt"]],
                [w["text"] for w in c["gt"]],
            )
        )
    return out


def _expected(mode: str, images: list) -> dict[str, float]:
    r = evaluate_dataset(
        [i[0] for i in images],
        [i[1] for i in images],
        [i[2] for i in images],
        [i[3] for i in images],
        CLEvalOptions(mode=mode, **KWARGS),
    )
    return {"precision": r.precision, "recall": r.recall, "hmean": r.hmean}


def _update(metric: CLEvalMetric, images: list) -> None:
    for start in range(0, len(images), 4):
        chunk = images[start : start + 4]
        metric.update(
            [i[0] for i in chunk], [i[1] for i in chunk], [i[2] for i in chunk], [i[3] for i in chunk]
        )


@pytest.mark.parametrize("mode", ["competition", "upstream"])
def test_metric_matches_evaluate_dataset(mode: str) -> None:
    images = _batches()
    metric = CLEvalMetric(options=CLEvalOptions(mode=mode, **KWARGS))
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert metric.compute()["hmean"].item() == 0.0
    _update(metric, images)
    got = {k: v.item() for k, v in metric.compute().items()}
    assert got == pytest.approx(_expected(mode, images), abs=1e-6)
    assert got["hmean"] < 1.0
    metric.reset()
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert metric.compute()["hmean"].item() == 0.0


def test_update_rejects_mismatched_batches() -> None:
    metric = CLEvalMetric(options=CLEvalOptions(mode="competition", **KWARGS))
    with pytest.raises(ValueError, match="one entry per image"):
        metric.update([[]], [], [], None)
    with pytest.raises(ValueError, match="batch image 0"):
        metric.update([[np.zeros((2, 2))]], [[]], [[]], None)


def test_warns_about_detections_beyond_max_detections(caplog: pytest.LogCaptureFixture) -> None:
    metric = CLEvalMetric(options=CLEvalOptions(mode="competition", **{**KWARGS, "max_detections": 1}))
    box = np.array([[0, 0], [40, 0], [40, 10], [0, 10]], np.float32)
    metric.update([[box, box + 50, box + 100]], [[box]], [[False]], [["TOTAL"]])
    metric.compute()
    assert "2 detections beyond max_detections=1 were not scored" in caplog.text


def _worker(rank: int, world: int, out_dir: str) -> None:
    # A rendezvous file, not a TCP port: a port probed free can be taken again before the workers bind it.
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank, world_size=world)
    images = _batches()
    result = {}
    for mode in ("competition", "upstream"):
        metric = CLEvalMetric(options=CLEvalOptions(mode=mode, **KWARGS))
        _update(metric, images[rank::world])  # the two ranks see different images
        result[mode] = {k: v.item() for k, v in metric.compute().items()}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def test_ddp_two_process_reduction_equals_single_process(tmp_path: Path) -> None:
    # fork (Linux) reuses this process's imported torch; spawn would re-import it in each child (~15 s).
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    mp.start_processes(_worker, args=(2, str(tmp_path)), nprocs=2, join=True, start_method=method)
    images = _batches()
    for rank in (0, 1):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        for mode in ("competition", "upstream"):
            assert got[mode] == pytest.approx(_expected(mode, images), abs=1e-6)
    assert torch.distributed.is_available()


def test_results_scored_elsewhere_add_up_as_update_does_in_the_clone_they_are_given_to() -> None:
    """What the evaluation workers send: per-image results, added to the metric they are given to (a
    test metric is a clone of the validation one), equal to update's."""
    from ocr.metrics.cleval.evaluate import evaluate_image

    images = _batches()
    options = CLEvalOptions(mode="competition", **KWARGS)
    updated, original = CLEvalMetric(options=options), CLEvalMetric(options=options)
    clone = original.clone()
    _update(updated, images)
    for start in range(0, len(images), 4):
        clone.add_results([evaluate_image(*image, options) for image in images[start : start + 4]])
    assert {k: float(v) for k, v in clone.compute().items()} == {
        k: float(v) for k, v in updated.compute().items()
    }
    assert float(original.num_images) == 0.0 and float(clone.num_images) == len(images)
