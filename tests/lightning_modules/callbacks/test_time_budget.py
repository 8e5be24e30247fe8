from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from omegaconf import DictConfig

from ocr.lightning_modules.callbacks import time_budget
from ocr.lightning_modules.callbacks.time_budget import BudgetPlan, Costs, TimeBudget, plan_steps
from ocr.lightning_modules.schedule import WarmupDecaySchedule
from ocr.utils.config_types import check_config_types
from ocr.utils.errors import UsageError
from tests.helpers.triage_tiny import TinyModule, quiet_cpu_trainer, run_checkpoint, tiny_loader

SECONDS_PER_STEP = 1.0


def _plan(
    seconds_left: float, *, max_steps: int = -1, val_every: int = 1, steps_done: int = 0
) -> tuple[int, bool]:
    """Planned steps (in epochs of 10 steps) and whether they fit."""
    costs = Costs(
        seconds_per_step=1.0,
        steps_done=steps_done,
        steps_per_block=10,
        val_every=val_every,
        seconds_per_validation=5.0,
        seconds_after_fit=0.0,
        seconds_left=seconds_left,
    )
    steps, fits = plan_steps(costs, max_steps)
    return steps // 10, fits


def test_plan_takes_the_most_epochs_that_fit() -> None:
    # Each epoch costs 10 steps + one validation = 15 s.
    assert _plan(45.0) == (3, True)
    assert _plan(44.9) == (2, True)
    assert _plan(44.9, steps_done=4) == (3, True)  # steps already trained are not paid again
    assert _plan(1000.0, max_steps=40) == (4, True)  # the configured max_steps caps the run


def test_plan_validates_at_the_interval_and_at_the_last_epoch() -> None:
    # val_every=4: 8 epochs validate after epochs 4 and 8; 6 epochs after 4 and 6; 7 after 4 and 7.
    assert _plan(90.0, val_every=4) == (8, True)
    assert _plan(70.0, val_every=4) == (6, True)
    assert _plan(79.9, val_every=4) == (6, True)  # 7 epochs: 70 s of steps and two validations


@pytest.mark.parametrize(
    ("first_epoch", "epochs", "val_every", "expected"),
    [(0, 7, 2, 4), (0, 8, 2, 4), (0, 1, 3, 1), (3, 7, 2, 3), (6, 7, 2, 1), (7, 7, 2, 0), (0, 5, 1, 5)],
)
def test_validations_counts_the_interval_and_the_last_epoch(
    first_epoch: int, epochs: int, val_every: int, expected: int
) -> None:
    # 7 epochs every 2 from the start: after epochs 2, 4, 6 and 7; from epoch 3 (0-based) on: 4, 6, 7.
    assert time_budget.validations(first_epoch, epochs, val_every) == expected


def test_plan_keeps_one_epoch_and_says_when_it_does_not_fit() -> None:
    assert _plan(3.0) == (1, False)


def test_a_resumed_plan_trains_at_least_one_more_epoch() -> None:
    """Planned again after 2 epochs (a resume that trains longer): ending there would train nothing."""
    assert _plan(3.0, steps_done=20) == (3, False)
    assert _plan(3.0, steps_done=27) == (3, False)  # the epoch in progress ends


