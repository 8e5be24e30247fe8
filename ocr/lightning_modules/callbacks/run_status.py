"""The callback that writes the run-status sentinels (``ocr.utils.sentinels``) and tags the wandb run."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger

from ocr.lightning_modules.callbacks.interrupt import is_interruption
from ocr.utils.sentinels import clear_sentinels, failure_written, write_failure, write_success

__all__ = ["RunStatus"]

log = logging.getLogger(__name__)


class RunStatus(Callback):
    """Marks the run directory ``.SUCCESS`` after fit/test, ``.FAILURE`` on any exception but a stop by a
    signal (``.INTERRUPTED``, written by ``GracefulInterrupt``).

    Tags the wandb run ``failed``/``succeeded`` when a wandb logger is active.
    """

    def __init__(self, *, run_dir: str) -> None:
        self.run_dir = Path(run_dir)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A resumed run directory holds its earlier attempt's status: from here on it is this attempt's
        # (a resume killed -9 must not look finished).
        if trainer.is_global_zero:
            clear_sentinels(self.run_dir)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if is_interruption(exception, trainer):  # not a failure: GracefulInterrupt marks it (or the runner)
            return
        if not trainer.is_global_zero:
            return
        # For a CUDA fault CudaFaultExit wrote it already, on whichever rank hit the fault.
        if not failure_written(self.run_dir):
            try:
                write_failure(self.run_dir, exception)
            except OSError as exc:  # e.g. the disk is full: one line, not a chained traceback
                log.error("Could not write %s: %s", self.run_dir / ".FAILURE", exc)
        self._tag_wandb(trainer, "failed")

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero and not trainer.interrupted:
            write_success(
                self.run_dir, f"fit finished at epoch {trainer.current_epoch}, step {trainer.global_step}"
            )
            self._tag_wandb(trainer, "succeeded")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero and not (self.run_dir / ".FAILURE").exists():
            write_success(self.run_dir, "test finished")

    @staticmethod
    def _tag_wandb(trainer: L.Trainer, tag: str) -> None:
        for logger in trainer.loggers:
            run = logger.experiment if isinstance(logger, WandbLogger) else None
            if run is not None and hasattr(run, "tags"):
                run.tags = tuple(run.tags or ()) + (tag,)
