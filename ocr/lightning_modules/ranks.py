"""Decisions every DDP rank must share: made once, on global rank 0, and broadcast."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import lightning as L

__all__ = ["decided_on_rank_zero"]

T = TypeVar("T")


def decided_on_rank_zero(trainer: L.Trainer, decide: Callable[[], T]) -> T:
    """``decide()`` called on global rank 0 only, its result handed to every rank (one broadcast under
    DDP; a plain call in a single process). Every rank must call it at the same point: it is a collective.

    The other ranks do not decide at all, so they neither log a decision of their own nor act on one that
    their own clock or measurements would have made differently.
    """
    if trainer.world_size == 1:
        return decide()
    decision = decide() if trainer.is_global_zero else None
    return trainer.strategy.broadcast(decision, src=0)  # type: ignore[return-value]
