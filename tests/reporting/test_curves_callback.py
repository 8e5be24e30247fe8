"""TrainingCurves writes curves.png at the end of fit and when the run fails, without a logger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import pytest
import torch

from ocr.reporting.curves_callback import TrainingCurves
from tests.helpers.triage_tiny import TinyModule, fit_tiny


class LoggingModule(TinyModule):
    """Logs the loss and one part as DetectionModule does; raises at ``fail_at`` when set."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.fail_at = fail_at

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        if self.global_step == self.fail_at:
            raise RuntimeError("injected failure")
        loss = super().training_step(batch, batch_idx)
        self.log_dict({"train/loss": loss, "train/loss/prob": loss / 2}, on_step=True, on_epoch=False)
        return loss


def test_curves_written_at_the_end_of_fit(tmp_path: Path) -> None:
    curves = TrainingCurves(path=str(tmp_path / "run" / "curves.png"), every_n_steps=1)
    fit_tiny(tmp_path, [curves], max_steps=4, module=LoggingModule())
    assert [step for step, _ in curves.series["train/loss"]] == [1, 2, 3, 4]
    assert len(curves.series["train/loss/prob"]) == 4 and len(curves.series["lr"]) == 4
    image = cv2.imread(str(tmp_path / "run" / "curves.png"))
    assert image is not None and image.shape[1] == 900


def test_curves_written_when_the_run_fails(tmp_path: Path) -> None:
    curves = TrainingCurves(path=str(tmp_path / "curves.png"), every_n_steps=2)
    with pytest.raises(RuntimeError, match="injected failure"):
        fit_tiny(tmp_path, [curves], max_steps=10, module=LoggingModule(fail_at=5))
    assert [step for step, _ in curves.series["train/loss"]] == [1, 2, 4]
    assert cv2.imread(str(tmp_path / "curves.png")) is not None


def test_series_survive_a_checkpoint_round_trip(tmp_path: Path) -> None:
    curves = TrainingCurves(path=str(tmp_path / "curves.png"), every_n_steps=1)
    fit_tiny(tmp_path, [curves], max_steps=2, module=LoggingModule())
    resumed = TrainingCurves(path=str(tmp_path / "curves.png"), every_n_steps=1)
    resumed.load_state_dict(curves.state_dict())
    assert resumed.series == curves.series


def test_rejects_a_non_positive_interval() -> None:
    with pytest.raises(ValueError, match="every_n_steps: expected >= 1, got 0"):
        TrainingCurves(path="curves.png", every_n_steps=0)