class _ScheduledTiny(TinyModule):
    """TinyModule with the project's poly schedule (recording each step's LR), each step advancing a fake
    clock."""

    def __init__(self, clock: SimpleNamespace) -> None:
        super().__init__()
        self.clock = clock
        self.validations = 0
        self.lrs: list[float] = []

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        self.clock.now += SECONDS_PER_STEP
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.clock.now += 0.1

    def on_validation_epoch_end(self) -> None:
        self.validations += 1

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = WarmupDecaySchedule(
            optimizer,
            horizon=lambda: int(self.trainer.estimated_stepping_batches),
            kind="poly",
            warmup_ratio=0.0,
            power=1.0,
            min_lr_ratio=0.0,
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def _fit(
    tmp_path: Path,
    callback: TimeBudget,
    module: L.LightningModule,
    *extra: Callback,
    ckpt_path: Path | None = None,
    **trainer_args: Any,
) -> L.Trainer:
    limits = {"max_epochs": 100, "max_steps": 200, "check_val_every_n_epoch": 1, **trainer_args}
    trainer = quiet_cpu_trainer(tmp_path, [callback, *extra], **limits)
    trainer.fit(
        module,
        train_dataloaders=tiny_loader(),
        val_dataloaders=tiny_loader(),
        ckpt_path=ckpt_path,
        weights_only=False,
    )
    return trainer


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    fake = SimpleNamespace(now=0.0)
    fake_time = SimpleNamespace(time=lambda: fake.now, perf_counter=lambda: fake.now)
    monkeypatch.setattr(time_budget, "time", fake_time)
    monkeypatch.setattr(time_budget, "process_started", lambda: 0.0)
    return fake


def _lr(trainer: L.Trainer) -> float:
    return float(trainer.optimizers[0].param_groups[0]["lr"])


def test_budget_plans_the_steps_and_the_schedule_ends_with_them(
    tmp_path: Path, clock: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    # 8 images of batch 2: 4 steps per epoch at 1 s, 0.5 s per image; a validation of 8 images at
    # eval_cost 1.5 is planned at 6 s. Measured after 1 + 2 steps, at t = 3 s: 57 s left, minus the
    # 20 s reserve. Validating every epoch, E epochs cost (4E - 3) + 6E <= 37, so E = 4: 16 steps.
    callback = TimeBudget(minutes=1.0, test_after_fit=False, measure_steps=2, skip_steps=1)
    module = _ScheduledTiny(clock)
    with caplog.at_level(logging.INFO, logger=time_budget.__name__):
        trainer = _fit(tmp_path, callback, module)
    assert callback.plan == BudgetPlan(16, seconds_per_step=1.0)
    assert trainer.global_step == 16 and module.validations == 4
    assert trainer.lr_scheduler_configs[0].scheduler.horizon() == 16
    assert module.lrs[8] == pytest.approx(0.1 * (1 - 8 / 16))  # the schedule of the planned 16 steps
    assert _lr(trainer) == pytest.approx(0.0, abs=1e-9)  # decayed to the end
    [cut] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "training 16 steps (4 epochs), validating every 1 epoch and at the last (about 6 s each)" in cut
    assert "; 16 of the configured 200 steps: time_budget_minutes=null trains them all" in cut
    assert callback.cut_summary(trainer.global_step) == (
        "time budget: trained 16 of 200 steps in time_budget_minutes=1 (time_budget_minutes=null trains them "
        "all; a larger budget trains more)"
    )


def test_validation_every_n_steps_is_planned_in_whole_intervals(
    tmp_path: Path, clock: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    # As above, but validating every 6 steps (check_val_every_n_epoch=None): I intervals cost
    # (6I - 3) + 6I <= 37, so I = 3: 18 steps, validated after steps 6, 12 and 18 (the last one too).
    callback = TimeBudget(minutes=1.0, test_after_fit=False, measure_steps=2, skip_steps=1)
    module = _ScheduledTiny(clock)
    with caplog.at_level(logging.INFO, logger=time_budget.__name__):
        trainer = _fit(tmp_path, callback, module, check_val_every_n_epoch=None, val_check_interval=6)
    assert trainer.global_step == 18 and module.validations == 3
    assert "training 18 steps (3 intervals), validating every 6 steps" in caplog.text


class _SlowingTiny(_ScheduledTiny):
    """Steps take 1 s until 8 are done, then 6 s (a machine that got loaded after the plan)."""

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        if self.global_step >= 8:
            self.clock.now += 5.0
        return super().training_step(batch, batch_idx)


def test_budget_trains_fewer_epochs_when_steps_slow_down(
    tmp_path: Path, clock: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    # Planned at 1 s/step: 16 steps (as above). Epoch 3 runs at 6 s/step and ends at t = 33.2 s (two
    # measured validations of 0.4 s): a fourth epoch (24 s + 0.4 s + the 20 s reserve) no longer fits.
    callback = TimeBudget(minutes=1.0, test_after_fit=False, measure_steps=2, skip_steps=1)
    module = _SlowingTiny(clock)
    with caplog.at_level(logging.WARNING, logger=time_budget.__name__):
        trainer = _fit(tmp_path, callback, module)
    assert trainer.global_step == 12 and callback.plan == BudgetPlan(12, seconds_per_step=6.0)
    assert trainer.lr_scheduler_configs[0].scheduler.horizon() == 12
    assert _lr(trainer) == pytest.approx(0.0, abs=1e-9)  # the schedule still ends with the run
    assert clock.now < 60.0 - callback.reserve_seconds
    assert "steps take 6.00 s now (1.00 s when planned); training 12 steps instead of 16" in caplog.text


class _SlowingAfterFirstEpoch(_ScheduledTiny):
    """Steps take 1 s in the first epoch, then 10 s; validation logs a score for the checkpoint."""

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        if self.global_step >= 4:
            self.clock.now += 9.0
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        super().validation_step(batch, batch_idx)
        self.log("val/hmean", 0.5)


def test_the_last_epoch_of_a_shortened_plan_validates_and_leaves_a_best_checkpoint(
    tmp_path: Path, clock: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    # 4 steps per epoch, validating every 4 epochs. Planned at t = 3 s with 63 s left (a 20 s reserve; the
    # validation data is not loaded yet, so validations are priced at 0 s): 11 epochs, validating after
    # epochs 4, 8 and 11. From the second epoch on steps take 10 s: the rest fits only if the run ends with
    # that epoch, which then is the last and must validate.
    callback = TimeBudget(minutes=1.1, test_after_fit=False, measure_steps=2, skip_steps=1)
    module = _SlowingAfterFirstEpoch(clock)
    checkpoint = run_checkpoint(tmp_path / "checkpoints")
    with caplog.at_level(logging.INFO, logger=time_budget.__name__):
        trainer = _fit(tmp_path, callback, module, checkpoint, check_val_every_n_epoch=4)
    assert "training 44 steps (11 epochs), validating every 4 epochs" in caplog.text
    assert "training 8 steps instead of 44" in caplog.text
    assert trainer.global_step == 8 and module.validations == 1
    assert [p.name for p in (tmp_path / "checkpoints").glob("best_*.ckpt")] == [
        "best_hmean0.5000_epoch01.ckpt"
    ]


def test_budget_reserves_the_test_after_fit(tmp_path: Path, clock: SimpleNamespace) -> None:
    callback = TimeBudget(minutes=1.0, test_after_fit=True, measure_steps=2, skip_steps=1)
    trainer = _fit(tmp_path, callback, _ScheduledTiny(clock))
    assert trainer.global_step == 12  # one more 6 s evaluation reserved: 10E - 3 <= 31 gives E = 3


def test_budget_off_leaves_the_run_alone(tmp_path: Path, clock: SimpleNamespace) -> None:
    callback = TimeBudget(minutes=None, test_after_fit=False)
    trainer = _fit(tmp_path, callback, _ScheduledTiny(clock), max_steps=10)
    assert callback.plan is None and trainer.global_step == 10


def test_a_resume_keeps_the_plan_and_its_schedule(tmp_path: Path, clock: SimpleNamespace) -> None:
    """Stopped at step 8 of the 16 planned, then resumed: the same 16 steps, at the same LRs."""
    callback = TimeBudget(minutes=1.0, test_after_fit=False, measure_steps=2, skip_steps=1)
    planned = _ScheduledTiny(clock)
    every_8 = ModelCheckpoint(dirpath=tmp_path, filename="{step}", every_n_train_steps=8, save_top_k=-1)
    _fit(tmp_path, callback, planned, every_8)
    clock.now = 0.0
    resumed = _ScheduledTiny(clock)
    again = TimeBudget(minutes=1.0, test_after_fit=False, measure_steps=2, skip_steps=1)
    trainer = _fit(tmp_path / "resumed", again, resumed, ckpt_path=tmp_path / "step=8.ckpt")
    assert again.plan == callback.plan and trainer.global_step == 16
    assert resumed.lrs == pytest.approx(planned.lrs[8:])


def _resumed(minutes: float, plan: BudgetPlan, planned_for: tuple[int, int]) -> TimeBudget:
    """A TimeBudget restored from a checkpoint of ``plan``, made for ``planned_for`` (configured steps,
    validation interval) and ``minutes``."""
    resumed = TimeBudget(minutes=minutes, test_after_fit=False)
    resumed.load_state_dict({"plan": asdict(plan), "planned_for": [*planned_for, minutes]})
    return resumed


def test_a_resume_that_trains_longer_plans_again(
    tmp_path: Path, clock: SimpleNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    """`resume=<run> trainer.max_steps=16` after a run planned for its 8 configured steps: the saved plan
    (8 steps) would end the resumed run at once."""
    resumed = _resumed(10.0, BudgetPlan(8, seconds_per_step=1.0), (8, 1))
    with caplog.at_level(logging.INFO, logger=time_budget.__name__):
        trainer = _fit(tmp_path, resumed, _ScheduledTiny(clock), max_steps=16)
    assert trainer.global_step == 16 and resumed.plan is not None and resumed.plan.max_steps == 16
    assert (
        "planned for (8, 1, 10.0) (configured steps, validation interval, minutes), the resumed one asks "
        in caplog.text
    )
    assert "for (16, 1, 10.0): planning again" in caplog.text


def test_an_interval_that_does_not_divide_the_epochs_still_validates_the_last(
    tmp_path: Path, clock: SimpleNamespace
) -> None:
    # 28 steps of 4 per epoch: 7 epochs, validating every 2 and at the last: after epochs 2, 4, 6 and 7.
    resumed = _resumed(10.0, BudgetPlan(28, seconds_per_step=1.0), (200, 2))
    module = _ScheduledTiny(clock)
    trainer = _fit(tmp_path, resumed, module, check_val_every_n_epoch=2)
    assert trainer.global_step == 28 and module.validations == 4


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
        # Fewer steps than an epoch: Lightning alone validates never; mid-epoch: not the last 2 steps.
        ({"max_steps": 3, "max_epochs": 5}, [3]),
        ({"max_steps": 6, "max_epochs": 5}, [4, 6]),
        # The last of 3 epochs is off the interval of 2: Lightning alone scores step 8 only.
        ({"max_steps": -1, "max_epochs": 3, "check_val_every_n_epoch": 2}, [8, 12]),
    ],
)
def test_without_a_budget_the_final_weights_are_validated_and_kept_as_best(
    tmp_path: Path, limits: dict[str, int], expected: list[int]
) -> None:
    module = _Scored()  # 4 steps per epoch
    callbacks = [TimeBudget(minutes=None, test_after_fit=True), run_checkpoint(tmp_path / "checkpoints")]
    trainer = quiet_cpu_trainer(tmp_path, callbacks, **limits)
    trainer.fit(module, tiny_loader(), tiny_loader())
    assert module.validated_at == expected and trainer.global_step == expected[-1]
    [best] = (tmp_path / "checkpoints").glob("best_*.ckpt")
    assert best.name.startswith(f"best_hmean{expected[-1] / 100:.4f}")


@pytest.mark.parametrize(("age", "counts_from"), [(30.0, 970.0), (600.0, 1000.0)])
def test_the_budget_counts_from_the_runner_start_or_from_now_in_a_long_lived_process(
    monkeypatch: pytest.MonkeyPatch, age: float, counts_from: float
) -> None:
    # A runner 30 s after its start (imports) counts from its start; pytest or a notebook, started
    # 10 minutes before this run, counts from now.
    monkeypatch.setattr(time_budget, "time", SimpleNamespace(time=lambda: 1000.0))
    monkeypatch.setattr(time_budget, "process_started", lambda: 1000.0 - age)
    assert time_budget.run_started(max_startup_seconds=120.0) == counts_from


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("time_budget_minutes=0", "callbacks.time_budget.minutes: expected > 0.0, got 0"),
        (
            "+callbacks.time_budget.measure_steps=0",
            "callbacks.time_budget.measure_steps: expected >= 1, got 0",
        ),
        ("+callbacks.time_budget.skip_steps=-1", "callbacks.time_budget.skip_steps: expected >= 0, got -1"),
    ],
)
def test_the_config_check_refuses_bad_budget_settings(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, override: str, message: str
) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        check_config_types(compose_cfg("train", [override], tmp_path))


def test_a_run_that_fits_keeps_its_configured_steps(tmp_path: Path, clock: SimpleNamespace) -> None:
    # 10 steps (not a whole number of 4-step epochs) at 1 s, two 6 s validations: far inside 5 minutes.
    callback = TimeBudget(minutes=5.0, test_after_fit=True, measure_steps=2, skip_steps=1)
    trainer = _fit(tmp_path, callback, _ScheduledTiny(clock), max_steps=10)
    assert callback.plan == BudgetPlan(10, seconds_per_step=1.0)
    assert trainer.global_step == 10 and callback.cut_summary(10) is None


def test_a_budget_never_adds_steps(tmp_path: Path, clock: SimpleNamespace) -> None:
    # max_steps shorter than an epoch and a budget too small for it: still 3 steps, not a whole epoch.
    callback = TimeBudget(minutes=0.3, test_after_fit=True, measure_steps=1, skip_steps=0)
    trainer = _fit(tmp_path, callback, _ScheduledTiny(clock), max_steps=3)
    assert callback.plan is not None and callback.plan.max_steps == 3 and trainer.global_step == 3


def test_a_run_bounded_by_epochs_that_fits_keeps_its_schedule(tmp_path: Path, clock: SimpleNamespace) -> None:
    """max_steps=-1 with max_epochs: the configured length is the epochs' steps, and nothing is set."""
    callback = TimeBudget(minutes=5.0, test_after_fit=True, measure_steps=2, skip_steps=1)
    trainer = _fit(tmp_path, callback, _ScheduledTiny(clock), max_steps=-1, max_epochs=3)
    assert callback.plan == BudgetPlan(12, seconds_per_step=1.0) and trainer.global_step == 12
    assert trainer.lr_scheduler_configs[0].scheduler.horizon() == 12 and trainer.max_steps == -1


def test_validation_size_comes_from_the_datamodule_before_the_first_validation() -> None:
    """Lightning loads validation data at the first validation; the plan is made before that."""
    datamodule = SimpleNamespace(val_dataloader=lambda: tiny_loader(num=8))
    trainer = SimpleNamespace(val_dataloaders=None, datamodule=datamodule, limit_val_batches=1.0)
    assert time_budget._val_images(trainer) == 8
    assert time_budget._val_images(SimpleNamespace(**{**vars(trainer), "limit_val_batches": 0})) == 0
