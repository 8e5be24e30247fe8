"""Rank-zero logging helpers for runners and callbacks."""

from __future__ import annotations

import logging

from lightning.pytorch.utilities import rank_zero_only

__all__ = ["get_logger"]


class _RankZeroAdapter(logging.LoggerAdapter):
    def log(self, level: int, msg: object, *args: object, **kwargs: object) -> None:  # type: ignore[override]
        if rank_zero_only.rank == 0:
            super().log(level, msg, *args, **kwargs)  # type: ignore[arg-type]


def get_logger(name: str) -> logging.LoggerAdapter:
    """A logger that emits only on global rank 0 (multi-GPU runs log once)."""
    return _RankZeroAdapter(logging.getLogger(name), {})
