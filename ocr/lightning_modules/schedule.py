"""Learning-rate schedules stepped per optimizer step and sized from the real number of steps.

On resume the schedule follows the run's config, not the checkpoint: a run resumed with another length
(``trainer.max_steps=400`` after 200) or other ``scheduler.*`` values is re-planned, from the step it
resumes at, as if the new schedule had been planned from the start (``WarmupDecaySchedule``).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

__all__ = [
    "WarmupDecay",
    "WarmupDecaySchedule",
    "build_warmup_scheduler",
    "resize_schedules",
    "warmup_decay_factor",
]

log = logging.getLogger(__name__)

KINDS = ("poly", "cosine")


def warmup_decay_factor(
    step: int, *, total_steps: int, warmup_steps: int, kind: str, power: float | None, min_lr_ratio: float
) -> float:
    """LR multiplier at ``step``: linear warm-up to 1, then poly or cosine decay to ``min_lr_ratio``.

    ``power`` is the poly exponent; cosine ignores it (None).
    """
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    decay_steps = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    if kind == "poly":
        if power is None:
            raise ValueError("scheduler.power: expected the poly exponent (e.g. 0.9), got None")
        shape = (1.0 - progress) ** power
    elif kind == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"scheduler.kind: expected one of {KINDS}, got {kind!r}")
    return min_lr_ratio + (1.0 - min_lr_ratio) * shape


class WarmupDecay:
    """The LR multiplier of :func:`build_warmup_scheduler`, a callable object so that its length can change
    mid-run (:meth:`resize`, used by the time budget) and is saved with the scheduler's state (``LambdaLR``
    keeps the attributes of callable objects in its ``state_dict``). ``planned_steps`` is the length the
    config asked for; ``total_steps`` the current one (the time budget may shorten it)."""

    def __init__(
        self, *, total_steps: int, kind: str, warmup_ratio: float, power: float | None, min_lr_ratio: float
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"scheduler.kind: expected one of {KINDS}, got {kind!r}")
        if kind == "poly" and power is None:
            raise ValueError("scheduler.power: expected the poly exponent (e.g. 0.9), got None")
        self.kind = kind
        self.warmup_ratio = warmup_ratio
        self.power = power
        self.min_lr_ratio = min_lr_ratio
        self.resize(total_steps)
        self.planned_steps = total_steps

    def settings(self) -> dict[str, Any]:
        """What the config decides: the kind, its parameters and the planned length."""
        return {
            "kind": self.kind,
            "warmup_ratio": self.warmup_ratio,
            "power": self.power if self.kind == "poly" else None,  # cosine ignores it
            "min_lr_ratio": self.min_lr_ratio,
            "planned_steps": self.planned_steps,
        }

    def resize(self, total_steps: int) -> None:
        """Decay over ``total_steps`` optimizer steps from now on (the warm-up keeps its ratio).

        Raises:
            ValueError: if ``total_steps`` is not positive.
        """
        if total_steps <= 0:
            raise ValueError(f"total_steps: expected a positive number of optimizer steps, got {total_steps}")
        self.total_steps = total_steps
        self.warmup_steps = int(round(self.warmup_ratio * total_steps))

    def __call__(self, step: int) -> float:
        return warmup_decay_factor(
            step,
            total_steps=self.total_steps,
            warmup_steps=self.warmup_steps,
            kind=self.kind,
            power=self.power,
            min_lr_ratio=self.min_lr_ratio,
        )


class WarmupDecaySchedule(LambdaLR):
    """``LambdaLR`` over one :class:`WarmupDecay` whose restore keeps the step and applies the config.

    A checkpoint of the same settings restores exactly (a length the time budget shortened included).
    Settings that differ (a resume with another ``trainer.max_steps``/``max_epochs`` or ``scheduler.*``)
    re-plan the schedule: the LR at each step from the resumed one on is the new schedule's at that step,
    as if it had been planned from the start. A run that ended decayed to ``min_lr_ratio`` (0 for poly)
    so continuing from its last LR would train no further; the re-plan raises the LR to the new
    schedule's value at once, and logs it.
    """

    @property
    def factor(self) -> WarmupDecay:
        """The multiplier (the same object for every parameter group)."""
        return self.lr_lambdas[0]  # type: ignore[return-value]  # built with a WarmupDecay

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        configured = self.factor.settings()
        saved_factor = (state_dict.get("lr_lambdas") or [None])[0] or {}
        saved = {key: saved_factor.get(key) for key in configured}
        if saved["kind"] != "poly":
            saved["power"] = None
        if saved["planned_steps"] is None:  # saved before planned_steps existed: its length was the plan
            saved["planned_steps"] = saved_factor.get("total_steps")
        super().load_state_dict(state_dict)
        if saved == configured:
            return
        factor = self.factor
        step = self.last_epoch
        old_lr = self.optimizer.param_groups[0]["lr"]
        for key, value in configured.items():
            setattr(factor, key, value)
        factor.resize(configured["planned_steps"])
        for group, base_lr in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base_lr * factor(step)
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]
        changed = ", ".join(f"{k} {saved[k]} -> {v}" for k, v in configured.items() if saved[k] != v)
        log.info(
            "Resume: LR schedule re-planned (%s): from step %d on, the LR of a %s schedule planned for %d "
            "steps from the start; lr %.3g -> %.3g now",
            changed,
            step,
            factor.kind,
            factor.total_steps,
            old_lr,
            self.optimizer.param_groups[0]["lr"],
        )


def build_warmup_scheduler(
    optimizer: Optimizer,
    *,
    total_steps: int,
    kind: str,
    warmup_ratio: float,
    min_lr_ratio: float,
    power: float | None = None,
) -> WarmupDecaySchedule:
    """Warm-up + poly/cosine decay over ``total_steps`` optimizer steps.

    Args:
        power: the poly exponent (configs/scheduler/poly.yaml); cosine has none. Configs stored by runs
            before it was dropped from cosine.yaml carry ``power: 1.0`` there, which cosine ignores.

    Raises:
        ValueError: if ``total_steps`` is not positive, ``kind`` is unknown, or poly has no ``power``.
    """
    factor = WarmupDecay(
        total_steps=total_steps, kind=kind, warmup_ratio=warmup_ratio, power=power, min_lr_ratio=min_lr_ratio
    )
    return WarmupDecaySchedule(optimizer, factor)


def resize_schedules(schedulers: list[object], total_steps: int) -> int:
    """Give every :class:`WarmupDecay` among ``schedulers`` (``LambdaLR`` objects) a new length; returns
    how many were resized."""
    resized = 0
    for scheduler in schedulers:
        for factor in getattr(scheduler, "lr_lambdas", []):
            if isinstance(factor, WarmupDecay):
                factor.resize(total_steps)
                resized += 1
    return resized
