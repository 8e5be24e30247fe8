"""Training progress for any console: the rich bar on a terminal, plain log lines everywhere else."""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Mapping
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.callbacks.progress import ProgressBar
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor

from ocr.lightning_modules.callbacks.data_wait import WaitWindow, loader_wait

__all__ = ["PlainProgress", "RichProgress", "progress_bar"]

log = logging.getLogger(__name__)


def progress_bar(*, every_n_seconds: float, leave: bool) -> ProgressBar:
    """The rich bar when stdout is a terminal, else :class:`PlainProgress` (``> log``, ``nohup``, CI),
    where a bar's redraws would reach the log as nothing or as noise.

    Args:
        every_n_seconds: interval of the plain progress lines.
        leave: keep the rich bar of a finished epoch on the screen.
    """
    if sys.stdout.isatty():
        return RichProgress(leave=leave)
    return PlainProgress(every_n_seconds=every_n_seconds)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _batch_size(batch: Any) -> int | None:
    if isinstance(batch, Mapping):
        batch = batch.get("images")
    elif isinstance(batch, list | tuple) and batch:
        batch = batch[0]
    return int(batch.shape[0]) if isinstance(batch, Tensor) and batch.ndim else None


def _data_wait(window: WaitWindow, trainer: L.Trainer) -> str | None:
    """``data wait 61 %`` over ``window`` (and ``, epoch start 0.48 s``: the latest epoch's first-batch
    wait, when one was waited for); None without a train stream or an open window."""
    wait = loader_wait(trainer)
    share = window.share(wait) if wait is not None else None
    if wait is None or share is None:
        return None
    text = f"data wait {100 * share:.0f} %"
    if wait.first_batch and wait.first_batch[-1] >= 0.005:
        text += f" (epoch start {wait.first_batch[-1]:.2f} s)"
    return text


class RichProgress(RichProgressBar):
    """Lightning's rich bar with the data-wait share (``ocr.lightning_modules.callbacks.data_wait``) over
    the last ``WINDOW_SECONDS`` among its metrics."""

    WINDOW_SECONDS = 10.0

    def __init__(self, *, leave: bool) -> None:
        super().__init__(leave=leave)
        self._window = WaitWindow()
        self._shown: str | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        wait = loader_wait(trainer)
        if wait is not None:
            self._window.restart(wait)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        wait = loader_wait(trainer)
        if wait is not None and trainer.state.fn == TrainerFn.FITTING:
            self._window.restart(wait)  # validation time is not step time

    def get_metrics(
        self, trainer: L.Trainer, pl_module: L.LightningModule
    ) -> dict[str, int | str | float | dict[str, float]]:
        metrics = super().get_metrics(trainer, pl_module)
        wait = loader_wait(trainer)
        started = self._window.started
        if wait is not None and started is not None and time.perf_counter() - started >= self.WINDOW_SECONDS:
            self._shown = _data_wait(self._window, trainer)
            self._window.restart(wait)
        if self._shown is not None:
            metrics["data"] = self._shown.removeprefix("data ")
        return metrics


class PlainProgress(ProgressBar):
    """Logs ``step 120/200 (60%) | epoch 3 | loss 0.8123 | 12.3 img/s | data wait 4 % | elapsed 1:02 |
    ETA 0:41`` every ``every_n_seconds`` during training, and a line with the validation metrics after
    each validation. The data-wait share is over the same interval as the rate (validations left out).

    Lines go through ``logging`` (console and ``train.log``), on global rank 0 only. Reading the loss
    costs one host-device sync per line, not per step.

    Args:
        every_n_seconds: seconds between two progress lines (0 = after every step).
    """

    def __init__(self, *, every_n_seconds: float) -> None:
        super().__init__()
        if not every_n_seconds >= 0:
            raise ValueError(f"callbacks.progress_bar.every_n_seconds: expected >= 0, got {every_n_seconds}")
        self.every_n_seconds = every_n_seconds
        self._enabled = True
        self._start = 0.0
        self._start_step = 0
        self._window_start = 0.0
        self._window_images = 0
        self._last_line = 0.0
        self._wait_window = WaitWindow()

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = self._window_start = self._last_line = time.monotonic()
        self._start_step = trainer.global_step  # a resumed run's rate counts its own steps only
        self._window_images = 0
        self._restart_wait(trainer)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._enabled:
            return
        self._window_images += _batch_size(batch) or 0
        now = time.monotonic()
        if now - self._last_line < self.every_n_seconds:
            return
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        parts = [self._position(trainer)]
        if isinstance(loss, Tensor):
            parts.append(f"loss {float(loss):.4f}")
        if self._window_images and now > self._window_start:
            parts.append(f"{self._window_images / (now - self._window_start):.1f} img/s")
        data_wait = _data_wait(self._wait_window, trainer)
        if data_wait is not None:
            parts.append(data_wait)
        log.info(" | ".join([*parts, self._timing(trainer, now)]))
        self._last_line = self._window_start = now
        self._window_images = 0
        self._restart_wait(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._enabled or trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        scores = {
            k: float(v)
            for k, v in trainer.callback_metrics.items()
            if k.startswith("val/") and isinstance(v, Tensor) and v.numel() == 1
        }
        metrics = " ".join(f"{k} {v:.4f}" for k, v in sorted(scores.items())) or "no metrics"
        now = time.monotonic()
        log.info("validation at %s | %s | %s", self._position(trainer), metrics, self._timing(trainer, now))
        # The throughput window restarts: validation time is not training speed.
        self._window_start = self._last_line = now
        self._window_images = 0
        self._restart_wait(trainer)

    def _restart_wait(self, trainer: L.Trainer) -> None:
        wait = loader_wait(trainer)
        if wait is not None:
            self._wait_window.restart(wait)

    def _position(self, trainer: L.Trainer) -> str:
        total = self._total(trainer)
        step = trainer.global_step
        done = f"step {step}/{total} ({100 * step / total:.0f}%)" if total else f"step {step}"
        return f"{done} | epoch {trainer.current_epoch}"

    def _timing(self, trainer: L.Trainer, now: float) -> str:
        elapsed = now - self._start
        text = f"elapsed {_clock(elapsed)}"
        total, done = self._total(trainer), trainer.global_step - self._start_step
        if total and done > 0:
            # Wall time per step so far, validations included: they recur until the end.
            text += f" | ETA {_clock(elapsed / done * max(total - trainer.global_step, 0))}"
        return text

    @staticmethod
    def _total(trainer: L.Trainer) -> int | None:
        total = trainer.estimated_stepping_batches
        return int(total) if math.isfinite(total) and total > 0 else None
