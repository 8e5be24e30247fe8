"""Under DDP every rank takes the same decisions: two CPU ranks (gloo) of the real training runner whose
validation scores are made to disagree (rank 0 sees the hmean rise, rank 1 fall) log the same figures,
keep the same best checkpoint, stop early at the same step and follow one time-budget plan, although
rank 1's clock says the budget is nearly spent."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from omegaconf import DictConfig

from ocr.data.synthetic.generate import generate_dataset
from ocr.lightning_modules.callbacks import time_budget
from ocr.metrics.cleval.metric import CLEvalMetric
from ocr.run.entry import load_runner

RANKS_TIMEOUT_S = 300
pytestmark = pytest.mark.slow  # the ranks start from a server that imports torch: 45 s on 2 loaded cores


def _skew_scores(rank: int) -> None:
    """Each compute() of this rank returns its own hmean, as a sync bug or float noise would."""
    calls = itertools.count()
    compute = CLEvalMetric.compute

    def skewed(self: CLEvalMetric) -> dict[str, torch.Tensor]:
        k = next(calls)
        scores = dict(compute(self))
        scores["hmean"] = torch.tensor(0.1 * k if rank == 0 else 0.9 - 0.1 * k)
        return scores

    CLEvalMetric.compute = skewed  # type: ignore[method-assign]  # in this forked rank only


def _rank(rank: int, cfg: DictConfig, out: str) -> None:
    from lightning.pytorch.utilities import rank_zero_only

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", NODE_RANK="0")
    rank_zero_only.rank = rank
    _skew_scores(rank)
    if rank == 1:  # 4.8 of the 5 minutes gone: alone, this rank would plan a single step
        time_budget.run_started = lambda *args: time.time() - 4.8 * 60  # type: ignore[assignment]
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=2)
    load_runner("train").train(cfg)
    dist.destroy_process_group()


def test_ranks_log_and_decide_the_same(
    tmp_path: Path, tiny_run: list[str], compose_cfg: Callable[[str, list[str], Path], DictConfig]
) -> None:
    data = tmp_path / "data"
    generate_dataset(data, num_train=6, num_val=3, num_test=3, seed=0, long_side=96)
    cfg = compose_cfg(
        "train",
        [
            *tiny_run,
            f"data.root={data}",
            "model.encoder.name=test_resnet",
            "model.decoder.channels=16",
            "trainer.devices=2",
            "trainer.strategy=ddp",
            "trainer.max_steps=6",
            "trainer.max_epochs=6",  # 3 images per rank, batch 2: one step per epoch, validated
            "callbacks=early_stopping",
            "callbacks.early_stopping.patience=1",
            "time_budget_minutes=5",
            "+callbacks.time_budget.measure_steps=1",
            "+callbacks.time_budget.skip_steps=0",
            "test_after_fit=false",
            "logger=none",
            "+callbacks.rank_report._target_=tests.helpers.rank_report.RankReport",
            f"+callbacks.rank_report.dirpath={tmp_path}",
        ],
        tmp_path / "run",
    )
    # A fork of this process could not train once an earlier test started autograd's device threads
    # (torch.compile does): the ranks fork from a server that imported torch and Lightning once.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    ranks = [context.Process(target=_rank, args=(r, cfg, str(tmp_path))) for r in (0, 1)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(RANKS_TIMEOUT_S)
    for process in ranks:
        if process.exitcode is None:
            process.kill()
    assert [p.exitcode for p in ranks] == [0, 0]
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    # The max over ranks of 0.1k and 0.9-0.1k: falling from the first validation, so early stopping
    # (patience 1) ends the run after the second, and the first stays the best.
    assert [v["val/hmean"] for v in seen[0]["validations"]] == pytest.approx([0.9, 0.8])
    for key in ("validations", "best_model_path", "best_model_score", "global_step", "stopped_epoch", "plan"):
        assert seen[0][key] == seen[1][key], key
    assert Path(seen[0]["best_model_path"]).name == "best_hmean0.9000_epoch00.ckpt"
    assert seen[0]["plan"] == 6  # rank 0's plan: the configured steps fit in its budget
    assert seen[0]["weights_sha256"] == seen[1]["weights_sha256"]
    checkpoints = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("*.ckpt"))
    assert checkpoints == ["best_hmean0.9000_epoch00.ckpt", "last.ckpt"]
