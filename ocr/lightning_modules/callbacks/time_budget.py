"""Size a run by wall-clock time, and score the final weights of every run.

With ``minutes`` set, the callback times ``measure_steps`` optimizer steps (after ``skip_steps`` warm-up)
and plans once: the most whole epochs (or validation intervals, with ``check_val_every_n_epoch=null``)
whose steps, validations and test end within ``minutes`` of the process start, never more steps than
configured. The plan is the trainer's ``max_steps``, which the LR schedule reads at every step. Before an
epoch's last step the rest is priced again, and a plan that no longer fits is shortened (never
lengthened). Budget or not, the run's last step is validated. The plan is saved in checkpoints; a resume
that changes the length, validation interval or budget plans again.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Sized
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import lightning as L
from lightning.pytorch.callbacks import Callback

from ocr.lightning_modules.callbacks.progress import images_in
from ocr.run.folder import process_start
from ocr.utils.config_types import NonNegativeInt, PositiveFloat, PositiveInt
from ocr.utils.text import plural

__all__ = ["BudgetPlan", "Costs", "TimeBudget", "plan_steps", "rest_cost", "run_started", "validations"]

log = logging.getLogger(__name__)

_IMPORTED_AT = time.time()


def process_started() -> float:
    """Wall-clock start of this process (Linux ``/proc``; elsewhere the import time of this module)."""
    try:
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + int(process_start(os.getpid()) or "") / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return _IMPORTED_AT


def run_started(max_startup_seconds: float = 120.0) -> float:
    """Wall-clock start of the run: the process start (imports inside the budget), or now for a process
    older than ``max_startup_seconds`` (pytest, a notebook)."""
    started, now = process_started(), time.time()
    return started if now - started <= max_startup_seconds else now


@dataclass(frozen=True)
class BudgetPlan:
    """What the budget decided: train ``max_steps`` optimizer steps, measured at ``seconds_per_step``."""

    max_steps: int
    seconds_per_step: float


class Costs(NamedTuple):
    """What the rest of a run costs, as the budget sees it at one moment. A block is an epoch, or the N
    steps between two validations when they run every N steps; blocks are validated every ``val_every``
    and at the last."""

    seconds_per_step: float
    steps_done: int
    steps_per_block: int
    val_every: int
    seconds_per_validation: float
    seconds_after_fit: float  # the reserve, and the test after fit
    seconds_left: float  # in the budget


def validations(first_block: int, blocks: int, val_every: int) -> int:
    """Validations in blocks ``first_block`` to ``blocks - 1`` (0-based) of a run of ``blocks`` blocks
    validated every ``val_every`` and at the last."""
    if first_block >= blocks:
        return 0
    return blocks // val_every - first_block // val_every + (1 if blocks % val_every else 0)


def rest_cost(costs: Costs, max_steps: int) -> float:
    """Seconds to train on to ``max_steps`` with its validations, then the after-fit work."""
    blocks = math.ceil(max_steps / costs.steps_per_block)
    checks = validations(costs.steps_done // costs.steps_per_block, blocks, costs.val_every)
    steps_left = max(0, max_steps - costs.steps_done)
    training = steps_left * costs.seconds_per_step
    return training + checks * costs.seconds_per_validation + costs.seconds_after_fit


def plan_steps(costs: Costs, cap: int) -> tuple[int, bool]:
    """``(steps, fits)``: ``cap`` (-1: none) when the rest fits in ``costs.seconds_left``, else the most
    whole blocks that do, at least to the end of the block in progress; ``fits`` is False when even that
    one block is too long."""
    if cap >= 0 and rest_cost(costs, cap) <= costs.seconds_left:
        return cap, True
    per_block = costs.steps_per_block
    most = math.inf if cap < 0 else max(1, cap // per_block)
    blocks = costs.steps_done // per_block + 1
    while blocks + 1 <= most and rest_cost(costs, (blocks + 1) * per_block) <= costs.seconds_left:
        blocks += 1
    steps = blocks * per_block if cap < 0 else min(blocks * per_block, cap)
    return steps, rest_cost(costs, blocks * per_block) <= costs.seconds_left


class TimeBudget(Callback):
    """Fit the run into ``minutes`` (None: off) of wall-clock time from the process start, reserving one
    more evaluation when ``test_after_fit``; validate its last step. Until a validation is timed, one image
    is priced at ``eval_cost`` times a training image; ``reserve_seconds`` covers the final writes."""

    def __init__(
        self,
        *,
        minutes: PositiveFloat | None,  # bounds checked when the config is read
        test_after_fit: bool,
        measure_steps: PositiveInt = 5,
        skip_steps: NonNegativeInt = 2,
        eval_cost: float = 1.5,
        reserve_seconds: float = 20.0,
    ) -> None:
        self.minutes = minutes
        self.test_after_fit = test_after_fit
        self.measure_steps = measure_steps
        self.skip_steps = skip_steps
        self.eval_cost = eval_cost
        self.reserve_seconds = reserve_seconds
        self.plan: BudgetPlan | None = None
        self._started = run_started()
        # (optimizer steps, validation interval) as configured, and what a loaded plan was made for.
        self._configured = (-1, 1)
        self._planned_for: tuple[int, int, float | None] | None = None
        self._timer: tuple[int, int, float] | None = None  # (first step, timed from step, perf_counter)
        self._epoch_mark: tuple[int, float] | None = None  # this epoch's first (global step, perf_counter)
        self._images_per_batch = 1
        self._validation_started = 0.0
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

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Apply a loaded plan before Lightning restores the LR schedule's step."""
        total = trainer.estimated_stepping_batches  # max_steps or max_epochs, whichever ends first
        self._configured = (int(total) if math.isfinite(total) else -1, trainer.check_val_every_n_epoch or 1)
        if self.minutes is None or self.plan is None:
            return
        if self._planned_for != (*self._configured, self.minutes):
            log.info(
                "time budget: the run was planned for %s (configured steps, validation interval, minutes), "
                "the resumed one asks for %s: planning again",
                self._planned_for,
                (*self._configured, self.minutes),
            )
            self.plan = None
            return
        self._apply(trainer, self.plan)
        log.info("time budget: resumed with the saved plan of %d steps", self.plan.max_steps)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.minutes is not None and self.plan is None:
            self._timer = (trainer.global_step, trainer.global_step, time.perf_counter())

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_mark = None

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Before an epoch's last step: shorten the plan when the rest no longer fits at this epoch's pace."""
        mark = self._epoch_mark
        if self.plan is None or mark is None or not trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            return
        if trainer.global_step > mark[0]:
            seconds_per_step = (time.perf_counter() - mark[1]) / (trainer.global_step - mark[0])
            self._decide(trainer, seconds_per_step, cap=self.plan.max_steps)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step, now = trainer.global_step, time.perf_counter()
        self._epoch_mark = self._epoch_mark or (step, now)
        if self.plan is None and self._timer is not None:
            first, timed_from, since = self._timer
            if step - first <= self.skip_steps:
                self._timer = (first, step, now)
            elif step - timed_from >= self.measure_steps:
                self._images_per_batch = images_in(batch)
                self._decide(trainer, (now - since) / (step - timed_from), cap=self._configured[0])
        if trainer.enable_validation and _is_last_step(trainer):
            if trainer.check_val_every_n_epoch is not None:
                trainer.check_val_every_n_epoch = 1
            # Lightning validates right after this hook when a stop is requested (its early-stopping rule).
            trainer.should_stop = True

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validation_started = time.perf_counter()

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validation_seconds = time.perf_counter() - self._validation_started

    def _decide(self, trainer: L.Trainer, seconds_per_step: float, cap: int) -> None:
        """Plan (or shorten the plan) on rank 0, broadcast (every rank calls this at the same step), apply."""
        plan = self._plan(trainer, seconds_per_step, cap) if trainer.is_global_zero else None
        if trainer.world_size > 1:  # no rank acts on a plan its own clock would have made differently
            plan = trainer.strategy.broadcast(plan, src=0)
        assert plan is not None  # rank 0's
        if plan != self.plan:
            self._apply(trainer, plan)
        self._timer = None

    def _plan(self, trainer: L.Trainer, seconds_per_step: float, cap: int) -> BudgetPlan:
        """On rank 0: the first plan, or the running one kept or shortened, logged."""
        costs = self._costs(trainer, seconds_per_step)
        steps, fits = plan_steps(costs, cap)
        if self.plan is None:
            self._log_plan(trainer, costs, steps, cap, fits)
        elif steps < self.plan.max_steps:
            log.warning(
                "time budget %.1f min: steps take %.2f s now (%.2f s when planned); training %d steps "
                "instead of %d to end in time",
                self.minutes,
                seconds_per_step,
                self.plan.seconds_per_step,
                steps,
                self.plan.max_steps,
            )
        else:
            return self.plan
        return BudgetPlan(steps, seconds_per_step)

    def _log_plan(self, trainer: L.Trainer, costs: Costs, steps: int, cap: int, fits: bool) -> None:
        blocks = math.ceil(steps / costs.steps_per_block)
        length, cadence = (
            (plural(blocks, "epoch"), f"every {plural(costs.val_every, 'epoch')} and at the last")
            if trainer.check_val_every_n_epoch is not None
            else (plural(blocks, "interval"), f"every {plural(costs.steps_per_block, 'step')}")
        )
        notes = []
        if 0 <= steps < cap:
            notes.append(f"{steps} of the configured {cap} steps: time_budget_minutes=null trains them all")
        if not fits:
            notes.append("even that does not fit: raise time_budget_minutes or use a smaller data set")
        log.log(
            logging.WARNING if notes else logging.INFO,
            "time budget %.1f min: %.2f s/step measured, %.0f s left: training %d steps (%s), validating %s "
            "(about %.0f s each)%s",
            self.minutes,
            costs.seconds_per_step,
            costs.seconds_left,
            steps,
            length,
            cadence,
            costs.seconds_per_validation,
            "".join(f"; {note}" for note in notes),
        )

    def _costs(self, trainer: L.Trainer, seconds_per_step: float) -> Costs:
        """The rest of the run at ``seconds_per_step``; a validation is priced from the images it scores
        until one was timed."""
        images_per_step = self._images_per_batch * trainer.accumulate_grad_batches
        seconds_per_image = seconds_per_step / max(1, images_per_step)
        seconds_per_validation = self._validation_seconds
        if seconds_per_validation is None:
            seconds_per_validation = self.eval_cost * seconds_per_image * _val_images(trainer)
        return Costs(
            seconds_per_step=seconds_per_step,
            steps_done=trainer.global_step,
            steps_per_block=_steps_per_block(trainer),
            val_every=self._configured[1],
            seconds_per_validation=seconds_per_validation,
            seconds_after_fit=self.reserve_seconds + (seconds_per_validation if self.test_after_fit else 0.0),
            seconds_left=(self.minutes or 0.0) * 60 - (time.time() - self._started),
        )

    def _apply(self, trainer: L.Trainer, plan: BudgetPlan) -> None:
        self.plan = plan
        if plan.max_steps != self._configured[0]:  # a run that fits keeps its limits (max_epochs alone)
            trainer.fit_loop.epoch_loop.max_steps = plan.max_steps

    def state_dict(self) -> dict[str, Any]:
        return {
            "plan": asdict(self.plan) if self.plan is not None else None,
            "planned_for": [*self._configured, self.minutes],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("plan")
        self.plan = BudgetPlan(**saved) if saved is not None else None
        steps, interval, minutes = state_dict["planned_for"]
        self._planned_for = (int(steps), int(interval), minutes)


def _is_last_step(trainer: L.Trainer) -> bool:
    last_batch = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
    max_epochs = trainer.max_epochs
    if max_epochs is not None and max_epochs >= 0 and last_batch and trainer.current_epoch + 1 >= max_epochs:
        return True
    return 0 <= trainer.max_steps <= trainer.global_step


def _steps_per_block(trainer: L.Trainer) -> int:
    """Optimizer steps per epoch, or between two validations counted in batches (``val_check_batch``)."""
    batches, check = trainer.num_training_batches, trainer.val_check_batch
    if trainer.check_val_every_n_epoch is None and check is not None and math.isfinite(check):
        batches = int(check)
    return max(1, math.ceil(batches / trainer.accumulate_grad_batches))


def _val_images(trainer: L.Trainer) -> int:
    """Images one validation scores: Lightning's loaders once loaded, else the datamodule's val set."""
    if trainer.limit_val_batches == 0:
        return 0
    loaders = trainer.val_dataloaders
    if loaders is not None:
        loaders = loaders if isinstance(loaders, list | tuple) else [loaders]
        return sum(
            min(int(n) * (loader.batch_size or 1), len(loader.dataset))
            for loader, n in zip(loaders, trainer.num_val_batches, strict=False)
            if math.isfinite(n) and isinstance(loader.dataset, Sized)
        )
    datamodule = getattr(trainer, "datamodule", None)
    dataset = getattr(datamodule.val_dataloader(), "dataset", None) if datamodule is not None else None
    return len(dataset) if isinstance(dataset, Sized) else 0
