"""The data-wait figure on loaders that are slow on purpose: loggers, progress lines, end-of-run summary."""

from __future__ import annotations

import csv
import logging
import re
import time
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from ocr.data.dataset import ReceiptDataset
from ocr.lightning_modules.callbacks.data_wait import DataWait
from ocr.lightning_modules.callbacks.progress import PlainProgress, RichProgress
from tests.helpers.receipt_fixtures import make_root, receipt_datamodule

SAMPLE_S = 0.1  # a slow sample: two per batch
STEP_S = 0.2  # a slow training step


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
        callbacks=[DataWait(input_bound_share=0.2), PlainProgress(every_n_seconds=0)],
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
    bar = RichProgress(leave=False)
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


def test_rejects_a_share_outside_0_1() -> None:
    with pytest.raises(ValueError, match="callbacks.data_wait.input_bound_share"):
        DataWait(input_bound_share=1.5)
