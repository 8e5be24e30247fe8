"""What a GPU run must prove, measured inside the run: ``+callbacks.gpu_probe=...`` (``debug=gpu_probe``).

After ``warmup_steps`` each training step runs under ``torch.cuda.set_sync_debug_mode("error")``, so a
sync in the hot path raises with its stack (the blocks marked ``ocr.machine.sync.sync_allowed`` and
Lightning's logging steps are exempt); also peak CUDA memory per stage and torch.compile's graphs and
recompiles. Writes ``<dirpath>/gpu_probe.json`` (``-rank<k>`` on other ranks) at fit and test end.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn

from ocr.utils.io import atomic_write_json

__all__ = ["GpuProbe", "compile_counts"]

log = logging.getLogger(__name__)

RECOMPILES_LOGGER = "torch._dynamo.guards.__recompiles"  # dynamo's "recompiles" logging artifact
STAGES = ("train", "val", "test")


class _RecompileCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.reasons.append(record.getMessage().strip())


def compile_counts() -> dict[str, int]:
    """dynamo's counters: frames compiled (each recompile is one more) and graphs captured."""
    from torch._dynamo.utils import counters

    return {
        "frames_compiled": int(counters["frames"]["ok"]),
        "frames_total": int(counters["frames"]["total"]),
        "unique_graphs": int(counters["stats"]["unique_graphs"]),
    }


class GpuProbe(Callback):
    """Sync debug window (after ``warmup_steps``), per-stage peak memory, compile counts, to ``dirpath``."""

    def __init__(self, *, dirpath: str, warmup_steps: int) -> None:
        self.dirpath = Path(dirpath)
        self.warmup_steps = warmup_steps
        self._cuda = False
        self._stage: str | None = None
        self._peaks = {stage: {"allocated_gib": 0.0, "reserved_gib": 0.0} for stage in STAGES}
        self._strict_steps = 0
        self._recompiles = _RecompileCounter()

    def mode_for_step(self, step: int, log_every_n_steps: int) -> int:
        """2 ("error") for a steady-state step; 0 during warm-up and on Lightning's logging steps."""
        if step < self.warmup_steps:
            return 0
        logging_step = log_every_n_steps > 0 and (step + 1) % log_every_n_steps == 0
        return 0 if logging_step else 2

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._cuda = pl_module.device.type == "cuda" or trainer.strategy.root_device.type == "cuda"
        logger = logging.getLogger(RECOMPILES_LOGGER)
        if self._recompiles not in logger.handlers:
            logger.addHandler(self._recompiles)

    def _set_sync_mode(self, mode: int) -> None:
        if self._cuda:
            torch.cuda.set_sync_debug_mode(mode)

    def _begin(self, stage: str) -> None:
        self._set_sync_mode(0)
        self._stage = stage
        if self._cuda:
            torch.cuda.reset_peak_memory_stats()

    def _end(self) -> None:
        self._set_sync_mode(0)
        if self._cuda and self._stage is not None:
            peak = self._peaks[self._stage]
            peak["allocated_gib"] = max(peak["allocated_gib"], torch.cuda.max_memory_allocated() / 2**30)
            peak["reserved_gib"] = max(peak["reserved_gib"], torch.cuda.max_memory_reserved() / 2**30)
        self._stage = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._begin("train")

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        every = trainer.log_every_n_steps  # type: ignore[attr-defined]  # set by Lightning's connector
        mode = self.mode_for_step(trainer.global_step, every)
        self._strict_steps += int(mode > 0)
        self._set_sync_mode(mode)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._set_sync_mode(0)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._stage == "train":
            self._end()
        self._begin("val")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._end()
        if trainer.state.fn == TrainerFn.FITTING:
            self._begin("train")

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._end()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.write(trainer)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._begin("test")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._end()
        self.write(trainer)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        # The crash bundle and the guard's record must be writable; never query a faulted device.
        with contextlib.suppress(Exception):
            self._set_sync_mode(0)

    def report(self) -> dict[str, Any]:
        """The probe's findings so far."""
        return {
            "device": "cuda" if self._cuda else "cpu",
            "sync_debug": {
                "applicable": self._cuda,
                "warmup_steps": self.warmup_steps,
                "steps_under_error_mode": self._strict_steps if self._cuda else 0,
            },
            "peak_memory_gib": (
                {stage: {k: round(v, 3) for k, v in peak.items()} for stage, peak in self._peaks.items()}
                if self._cuda
                else None
            ),
            "compile": {**compile_counts(), "recompiles": len(self._recompiles.reasons)},
            "recompile_reasons": self._recompiles.reasons[:20],
        }

    def write(self, trainer: L.Trainer) -> Path:
        rank = trainer.global_rank
        name = "gpu_probe.json" if rank == 0 else f"gpu_probe-rank{rank}.json"
        path = atomic_write_json(self.dirpath / name, self.report())
        log.info("GPU probe: %s", path)
        return path
