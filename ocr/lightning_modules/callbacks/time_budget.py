"""Size a run by wall-clock time: measure a few training steps, then set the step budget to fit.

A fixed step count takes 4 minutes on one CPU and 12 on another. With ``minutes`` set, the callback times
``measure_steps`` optimizer steps (after ``skip_steps`` warm-up steps: thread pools, first allocations),
then sets ``max_steps`` to the most whole epochs that fit (capped by the configured ``max_steps``) and the
LR schedule's length to match. Validation keeps its interval in epochs and also runs at the last epoch, so
that start-up, training, its validations and the test after fit end within ``minutes`` of the process
start. A run that validates every N steps instead (``trainer.check_val_every_n_epoch=null
trainer.val_check_interval=N``, for data sets of a few batches per epoch) is planned in whole intervals of
N steps, each ending with its validation. Steps can slow down after that (a loaded machine, a VM's
neighbours, slower data): at the end of every epoch the callback compares that epoch's step time and the
last validation's measured time with the plan, and when the rest no longer fits it trains fewer epochs
(never more), with a warning. It does so before the epoch's last step, so that Lightning's decision to
validate that epoch follows the new plan: the last epoch of any plan validates. The plan is saved in
checkpoints: a resumed run keeps it instead of measuring again, unless the resume changed the run's length
(``trainer.max_steps=400``) or its budget (``time_budget_minutes=10``): then it plans again, for the
budget counted from the resumed process's start.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Sized
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, NamedTuple

import lightning as L
from lightning.pytorch.callbacks import Callback

from ocr.lightning_modules.ranks import decided_on_rank_zero
from ocr.lightning_modules.schedule import resize_schedules
from ocr.utils.text import plural

__all__ = [
    "BudgetPlan",
    "Costs",
    "TimeBudget",
    "fit_epochs",
    "plan_epochs",
    "process_started",
    "rest_cost",
    "run_started",
    "validations",
]

log = logging.getLogger(__name__)

_IMPORTED_AT = time.time()


def process_started() -> float:
    """Wall-clock start of this process (Linux ``/proc``; elsewhere the import time of this module)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED_AT


def run_started(max_startup_seconds: float = 120.0) -> float:
    """Wall-clock start of the run the budget counts from.

    A runner process counts from its own start, so imports and config composition are inside the budget.
    A process already older than ``max_startup_seconds`` when the run is set up (pytest, a notebook)
    started long before this run: the run counts from now.
    """
    started, now = process_started(), time.time()
    return started if now - started <= max_startup_seconds else now


@dataclass(frozen=True)
class BudgetPlan:
    """What the budget decided: train ``max_steps`` optimizer steps, validate every ``val_every`` epochs and
    at the last."""

    max_steps: int
    val_every: int
    seconds_per_step: float


def validations(first_epoch: int, epochs: int, val_every: int) -> int:
    """Validations in epochs ``first_epoch`` to ``epochs - 1`` (0-based) of a run of ``epochs`` epochs that
    validates every ``val_every`` epochs and at its last."""
    if first_epoch >= epochs:
        return 0
    return epochs // val_every - first_epoch // val_every + (1 if epochs % val_every else 0)


class Costs(NamedTuple):
    """What the rest of a run costs, as the budget sees it at one moment."""

    seconds_per_step: float
    steps_done: int
    steps_per_epoch: int
    seconds_per_validation: float
    seconds_after_fit: float  # the reserve, and the test after fit
    seconds_left: float  # in the budget


