"""Run-status sentinels: ``.SUCCESS`` or ``.FAILURE`` (exception + traceback) in the run directory."""

from __future__ import annotations

import logging
import traceback
from datetime import datetime, timezone
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Callback

from ocr.utils.io import atomic_write_text

__all__ = ["RunStatus", "write_failure", "write_success"]

log = logging.getLogger(__name__)


def write_failure(run_dir: str | Path, exception: BaseException) -> Path:
    """Write ``run_dir/.FAILURE`` with the exception and its traceback (creates ``run_dir``)."""
    trace = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    text = f"{_now()} {type(exception).__name__}: {exception}\n\n{trace}"
    path = atomic_write_text(Path(run_dir) / ".FAILURE", text)
    (Path(run_dir) / ".SUCCESS").unlink(missing_ok=True)  # e.g. fit succeeded, then the test failed
    log.error("Run failed: %s: %s (report: %s)", type(exception).__name__, exception, path)
    return path


def write_success(run_dir: str | Path, summary: str) -> Path:
    """Write ``run_dir/.SUCCESS`` and remove a stale ``.FAILURE`` from a resumed run."""
    path = atomic_write_text(Path(run_dir) / ".SUCCESS", f"{_now()} {summary}\n")
    (Path(run_dir) / ".FAILURE").unlink(missing_ok=True)
    return path


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class RunStatus(Callback):
    """Marks the run directory ``.SUCCESS`` after fit/test, ``.FAILURE`` on any exception.

    Tags the wandb run ``failed``/``succeeded`` when a wandb logger is active.
    """

    def __init__(self, *, run_dir: str) -> None:
        self.run_dir = Path(run_dir)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if trainer.is_global_zero:
            write_failure(self.run_dir, exception)
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
            run = getattr(logger, "experiment", None) if type(logger).__name__ == "WandbLogger" else None
            if run is not None and hasattr(run, "tags"):
                run.tags = tuple(run.tags or ()) + (tag,)
