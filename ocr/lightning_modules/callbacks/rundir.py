"""Where triage callbacks write: an explicit directory, else the trainer's run directory; each rank's crash
folder."""

from __future__ import annotations

from pathlib import Path

import lightning as L

from ocr.machine.distributed import rank_tag

__all__ = ["crash_dir", "resolve_run_dir"]


def resolve_run_dir(dirpath: str | Path | None, trainer: L.Trainer | None) -> Path:
    """``dirpath`` when given, else ``trainer.default_root_dir``, else ``outputs/``."""
    if dirpath is not None:
        return Path(dirpath)
    if trainer is not None:
        return Path(trainer.default_root_dir)
    return Path("outputs")


def crash_dir(run_dir: Path, rank: int, node_rank: int) -> Path:
    """``<run dir>/crash`` on global rank 0, ``<run dir>/crash-node<n>-rank<k>`` on the others.

    Every rank keeps its own files: a fault on GPU 1 must not depend on rank 0 to be recorded, and
    ranks (on any node, sharing the run directory) must not overwrite each other's.
    """
    tag = rank_tag(rank, node_rank)
    return run_dir / (f"crash-{tag}" if tag else "crash")
