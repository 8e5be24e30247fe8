"""A fit with validation always scores its final weights, so the run ends with a best checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ocr.lightning_modules.callbacks.final_validation import ValidateAtEnd
from tests.helpers.triage_tiny import TinyModule, quiet_cpu_trainer, run_checkpoint, tiny_loader


class _Scored(TinyModule):
    """Logs a score that grows with the step, and records the steps it validated at."""

    def __init__(self) -> None:
        super().__init__()
        self.validated_at: list[int] = []

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.log("val/hmean", self.global_step / 100)

    def on_validation_epoch_end(self) -> None:
        self.validated_at.append(self.global_step)


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        # Fewer steps than an epoch: no validation at all before; mid-epoch: the last 2 steps unscored.
        ({"max_steps": 3, "max_epochs": 5}, [3]),
        ({"max_steps": 6, "max_epochs": 5}, [4, 6]),
        # The last of 3 epochs is off the interval of 2: only step 8 was scored.
        ({"max_steps": -1, "max_epochs": 3, "check_val_every_n_epoch": 2}, [8, 12]),
    ],
)
def test_the_final_weights_are_validated_and_kept_as_best(
    tmp_path: Path, limits: dict[str, int], expected: list[int]
) -> None:
    module = _Scored()  # 4 steps per epoch
    trainer = quiet_cpu_trainer(
        tmp_path, [ValidateAtEnd(), run_checkpoint(tmp_path / "checkpoints")], **limits
    )
    trainer.fit(module, tiny_loader(), tiny_loader())
    assert module.validated_at == expected and trainer.global_step == expected[-1]
    [best] = (tmp_path / "checkpoints").glob("best_*.ckpt")
    assert best.name.startswith(f"best_hmean{expected[-1] / 100:.4f}")
