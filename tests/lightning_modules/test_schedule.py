import logging
import math
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from ocr.lightning_modules.schedule import WarmupDecaySchedule, warmup_decay_factor
from tests.helpers.triage_tiny import TinyModule, tiny_loader


def _lrs(kind: str, total: int, warmup_ratio: float) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = WarmupDecaySchedule(
        opt, horizon=lambda: total, kind=kind, warmup_ratio=warmup_ratio, power=0.9, min_lr_ratio=0.0
    )
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


@pytest.mark.parametrize("kind", ["poly", "cosine"])
def test_schedule_warms_up_then_decays_to_zero(kind: str) -> None:
    lrs = _lrs(kind, total=100, warmup_ratio=0.1)
    assert lrs[0] == pytest.approx(0.1)
    assert max(lrs) == pytest.approx(1.0)
    assert lrs.index(max(lrs)) == 9
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:], strict=False))
    assert lrs[-1] < 0.05


def test_schedule_is_not_constant_without_warmup() -> None:
    lrs = _lrs("poly", total=10, warmup_ratio=0.0)
    assert len(set(lrs)) == 10


def test_schedule_rejects_bad_inputs() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match="scheduler horizon: expected a positive number"):
        WarmupDecaySchedule(opt, horizon=lambda: 0, kind="poly", warmup_ratio=0.0, power=1, min_lr_ratio=0.0)
    with pytest.raises(ValueError, match="scheduler.kind"):
        WarmupDecaySchedule(opt, horizon=lambda: 10, kind="step", warmup_ratio=0.0, min_lr_ratio=0.0)
    with pytest.raises(ValueError, match="scheduler.kind"):
        warmup_decay_factor(5, total_steps=10, warmup_steps=0, kind="step", power=1.0, min_lr_ratio=0.0)
    with pytest.raises(ValueError, match="scheduler.power"):
        WarmupDecaySchedule(opt, horizon=lambda: 10, kind="poly", warmup_ratio=0.1, min_lr_ratio=0.0)


@pytest.mark.parametrize("power", [None, 1.0])  # cosine.yaml has no power; old run configs stored 1.0
def test_cosine_ignores_power(power: float | None) -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = WarmupDecaySchedule(
        opt, horizon=lambda: 10, kind="cosine", warmup_ratio=0.0, power=power, min_lr_ratio=0.0
    )
    for _ in range(5):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))


def test_the_schedule_follows_its_horizon_and_a_checkpoint_keeps_only_the_step() -> None:
    """Planned for 100 steps, then 20 (what the time budget does to ``trainer.max_steps``): the LR is the
    20-step schedule's from then on, and a restore takes the step, not the saved settings."""
    horizon = [100]

    def schedule(kind: str) -> WarmupDecaySchedule:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        return WarmupDecaySchedule(
            opt, horizon=lambda: horizon[0], kind=kind, warmup_ratio=0.1, power=1.0, min_lr_ratio=0.0
        )

    sched = schedule("poly")
    for _ in range(5):
        sched.optimizer.step()
        sched.step()
    horizon[0] = 20
    for _ in range(6):
        sched.optimizer.step()
        sched.step()
    assert sched.get_last_lr() == [pytest.approx(1 - 9 / 18)]  # step 11 of 20, 2 warm-up steps
    state = sched.state_dict()
    assert state["last_epoch"] == 11 and not {"horizon", "kind", "warmup_ratio"} & set(state)
    restored = schedule("cosine")  # a resume with scheduler=cosine
    restored.optimizer.param_groups[0]["lr"] = sched.get_last_lr()[0]  # the optimizer, restored first
    restored.load_state_dict(state)
    assert restored.get_last_lr() == [pytest.approx(0.5 * (1 + math.cos(math.pi * 9 / 18)))]
    for _ in range(9):
        restored.optimizer.step()
        restored.step()
    assert restored.last_epoch == 20 and restored.get_last_lr() == [0.0]


class _PolyTiny(TinyModule):
    """TinyModule with the project's schedule sized from the trainer; records the LR of every step."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.lrs: list[float] = []

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = WarmupDecaySchedule(
            optimizer,
            horizon=lambda: int(self.trainer.estimated_stepping_batches),
            kind=self.kind,
            warmup_ratio=0.25,
            power=0.9,
            min_lr_ratio=0.0,
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def _fit(root: Path, module: _PolyTiny, max_steps: int, ckpt_path: Path | None = None) -> L.Trainer:
    trainer = L.Trainer(
        default_root_dir=root,
        max_steps=max_steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(module, train_dataloaders=tiny_loader(num=32), ckpt_path=ckpt_path, weights_only=False)
    return trainer


@pytest.mark.parametrize("kind", ["poly", "cosine"])
def test_a_resume_that_trains_longer_replans_the_schedule_over_the_new_total(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """A 4-step run decays to lr 0; resumed to 12 steps it trains at the LR of a 12-step schedule."""
    first = _PolyTiny(kind)
    _fit(tmp_path, first, max_steps=4).save_checkpoint(tmp_path / "last.ckpt")
    assert first.lrs[-1] > 0.0 and first.trainer.optimizers[0].param_groups[0]["lr"] == 0.0
    resumed = _PolyTiny(kind)
    weights = [p.detach().clone() for p in first.parameters()]
    with caplog.at_level(logging.INFO, logger="ocr.lightning_modules.schedule"):
        trainer = _fit(tmp_path, resumed, max_steps=12, ckpt_path=tmp_path / "last.ckpt")
    assert trainer.global_step == 12
    planned = _PolyTiny(kind)
    _fit(tmp_path / "planned", planned, max_steps=12)
    assert resumed.lrs == pytest.approx(planned.lrs[4:])  # from step 4 on, as if planned for 12 steps
    assert min(resumed.lrs) > 0.0
    assert any(not torch.equal(w, p) for w, p in zip(weights, resumed.parameters(), strict=True))
    assert "Resume: lr 0 -> 0.0" in caplog.text
    assert f"at step 4, the LR of a {kind} schedule over 12 steps" in caplog.text


def test_a_resume_with_the_same_settings_restores_the_schedule_exactly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def scheduler() -> WarmupDecaySchedule:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        return WarmupDecaySchedule(
            opt, horizon=lambda: 12, kind="poly", warmup_ratio=0.25, power=0.9, min_lr_ratio=0.0
        )

    saved = scheduler()
    for _ in range(5):
        saved.optimizer.step()
        saved.step()
    restored = scheduler()
    restored.optimizer.load_state_dict(saved.optimizer.state_dict())  # first, as Lightning does
    with caplog.at_level(logging.INFO, logger="ocr.lightning_modules.schedule"):
        restored.load_state_dict(saved.state_dict())
    assert restored.get_last_lr() == saved.get_last_lr() and restored.last_epoch == 5
    assert "Resume: lr" not in caplog.text
