"""The receipts recipe at tiny sizes: experiment=synthetic_pretrain, then experiment=receipts_finetune from
its checkpoint (model.init_from), then test and export from the fine-tuned checkpoint without the first."""

from __future__ import annotations

import csv
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from omegaconf import DictConfig

from ocr.checkpoints.reading import load_checkpoint
from ocr.lightning_modules.restore import module_from_loaded
from ocr.lightning_modules.schedule import warmup_decay_factor
from tests.helpers.receipt_fixtures import make_root
from tests.helpers.tiny_budget import tiny_budget

pytestmark = pytest.mark.slow  # two tiny training runs and a test run, a minute or more on 2 cores

Compose = Callable[[str, list[str], Path], DictConfig]
Runner = Callable[[str], ModuleType]
STEPS = 2
# Validation by steps, as the pretrain recipe does, at the end of these tiny runs.
TINY_BUDGET = [*tiny_budget(STEPS), "trainer.log_every_n_steps=1", "test_after_fit=false"]


def _best(run: Path) -> Path:
    (best,) = (run / "checkpoints").glob("best_hmean*.ckpt")
    return best


def test_pretrain_then_finetune_then_test_without_the_pretrain_checkpoint(
    tmp_path: Path,
    tiny_run: list[str],
    compose_cfg: Compose,
    runner_module: Runner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    train = runner_module("train").train
    pretrain = tmp_path / "pretrain"
    overrides = ["experiment=synthetic_pretrain", *tiny_run, f"data.root={tmp_path / 'synthetic'}"]
    train(compose_cfg("train", [*overrides, *TINY_BUDGET, "trainer.max_epochs=-1"], pretrain))
    pretrained = _best(pretrain)

    receipts = make_root(tmp_path / "receipts")
    tiny_receipts = [o for o in tiny_run if not o.startswith("data.synthetic.")] + [f"data.root={receipts}"]
    finetune = tmp_path / "finetune"
    cfg = compose_cfg(
        "train",
        ["experiment=receipts_finetune", *tiny_receipts, f"model.init_from={pretrained}", *TINY_BUDGET],
        finetune,
    )
    with caplog.at_level(logging.INFO, logger="ocr.checkpoints.init_from"):
        train(cfg)
    assert f"network tensors from {pretrained} <model.init_from>" in caplog.text
    assert "not in the file" not in caplog.text and "not in the network" not in caplog.text

    finetuned = _best(finetune)
    saved = torch.load(finetuned, map_location="cpu", weights_only=False)
    assert saved["ocr_config"]["model"]["init_from"] == str(pretrained)
    # Fresh optimizer and schedule: the pretrain run's two steps are not counted on.
    assert saved["global_step"] == STEPS and saved["lr_schedulers"][0]["last_epoch"] == STEPS
    assert all(int(state["step"]) == STEPS for state in saved["optimizer_states"][0]["state"].values())
    with open(finetune / "csv" / "metrics.csv", newline="") as f:
        first_lr = next(float(row["lr-AdamW"]) for row in csv.DictReader(f) if row["lr-AdamW"])
    scheduler = cfg.scheduler
    factor = warmup_decay_factor(
        0,
        total_steps=STEPS,
        warmup_steps=int(round(scheduler.warmup_ratio * STEPS)),
        kind=scheduler.kind,
        power=scheduler.power,
        min_lr_ratio=scheduler.min_lr_ratio,
    )
    assert first_lr == pytest.approx(cfg.optimizer.lr * factor)

    shutil.rmtree(pretrain / "checkpoints")
    test_cfg = compose_cfg("test", ["data=receipts", *tiny_receipts, f"ckpt={finetuned}"], tmp_path / "test")
    metrics = runner_module("test").evaluate(test_cfg)
    assert 0.0 <= metrics["test/hmean"] <= 1.0
    exported = module_from_loaded(load_checkpoint(finetuned), finetuned, None)  # what export builds from
    assert all(torch.equal(exported.state_dict()[k], v) for k, v in saved["state_dict"].items())
