"""Progress: the rich bar on a terminal, plain log lines (step/total, loss, img/s, ETA) otherwise, and the
data-wait figure on loaders that are slow on purpose: loggers, progress lines, end-of-run summary."""

from __future__ import annotations

import csv
import logging
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig

from ocr.data.dataset import ReceiptDataset
from ocr.lightning_modules.callbacks.progress import PlainProgress, RichProgress, progress_bar
from ocr.utils.config_types import check_config_types
from ocr.utils.errors import UsageError
from tests.helpers.receipt_fixtures import make_root, receipt_datamodule
from tests.helpers.triage_tiny import TinyModule, tiny_loader

SAMPLE_S = 0.1  # a slow sample: two per batch
STEP_S = 0.2  # a slow training step
SHARE = 0.2  # input_bound_share


class ScoredModule(TinyModule):
    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.log("val/hmean", 0.25)


@pytest.mark.parametrize("terminal", [True, False])
def test_the_bar_is_for_terminals_only(monkeypatch: pytest.MonkeyPatch, terminal: bool) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: terminal)
    bar = progress_bar(every_n_seconds=5, leave=False, input_bound_share=SHARE)
    assert isinstance(bar, RichProgressBar if terminal else PlainProgress)


def test_plain_lines_at_each_interval_and_validation(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_steps=8,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[PlainProgress(every_n_seconds=0, input_bound_share=SHARE)],
    )
    with caplog.at_level(logging.INFO, logger="ocr.lightning_modules.callbacks.progress"):
        trainer.fit(ScoredModule(), train_dataloaders=tiny_loader(), val_dataloaders=tiny_loader(num=2))
    lines = [r.getMessage() for r in caplog.records]
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) == 8, lines
    assert re.fullmatch(
        r"step 5/8 \(62%\) \| epoch 1 \| loss \d+\.\d{4} \| [\d.]+ img/s \| elapsed 0:\d\d \| ETA 0:\d\d",
        steps[4],
    ), steps[4]
    # 4 steps per epoch, a validation after each.
    validations = [line for line in lines if line.startswith("validation")]
    assert [v.split(" | ")[0] for v in validations] == [
        "validation at step 4/8 (50%)",
        "validation at step 8/8 (100%)",
    ]
    assert all("val/hmean 0.2500" in v and "ETA" in v for v in validations)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("every_n_seconds=-1", "callbacks.progress_bar.every_n_seconds: expected >= 0.0, got -1"),
        ("input_bound_share=1.5", "callbacks.progress_bar.input_bound_share: expected a value in (0.0, 1.0]"),
        ("input_bound_share=0", "callbacks.progress_bar.input_bound_share: expected a value in (0.0, 1.0]"),
    ],
)
def test_the_config_check_refuses_a_negative_interval_or_a_share_outside_0_1(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, override: str, message: str
) -> None:
    cfg = compose_cfg("train", [f"callbacks.progress_bar.{override}"], tmp_path)
    with pytest.raises(UsageError, match=re.escape(message)):
        check_config_types(cfg)


class FastStep(L.LightningModule):
    """A step that costs next to nothing (convolutions on a machine this busy can take 0.3 s)."""

    def __init__(self, step_s: float = 0.0) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))
        self.step_s = step_s

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        time.sleep(self.step_s)
        return self.scale * batch["prob_map"].mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(
    tmp_path: Path, module: L.LightningModule, caplog: pytest.LogCaptureFixture
) -> tuple[L.Trainer, list[str]]:
    datamodule = receipt_datamodule(make_root(tmp_path / "data", num_images=4), crop_size=32)
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_steps=6,  # three epochs of two batches
        accelerator="cpu",
        logger=CSVLogger(tmp_path, name="csv", version=""),
        log_every_n_steps=2,
        limit_val_batches=0,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[PlainProgress(every_n_seconds=0, input_bound_share=SHARE)],
    )
    with caplog.at_level(logging.INFO, logger="ocr.lightning_modules.callbacks"):
        trainer.fit(module, datamodule=datamodule)
    return trainer, [r.getMessage() for r in caplog.records]


def _shares(tmp_path: Path) -> list[float]:
    with open(tmp_path / "csv" / "metrics.csv", newline="") as f:
        return [float(row["train/data_wait"]) for row in csv.DictReader(f) if row.get("train/data_wait")]


def test_a_slow_loader_is_reported_as_input_bound(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = ReceiptDataset.__getitem__

    def slow(self: ReceiptDataset, index: int) -> Any:
        time.sleep(SAMPLE_S)
        return build(self, index)

    monkeypatch.setattr(ReceiptDataset, "__getitem__", slow)
    trainer, lines = _fit(tmp_path, FastStep(), caplog)
    shares = _shares(tmp_path)
    assert len(shares) == 3 and min(shares) > 0.5, shares  # logged every 2 steps
    assert float(trainer.callback_metrics["train/data_wait"]) > 0.5
    [summary] = [line for line in lines if "input-bound" in line]
    assert re.match(r"input-bound: \d+ % of training step time waiting for data \(first batch", summary)
    assert "raise data.num_workers (now 0;" in summary and "data.cache_dir" in summary
    progress = [line for line in lines if line.startswith("step ")]
    assert len(progress) == 6 and all(re.search(r"\| data wait \d+ %", line) for line in progress[1:])
    waits = [int(re.search(r"data wait (\d+) %", line).group(1)) for line in progress[1:]]  # type: ignore[union-attr]
    assert sorted(waits)[len(waits) // 2] > 50, progress  # the median line


def test_a_slow_step_is_not(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trainer, lines = _fit(tmp_path, FastStep(step_s=STEP_S), caplog)
    shares = _shares(tmp_path)
    assert len(shares) == 3 and max(shares) < 0.3, shares
    assert float(trainer.callback_metrics["train/data_wait"]) < 0.3
    assert not any("input-bound" in line for line in lines)
    assert any(re.match(r"data wait: \d+ % of training step time waiting for data", line) for line in lines)


def test_the_rich_bar_shows_the_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RichProgress, "WINDOW_SECONDS", 0.0)
    bar = RichProgress(leave=False, input_bound_share=SHARE)
    module = FastStep()
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_steps=2,
        accelerator="cpu",
        logger=False,
        limit_val_batches=0,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[bar],
    )
    trainer.fit(
        module, datamodule=receipt_datamodule(make_root(tmp_path / "data", num_images=4), crop_size=32)
    )
    assert re.fullmatch(r"wait \d+ %.*", str(bar.get_metrics(trainer, module)["data"]))
