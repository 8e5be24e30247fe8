"""Decisions every DDP rank must share: made once, on global rank 0, and broadcast."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import lightning as L

__all__ = ["decided_on_rank_zero"]

T = TypeVar("T")


def decided_on_rank_zero(trainer: L.Trainer, decide: Callable[[], T]) -> T:
    """``decide()`` on global rank 0 only, its result broadcast to every rank (a collective: every rank calls
    it at the same point), so no rank logs or acts on a decision its own clock would have made differently."""
    if trainer.world_size == 1:
        return decide()
    decision = decide() if trainer.is_global_zero else None
    return trainer.strategy.broadcast(decision, src=0)  # type: ignore[return-value]
