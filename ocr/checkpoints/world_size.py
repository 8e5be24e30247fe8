"""Resuming on another number of processes (nodes x devices): refused, or allowed with what changes.

``data.batch_size`` is per process, so another world size changes the effective batch and the epoch's
split while steps, schedule and learning rate stay: another training run from the same weights, refused
unless ``resume_allow_world_size_change=true`` (a warning then says what changes).
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from ocr.checkpoints.resume import ResumeRefusedError
from ocr.machine.distributed import launch_info
from ocr.machine.hardware import device_processes

__all__ = ["check_world_size", "planned_world_size"]

log = logging.getLogger(__name__)


def planned_world_size(cfg: DictConfig) -> int:
    """The processes this run will have: what torchrun or SLURM started, else ``trainer.num_nodes`` x
    the processes ``trainer.devices`` gives on a node."""
    info = launch_info()
    if info.launcher in ("torchelastic", "slurm"):
        return info.world_size
    return int(cfg.trainer.num_nodes) * device_processes(cfg.trainer.devices)


def check_world_size(saved: int | None, cfg: DictConfig, checkpoint: Path, allow_change: bool) -> None:
    """Refuse a resume on another world size than ``checkpoint``'s (naming both), unless ``allow_change``."""
    if saved is None:
        log.warning(
            "Resume: %s records no world size; a change of nodes or devices cannot be checked", checkpoint
        )
        return
    now = planned_world_size(cfg)
    if now == saved:
        return
    per_process = int(cfg.data.batch_size) * int(cfg.trainer.accumulate_grad_batches)
    message = (
        f"resume: {checkpoint} was written by a run of {saved} processes, this one has {now} "
        f"(trainer.num_nodes={cfg.trainer.num_nodes}, trainer.devices={cfg.trainer.devices}, "
        f"launcher: {launch_info().launcher}). That changes the effective batch ({per_process} x {saved} = "
        f"{per_process * saved} -> {per_process} x {now} = {per_process * now} images per optimizer step; "
        "data.batch_size x trainer.accumulate_grad_batches per process), the steps in an epoch and the "
        "order of the data (the resume is no longer exact); the step count, the learning-rate schedule "
        "(in steps) and the learning rate stay the run's"
    )
    if allow_change:
        log.warning("%s; going on <resume_allow_world_size_change=true>", message)
        return
    raise ResumeRefusedError(
        f"{message}. Resume with {saved} processes (trainer.num_nodes x trainer.devices, and the "
        "launcher's nodes and processes per node), or pass resume_allow_world_size_change=true"
    )
