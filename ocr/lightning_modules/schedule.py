"""The learning-rate schedule: linear warm-up, then poly or cosine decay, over the run's steps.

The run's length is read at every step (``horizon``: the trainer's ``estimated_stepping_batches``), so
the schedule ends at the last step whatever sets it (config, time budget, resume). A checkpoint keeps the
step, not the shape: a resumed run trains at the LR its own config gives that step.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

__all__ = ["WarmupDecaySchedule", "warmup_decay_factor"]

log = logging.getLogger(__name__)

KINDS = ("poly", "cosine")
# What the run's config decides, so never read from a checkpoint.
_CONFIGURED = ("horizon", "kind", "warmup_ratio", "power", "min_lr_ratio")


def warmup_decay_factor(
    step: int, *, total_steps: int, warmup_steps: int, kind: str, power: float | None, min_lr_ratio: float
) -> float:
    """LR multiplier at ``step``: linear warm-up to 1, then poly (exponent ``power``) or cosine decay to
    ``min_lr_ratio``."""
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


class WarmupDecaySchedule(LRScheduler):
    """Warm-up over ``warmup_ratio`` of the ``horizon()`` steps, then decay to ``min_lr_ratio`` at the
    last (configs/scheduler/, built by the module with the optimizer and the horizon)."""

    def __init__(
        self,
        optimizer: Optimizer,
        *,
        horizon: Callable[[], int],
        kind: str,
        warmup_ratio: float,
        min_lr_ratio: float,
        power: float | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"scheduler.kind: expected one of {KINDS}, got {kind!r}")
        if kind == "poly" and power is None:
            raise ValueError("scheduler.power: expected the poly exponent (e.g. 0.9), got None")
        self.horizon = horizon
        self.kind = kind
        self.warmup_ratio = warmup_ratio
        self.power = power
        self.min_lr_ratio = min_lr_ratio
        super().__init__(optimizer)

    def factor(self, step: int) -> float:
        """The LR multiplier at ``step`` of a run of ``horizon()`` steps."""
        total = self.horizon()
        if total <= 0:
            raise ValueError(f"scheduler horizon: expected a positive number of optimizer steps, got {total}")
        warmup = int(round(self.warmup_ratio * total))
        return warmup_decay_factor(
            step,
            total_steps=total,
            warmup_steps=warmup,
            kind=self.kind,
            power=self.power,
            min_lr_ratio=self.min_lr_ratio,
        )

    def get_lr(self) -> list[float | Tensor]:
        factor = self.factor(self.last_epoch)
        return [float(base_lr) * factor for base_lr in self.base_lrs]

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in super().state_dict().items() if k not in _CONFIGURED}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The saved step, at the LR the config's schedule gives it now (Lightning restores the optimizer,
        with the LR it saved, first)."""
        saved_lr = self.optimizer.param_groups[0]["lr"]
        super().load_state_dict(state_dict)
        for group, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]
        if not math.isclose(saved_lr, self._last_lr[0], rel_tol=1e-6, abs_tol=1e-12):
            log.info(
                "Resume: lr %.3g -> %.3g at step %d, the LR of a %s schedule over %d steps (the run's config "
                "now) from the start",
                saved_lr,
                self._last_lr[0],
                self.last_epoch,
                self.kind,
                self.horizon(),
            )
