import logging
import math
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from ocr.lightning_modules.schedule import (
    WarmupDecay,
    build_warmup_scheduler,
    resize_schedules,
    warmup_decay_factor,
)
from tests.helpers.triage_tiny import TinyModule, tiny_loader


def _lrs(kind: str, total: int, warmup_ratio: float) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_warmup_scheduler(
        opt, total_steps=total, kind=kind, warmup_ratio=warmup_ratio, power=0.9, min_lr_ratio=0.0
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
    with pytest.raises(ValueError, match="total_steps"):
        build_warmup_scheduler(opt, total_steps=0, kind="poly", warmup_ratio=0.0, power=1.0, min_lr_ratio=0.0)
    with pytest.raises(ValueError, match="scheduler.kind"):
        warmup_decay_factor(5, total_steps=10, warmup_steps=0, kind="step", power=1.0, min_lr_ratio=0.0)
    with pytest.raises(ValueError, match="scheduler.power"):
        build_warmup_scheduler(opt, total_steps=10, kind="poly", warmup_ratio=0.1, min_lr_ratio=0.0)


@pytest.mark.parametrize("power", [None, 1.0])  # cosine.yaml has no power; old run configs stored 1.0
def test_cosine_ignores_power(power: float | None) -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_warmup_scheduler(
        opt, total_steps=10, kind="cosine", warmup_ratio=0.0, power=power, min_lr_ratio=0.0
    )
    for _ in range(5):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))


def test_resized_schedule_decays_over_the_new_length_and_survives_a_checkpoint() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_warmup_scheduler(
        opt, total_steps=100, kind="poly", warmup_ratio=0.1, power=1.0, min_lr_ratio=0.0
    )
    for _ in range(5):
        opt.step()
        sched.step()
    assert resize_schedules([sched], 20) == 1
    state = sched.state_dict()
    restored = build_warmup_scheduler(
        torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0),
        total_steps=100,
        kind="poly",
        warmup_ratio=0.1,
        power=1.0,
        min_lr_ratio=0.0,
    )
    restored.load_state_dict(state)
    [factor] = restored.lr_lambdas
    assert isinstance(factor, WarmupDecay) and (factor.total_steps, factor.warmup_steps) == (20, 2)
    assert factor(20) == 0.0 and factor(11) == pytest.approx(1 - 9 / 18)
    with pytest.raises(ValueError, match="total_steps"):
        resize_schedules([sched], 0)


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
        scheduler = build_warmup_scheduler(
            optimizer,
            total_steps=int(self.trainer.estimated_stepping_batches),
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
    assert "LR schedule re-planned (planned_steps 4 -> 12): from step 4 on" in caplog.text
    assert "lr 0 -> " in caplog.text


def test_a_resume_with_the_same_settings_restores_the_schedule_exactly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def scheduler() -> torch.optim.lr_scheduler.LRScheduler:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        return build_warmup_scheduler(
            opt, total_steps=12, kind="poly", warmup_ratio=0.25, power=0.9, min_lr_ratio=0.0
        )

    saved = scheduler()
    for _ in range(5):
        saved.optimizer.step()
        saved.step()
    restored = scheduler()
    with caplog.at_level(logging.INFO, logger="ocr.lightning_modules.schedule"):
        restored.load_state_dict(saved.state_dict())
    assert restored.get_last_lr() == saved.get_last_lr() and restored.last_epoch == 5
    assert "re-planned" not in caplog.text
