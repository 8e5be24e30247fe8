"""Learning-rate schedules stepped per optimizer step and sized from the real number of steps."""

from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

__all__ = ["warmup_decay_factor", "build_warmup_scheduler"]

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
        assert power is not None  # build_warmup_scheduler refuses poly without a power
        shape = (1.0 - progress) ** power
    elif kind == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"scheduler.kind: expected one of {KINDS}, got {kind!r}")
    return min_lr_ratio + (1.0 - min_lr_ratio) * shape


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
    if total_steps <= 0:
        raise ValueError(f"total_steps: expected a positive number of optimizer steps, got {total_steps}")
    if kind not in KINDS:
        raise ValueError(f"scheduler.kind: expected one of {KINDS}, got {kind!r}")
    if kind == "poly" and power is None:
        raise ValueError("scheduler.power: expected the poly exponent (e.g. 0.9), got None")
    warmup_steps = int(round(warmup_ratio * total_steps))

    def factor(step: int) -> float:
        return warmup_decay_factor(
            step,
            total_steps=total_steps,
            warmup_steps=warmup_steps,
            kind=kind,
            power=power,
            min_lr_ratio=min_lr_ratio,
        )

    return LambdaLR(optimizer, factor)
