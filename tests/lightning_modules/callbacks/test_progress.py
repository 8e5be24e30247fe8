"""Progress: the rich bar on a terminal, plain log lines (step/total, loss, img/s, ETA) otherwise."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any

import lightning as L
import pytest
from lightning.pytorch.callbacks import RichProgressBar

from ocr.lightning_modules.callbacks.progress import PlainProgress, progress_bar
from tests.helpers.triage_tiny import TinyModule, tiny_loader


class ScoredModule(TinyModule):
    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.log("val/hmean", 0.25)


@pytest.mark.parametrize("terminal", [True, False])
def test_the_bar_is_for_terminals_only(monkeypatch: pytest.MonkeyPatch, terminal: bool) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: terminal)
    bar = progress_bar(every_n_seconds=5, leave=False)
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
        callbacks=[PlainProgress(every_n_seconds=0)],
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


def test_rejects_a_negative_interval() -> None:
    with pytest.raises(ValueError, match="callbacks.progress_bar.every_n_seconds"):
        PlainProgress(every_n_seconds=-1)
