"""Where triage callbacks write: an explicit directory, else the trainer's run directory; each rank's crash
folder."""

from __future__ import annotations

from pathlib import Path

import lightning as L

__all__ = ["crash_dir", "resolve_run_dir"]


def resolve_run_dir(dirpath: str | Path | None, trainer: L.Trainer | None) -> Path:
    """``dirpath`` when given, else ``trainer.default_root_dir``, else ``outputs/``."""
    if dirpath is not None:
        return Path(dirpath)
    if trainer is not None:
        return Path(trainer.default_root_dir)
    return Path("outputs")


def crash_dir(run_dir: Path, rank: int) -> Path:
    """``<run dir>/crash`` on global rank 0, ``<run dir>/crash-rank<k>`` on the others.

    Every rank keeps its own files: a fault on GPU 1 must not depend on rank 0 to be recorded, and
    ranks must not overwrite each other's.
    """
    return run_dir / ("crash" if rank == 0 else f"crash-rank{rank}")
