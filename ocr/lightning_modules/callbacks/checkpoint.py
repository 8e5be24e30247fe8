"""Checkpointing with one directory per run, readable names, atomic writes and a metadata JSON."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path
from typing import Any
from weakref import proxy

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from ocr.utils.io import atomic_write_json

__all__ = ["RunCheckpoint", "git_commit", "scalar_metrics"]

log = logging.getLogger(__name__)


def git_commit(cwd: str | os.PathLike[str] | None = None) -> str | None:
    """The current git commit (with ``-dirty`` when the tree has changes), or None outside a repo."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head


def scalar_metrics(trainer: L.Trainer) -> dict[str, float]:
    """The trainer's current one-element metrics as floats."""
    return {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}


class RunCheckpoint(ModelCheckpoint):
    """Keeps ``best-hmean=0.9312-epoch=07.ckpt`` (by ``val/hmean``) and ``last.ckpt`` in ``dirpath``.

    Each checkpoint is written to a temporary file and renamed, and gets ``<name>.json`` beside it with
    the resolved config, the metrics at save time, the git commit and the data fingerprint.
    """

    def __init__(
        self,
        *,
        dirpath: str,
        monitor: str,
        mode: str,
        save_top_k: int,
        save_last: bool,
        every_n_epochs: int | None,
        every_n_train_steps: int | None,
    ) -> None:
        metric_name = monitor.split("/")[-1]
        super().__init__(
            dirpath=dirpath,
            filename=f"best-{metric_name}={{{monitor}:.4f}}-epoch={{epoch:02d}}",
            monitor=monitor,
            mode=mode,
            save_top_k=save_top_k,
            save_last=save_last,
            auto_insert_metric_name=False,
            every_n_epochs=every_n_epochs,
            every_n_train_steps=every_n_train_steps,
        )
        self._git_commit = git_commit(Path(__file__).parent)

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        # Same steps as ModelCheckpoint._save_checkpoint, with the rename before loggers hear of the file.
        tmp = f"{filepath}.tmp"
        Path(filepath).parent.mkdir(parents=True, exist_ok=True)
        trainer.save_checkpoint(tmp, self.save_weights_only)
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        if trainer.is_global_zero:
            os.replace(tmp, filepath)
            atomic_write_json(f"{filepath}.json", self._metadata(trainer, filepath))
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))

    def _remove_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        super()._remove_checkpoint(trainer, filepath)
        if trainer.is_global_zero:
            Path(f"{filepath}.json").unlink(missing_ok=True)

    def _metadata(self, trainer: L.Trainer, filepath: str) -> dict[str, Any]:
        module = trainer.lightning_module
        return {
            "checkpoint": Path(filepath).name,
            "epoch": trainer.current_epoch,
            "global_step": trainer.global_step,
            "metrics": scalar_metrics(trainer),
            "monitor": self.monitor,
            "git_commit": self._git_commit,
            "data_fingerprint": getattr(trainer.datamodule, "fingerprint", None),
            "config": getattr(module, "run_config", None),
        }
