"""TrainingCurves: ``curves.png`` in the run directory at the end of fit and when a run fails."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from ocr.machine.sync import sync_allowed
from ocr.reporting.curves import write_curves
from ocr.run.faults import is_cuda_fault
from ocr.run.interrupts import is_interruption

__all__ = ["TrainingCurves"]

log = logging.getLogger(__name__)

VAL_KEYS = ("val/hmean", "val/precision", "val/recall")


class TrainingCurves(Callback):
    """Collects train loss (and its parts), learning rate and val P/R/H every ``every_n_steps`` itself, so
    it works without a logger, and draws them to the PNG ``path`` on rank 0.

    Loss values stay on the device until the next validation or the end: one host read per validation,
    none per step. The series are kept in checkpoints, so a resumed run's curves start at step 0.
    """

    def __init__(self, *, path: str, every_n_steps: int) -> None:
        if every_n_steps < 1:
            raise ValueError(f"callbacks.curves.every_n_steps: expected >= 1, got {every_n_steps}")
        self.path = Path(path)
        self.every_n_steps = every_n_steps
        self.series: dict[str, list[tuple[int, float]]] = {}
        self._pending: list[tuple[int, dict[str, Tensor]]] = []

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step % self.every_n_steps and step != 1:
            return
        losses = {
            k: v.detach()
            for k, v in trainer.callback_metrics.items()
            if k.startswith("train/loss") and k != "train/loss_epoch" and isinstance(v, Tensor)
        }
        self._pending.append((step, losses))
        if trainer.optimizers:
            self._add("lr", step, float(trainer.optimizers[0].param_groups[0]["lr"]))

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self._flush()
        for key in VAL_KEYS:
            if key in trainer.callback_metrics:
                with sync_allowed():  # already computed on the host side by the metric
                    self._add(key, trainer.global_step, float(trainer.callback_metrics[key]))

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._flush()
        if trainer.is_global_zero:
            log.info("Training curves: %s", write_curves(self.path, self.series))

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if not trainer.is_global_zero:
            return
        if is_cuda_fault(exception):  # reading the device after a CUDA fault fails or blocks
            self._drop_pending("not read after the CUDA fault")
        else:
            try:
                self._flush()
            except RuntimeError as exc:  # a failed device cannot be read: draw what reached the host
                self._drop_pending(str(exc))
        end = "interruption" if is_interruption(exception, trainer) else "failure"
        try:
            log.info("Training curves up to the %s: %s", end, write_curves(self.path, self.series))
        except (OSError, ValueError) as exc:  # never hide the run's own exception
            log.error("Could not write %s: %s", self.path, exc)

    def _drop_pending(self, why: str) -> None:
        log.warning(
            "Training curves: %d recorded losses unreadable after the failure (%s)", len(self._pending), why
        )
        self._pending.clear()

    def _add(self, key: str, step: int, value: float) -> None:
        self.series.setdefault(key, []).append((step, value))

    def _flush(self) -> None:
        """Read the pending device values in one transfer."""
        if not self._pending:
            return
        flat = [(step, key, value) for step, losses in self._pending for key, value in losses.items()]
        self._pending = []
        if not flat:
            return
        with sync_allowed():  # the one documented read of the recorded losses
            values = torch.stack([v.float().reshape(()) for _, _, v in flat]).cpu().tolist()
        for (step, key, _), value in zip(flat, values, strict=True):
            self._add(key, step, value)

    def state_dict(self) -> dict[str, Any]:
        self._flush()
        return {"series": {k: list(v) for k, v in self.series.items()}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.series = {k: [tuple(p) for p in v] for k, v in state_dict["series"].items()}