def rest_cost(costs: Costs, max_steps: int, val_every: int) -> float:
    """Seconds to train on to ``max_steps`` validating every ``val_every`` epochs and at the last, then the
    after-fit work."""
    steps_left = max(0, max_steps - costs.steps_done)
    epochs = math.ceil(max_steps / costs.steps_per_epoch)
    checks = validations(costs.steps_done // costs.steps_per_epoch, epochs, val_every)
    return (
        steps_left * costs.seconds_per_step + checks * costs.seconds_per_validation + costs.seconds_after_fit
    )


def plan_epochs(costs: Costs, max_steps: int, val_every: int) -> tuple[int, bool]:
    """The most whole epochs whose remaining steps, validations (every ``val_every`` epochs and at the last)
    and after-fit work fit in ``costs.seconds_left``: at least up to the end of the epoch in progress (of
    the next one at an epoch's end: a resumed run trains), at most ``max_steps`` steps (``-1``: no cap).
    Returns ``(epochs, fits)``; ``fits`` is False when even that one epoch is too long."""

    def cost(epochs: int) -> float:
        return rest_cost(costs, epochs * costs.steps_per_epoch, val_every)

    cap = math.inf if max_steps < 0 else max(1, max_steps // costs.steps_per_epoch)
    epochs = costs.steps_done // costs.steps_per_epoch + 1
    while epochs + 1 <= cap and cost(epochs + 1) <= costs.seconds_left:
        epochs += 1
    return epochs, cost(epochs) <= costs.seconds_left


def fit_epochs(costs: Costs, max_steps: int, val_every: int) -> tuple[BudgetPlan, int, bool]:
    """The most whole epochs that fit, at most ``max_steps`` steps (-1: no cap; a cap shorter than one epoch
    stays as it is): the plan, its epochs and whether even one epoch fits."""
    epochs, fits = plan_epochs(costs, max_steps, val_every)
    steps = epochs * costs.steps_per_epoch
    plan = BudgetPlan(steps if max_steps < 0 else min(steps, max_steps), val_every, costs.seconds_per_step)
    return plan, epochs, fits


class TimeBudget(Callback):
    """Fit the run into ``minutes`` of wall-clock time from the process start.

    Args:
        minutes: the whole run's budget (start-up, training, validations, test); None turns it off.
        test_after_fit: the runner tests the best checkpoint after fit (one more evaluation to reserve).
        measure_steps: optimizer steps timed to estimate the step time.
        skip_steps: first optimizer steps left out of the timing.
        eval_cost: seconds to evaluate one image, as a multiple of the seconds to train on one (evaluation
            runs at the full letterbox size, then post-processing and CLEval).
        reserve_seconds: margin for what is not measured (best-checkpoint reload, final writes).
    """

    def __init__(
        self,
        *,
        minutes: float | None,
        test_after_fit: bool,
        measure_steps: int = 5,
        skip_steps: int = 2,
        eval_cost: float = 1.5,
        reserve_seconds: float = 20.0,
    ) -> None:
        if minutes is not None and minutes <= 0:
            raise ValueError(f"time_budget.minutes: expected a positive number or null, got {minutes}")
        if measure_steps < 1 or skip_steps < 0:
            raise ValueError(
                "time_budget: expected measure_steps >= 1 and skip_steps >= 0, "
                f"got {measure_steps} and {skip_steps}"
            )
        self.minutes = minutes
        self.test_after_fit = test_after_fit
        self.measure_steps = measure_steps
        self.skip_steps = skip_steps
        self.eval_cost = eval_cost
        self.reserve_seconds = reserve_seconds
        self.plan: BudgetPlan | None = None
        self._started = run_started()
        self._first_step: int | None = None
        self._timed_from: tuple[int, float] | None = None  # (steps done, perf_counter) where timing starts
        self._configured = (-1, 1)  # (optimizer steps, validation interval) as configured
        self._validates_by_epochs = True  # False: validation every N steps (check_val_every_n_epoch=null)
        self._images_per_batch = 1
        self._epoch_steps: list[tuple[int, float]] = []  # this epoch's first and last (global step, time)
        # A loaded plan's configured (optimizer steps, validation interval, minutes); None: not recorded.
        self._planned_for: tuple[int, int, float | None] | None = None
        self._validation_started: float | None = None
        self._validation_seconds: float | None = None  # the last validation's wall time

    def cut_summary(self, global_step: int) -> str | None:
        """The run's end line when the budget trained fewer steps than configured, else None."""
        configured = self._configured[0]
        if self.minutes is None or self.plan is None or not 0 <= global_step < configured:
            return None
        return (
            f"time budget: trained {global_step} of {configured} steps in "
            f"time_budget_minutes={self.minutes:g} (time_budget_minutes=null trains them all; a larger "
            "budget trains more)"
        )

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.minutes is None:
            return
        total = trainer.estimated_stepping_batches  # max_steps or max_epochs, whichever ends first
        self._configured = (int(total) if math.isfinite(total) else -1, trainer.check_val_every_n_epoch or 1)
        self._validates_by_epochs = trainer.check_val_every_n_epoch is not None
        if self.plan is not None and self._planned_for not in (None, (*self._configured, self.minutes)):
            log.info(
                "time budget: the run was planned for %s (configured steps, validation interval, minutes), "
                "the resumed one asks for %s: planning again",
                self._planned_for,
                (*self._configured, self.minutes),
            )
            self.plan = None
        if self.plan is not None:
            self._apply(trainer, self.plan)
            log.info("time budget: resumed with the saved plan of %d steps", self.plan.max_steps)
            return
        self._first_step = trainer.global_step
        self._timed_from = (0, time.perf_counter())

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.minutes is None:
            return
        if self.plan is not None:
            mark = (trainer.global_step, time.perf_counter())
            self._epoch_steps = [self._epoch_steps[0] if self._epoch_steps else mark, mark]
            return
        if self._first_step is None or self._timed_from is None:
            return
        done = trainer.global_step - self._first_step
        if done <= self.skip_steps:
            self._timed_from = (done, time.perf_counter())
        elif done - self._timed_from[0] >= self.measure_steps:
            seconds_per_step = (time.perf_counter() - self._timed_from[1]) / (done - self._timed_from[0])
            self._images_per_batch = _images_in(batch)
            self._apply(
                trainer,
                decided_on_rank_zero(trainer, partial(self._plan, trainer, self.minutes, seconds_per_step)),
            )

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.plan is not None:
            self._set_validation(trainer, self.plan)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validation_started = time.perf_counter()

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._validation_started is not None and not trainer.sanity_checking:
            self._validation_seconds = time.perf_counter() - self._validation_started

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Before an epoch's last step: re-plan from this epoch's step time (validation excluded), fewer
        epochs when the rest no longer fits. Lightning decides whether to validate the epoch after its last
        step, from the interval :meth:`_set_validation` sets, so the plan's last epoch validates."""
        if trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            self._replan_epochs(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_steps = []

    def _replan_epochs(self, trainer: L.Trainer) -> None:
        marks = self._epoch_steps
        if self.minutes is None or self.plan is None or len(marks) < 2 or marks[1][0] <= marks[0][0]:
            return
        (first_step, first_time), (last_step, last_time) = marks
        seconds_per_step = (last_time - first_time) / (last_step - first_step)
        plan = decided_on_rank_zero(trainer, partial(self._replan, trainer, seconds_per_step))
        if plan.max_steps < self.plan.max_steps:
            log.warning(
                "time budget %.1f min: steps take %.2f s now (%.2f s when planned); training %d steps "
                "instead of %d, validating every %d epochs and at the last, to end in time",
                self.minutes,
                seconds_per_step,
                self.plan.seconds_per_step,
                plan.max_steps,
                self.plan.max_steps,
                plan.val_every,
            )
            self.plan = plan
            self._set(trainer, plan)

    def _costs(self, trainer: L.Trainer, seconds_per_step: float) -> Costs:
        """What the rest of the run costs at ``seconds_per_step``, measured once a validation ran. With
        validation every N steps, N steps count as an "epoch" validated at its end."""
        steps_per_epoch = (
            _steps_per_epoch(trainer) if self._validates_by_epochs else _steps_per_check(trainer)
        )
        images_per_step = self._images_per_batch * trainer.accumulate_grad_batches
        seconds_per_image = seconds_per_step / max(1, images_per_step)
        seconds_per_validation = (
            self.eval_cost * seconds_per_image * _val_images(trainer)
            if self._validation_seconds is None
            else self._validation_seconds
        )
        return Costs(
            seconds_per_step=seconds_per_step,
            steps_done=trainer.global_step,
            steps_per_epoch=steps_per_epoch,
            seconds_per_validation=seconds_per_validation,
            seconds_after_fit=self.reserve_seconds + (seconds_per_validation if self.test_after_fit else 0.0),
            seconds_left=(self.minutes or 0.0) * 60 - (time.time() - self._started),
        )

    def _replan(self, trainer: L.Trainer, seconds_per_step: float) -> BudgetPlan:
        """The current plan while its rest fits at ``seconds_per_step``, else the most epochs that do."""
        assert self.plan is not None
        costs = self._costs(trainer, seconds_per_step)
        if rest_cost(costs, self.plan.max_steps, self.plan.val_every) <= costs.seconds_left:
            return self.plan
        return fit_epochs(costs, self.plan.max_steps, self.plan.val_every)[0]

    def _plan(self, trainer: L.Trainer, minutes: float, seconds_per_step: float) -> BudgetPlan:
        costs = self._costs(trainer, seconds_per_step)
        max_steps, val_every = self._configured
        if max_steps >= 0:
            configured = rest_cost(costs, max_steps, val_every)
            if configured <= costs.seconds_left:
                log.info(
                    "time budget %.1f min: %.2f s/step measured; the configured %d steps fit "
                    "(about %.0f s of %.0f s left)",
                    minutes,
                    seconds_per_step,
                    max_steps,
                    configured,
                    costs.seconds_left,
                )
                return BudgetPlan(max_steps, val_every=val_every, seconds_per_step=seconds_per_step)
        plan, epochs, fits = fit_epochs(costs, max_steps, val_every)
        length, cadence = (
            (plural(epochs, "epoch"), f"every {plural(plan.val_every, 'epoch')} and at the last")
            if self._validates_by_epochs
            else (plural(epochs, "interval"), f"every {plural(costs.steps_per_epoch, 'step')}")
        )
        log.info(
            "time budget %.1f min: %.2f s/step measured, %.0f s left; training %d steps (%s), validating %s "
            "(about %.0f s each)",
            minutes,
            seconds_per_step,
            costs.seconds_left,
            plan.max_steps,
            length,
            cadence,
            costs.seconds_per_validation,
        )
        if 0 <= plan.max_steps < max_steps:
            log.warning(
                "time budget %.1f min: training %d of the configured %d steps (time_budget_minutes=null "
                "trains them all; a larger time_budget_minutes trains more)",
                minutes,
                plan.max_steps,
                max_steps,
            )
        if not fits:
            log.warning(
                "time budget %.1f min: even one epoch (%d steps) with its validation does not fit; training "
                "one epoch anyway (raise time_budget_minutes or use a smaller data set)",
                minutes,
                costs.steps_per_epoch,
            )
        return plan

    def _apply(self, trainer: L.Trainer, plan: BudgetPlan) -> None:
        self.plan = plan
        if (plan.max_steps, plan.val_every) == self._configured:
            self._set_validation(trainer, plan)
            return  # the configured run fits: its steps and schedule stay as they are
        self._set(trainer, plan)

    def _set_validation(self, trainer: L.Trainer, plan: BudgetPlan) -> None:
        """Validate this epoch when it is a multiple of ``plan.val_every`` or the plan's last epoch (an
        interval that does not divide the epochs, 2 of 7, would otherwise leave the end unscored)."""
        if self._validates_by_epochs:
            last = trainer.current_epoch + 1 >= math.ceil(plan.max_steps / _steps_per_epoch(trainer))
            trainer.check_val_every_n_epoch = 1 if last else plan.val_every

    def _set(self, trainer: L.Trainer, plan: BudgetPlan) -> None:
        trainer.fit_loop.epoch_loop.max_steps = plan.max_steps
        self._set_validation(trainer, plan)
        if not resize_schedules([c.scheduler for c in trainer.lr_scheduler_configs], plan.max_steps):
            log.warning("time budget: no resizable LR schedule found; the schedule keeps its planned length")

    def state_dict(self) -> dict[str, Any]:
        return {
            "plan": asdict(self.plan) if self.plan is not None else None,
            "configured": list(self._configured),
            "minutes": self.minutes,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("plan")
        self.plan = BudgetPlan(**saved) if saved is not None else None
        configured = state_dict.get("configured")  # absent in checkpoints before it was saved
        if configured:
            self._planned_for = (int(configured[0]), int(configured[1]), state_dict.get("minutes"))


def _steps_per_epoch(trainer: L.Trainer) -> int:
    return max(1, math.ceil(trainer.num_training_batches / trainer.accumulate_grad_batches))


def _steps_per_check(trainer: L.Trainer) -> int:
    """Optimizer steps between two validations when they are counted in batches (Lightning's
    ``val_check_batch``, set from ``val_check_interval`` with ``check_val_every_n_epoch=None``)."""
    batches = trainer.val_check_batch
    if batches is None or not math.isfinite(batches):
        return _steps_per_epoch(trainer)
    return max(1, math.ceil(int(batches) / trainer.accumulate_grad_batches))


def _images_in(batch: Any) -> int:
    images = batch.get("images") if isinstance(batch, dict) else None
    return int(images.shape[0]) if images is not None else 1


def _val_images(trainer: L.Trainer) -> int:
    """Images one validation scores. Lightning loads the validation data at the first validation, after
    the budget is planned: until then, count the datamodule's validation set."""
    counted = sum(_loader_images(trainer, i, n) for i, n in enumerate(trainer.num_val_batches or []))
    if counted:
        return counted
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is None or trainer.limit_val_batches == 0:
        return 0
    dataset = getattr(datamodule.val_dataloader(), "dataset", None)
    return len(dataset) if isinstance(dataset, Sized) else 0


def _loader_images(trainer: L.Trainer, index: int, batches: int | float) -> int:
    """Images in the first ``batches`` batches of validation loader ``index``."""
    if not math.isfinite(batches):
        return 0
    loaders = trainer.val_dataloaders
    loader = loaders[index] if isinstance(loaders, list | tuple) else loaders
    images = int(batches) * (getattr(loader, "batch_size", None) or 1)
    dataset = getattr(loader, "dataset", None)
    return min(images, len(dataset)) if isinstance(dataset, Sized) else images
