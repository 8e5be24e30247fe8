"""Learning-rate schedules stepped per optimizer step and sized from the real number of steps."""

from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

__all__ = ["WarmupDecay", "build_warmup_scheduler", "resize_schedules", "warmup_decay_factor"]

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
    keeps the attributes of callable objects in its ``state_dict``)."""

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


def build_warmup_scheduler(
    optimizer: Optimizer,
    *,
    total_steps: int,
    kind: str,
    warmup_ratio: float,
    min_lr_ratio: float,
    power: float | None = None,
) -> LambdaLR:
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
    return LambdaLR(optimizer, factor)


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
