"""Where triage callbacks write: an explicit directory, else the trainer's run directory."""

from __future__ import annotations

from pathlib import Path

import lightning as L

__all__ = ["resolve_run_dir"]


def resolve_run_dir(dirpath: str | Path | None, trainer: L.Trainer | None) -> Path:
    """``dirpath`` when given, else ``trainer.default_root_dir``, else ``outputs/``."""
    if dirpath is not None:
        return Path(dirpath)
    if trainer is not None:
        return Path(trainer.default_root_dir)
    return Path("outputs")
