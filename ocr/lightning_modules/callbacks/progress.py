"""Training progress for any console, with the run's data-wait figure.

The rich bar on a terminal, plain log lines everywhere else. Both show the share of training wall time
(validation left out) the loop waited for the train stream's batches (``ocr.data.stream``, host clocks,
an upper bound of the device's idle time on a GPU); the loggers get ``train/data_wait`` and
``train/first_batch_wait_s``, and the end of training logs the fit's share, as a warning with advice from
``input_bound_share`` on.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Mapping
from typing import Annotated, Any

import lightning as L
import torch
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.callbacks.progress import ProgressBar
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor

from ocr.checkpoints.saving import scalar_metrics
from ocr.data.stream import LoaderWait
from ocr.utils.config_types import Bounds, NonNegativeFloat
from ocr.utils.text import plural

__all__ = ["PlainProgress", "RichProgress", "images_in", "progress_bar"]

log = logging.getLogger(__name__)

Share = Annotated[float, Bounds(0.0, 1.0, low_open=True)]  # bounds checked when the config is read


def progress_bar(*, every_n_seconds: NonNegativeFloat, leave: bool, input_bound_share: Share) -> ProgressBar:
    """The rich bar when stdout is a terminal, else :class:`PlainProgress` (``> log``, ``nohup``, CI)."""
    if sys.stdout.isatty():
        return RichProgress(leave=leave, input_bound_share=input_bound_share)
    return PlainProgress(every_n_seconds=every_n_seconds, input_bound_share=input_bound_share)


def _loader_wait(trainer: L.Trainer) -> LoaderWait | None:
    """The train loader's wait record (``ReceiptDataModule.loader_wait``); None without one."""
    wait = getattr(trainer.datamodule, "loader_wait", None)  # type: ignore[attr-defined]
    return wait if isinstance(wait, LoaderWait) else None


class _WaitWindow:
    """Seconds waited for data and seconds elapsed since :meth:`restart`."""

    def __init__(self) -> None:
        self.started: float | None = None
        self._waited_before = 0.0

    def restart(self, wait: LoaderWait) -> None:
        self.started, self._waited_before = time.perf_counter(), wait.seconds

    def read(self, wait: LoaderWait) -> tuple[float, float]:
        """(seconds waited, seconds elapsed) in the window; (0, 0) when it was never started."""
        if self.started is None:
            return 0.0, 0.0
        return wait.seconds - self._waited_before, time.perf_counter() - self.started


class _DataWait(ProgressBar):
    """The data-wait figures both bars share: the loggers' share, the first-batch waits, the end-of-run
    summary, and the share over the bar's own window (:meth:`_take_wait_text`)."""

    def __init__(self, *, input_bound_share: float, **bar_args: Any) -> None:
        super().__init__(**bar_args)  # the bar's own (RichProgressBar: leave)
        self.input_bound_share = input_bound_share
        self._bar_window = _WaitWindow()
        self._log_window = _WaitWindow()
        self._waited = self._elapsed = 0.0  # over the fit's training windows
        self._last_logged_step = -1
        self._first_batches_before = 0  # first-batch waits recorded before this fit

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        wait = _loader_wait(trainer)
        if wait is not None:
            # The first batch was fetched when Lightning set up the loader: its wait counts from there.
            self._first_batches_before = max(0, len(wait.first_batch) - 1)
            self._log_window.restart(wait)
            self._bar_window.restart(wait)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        wait = _loader_wait(trainer)
        step = trainer.global_step
        every = max(1, trainer.log_every_n_steps)  # type: ignore[attr-defined]  # set by Lightning's connector
        if wait is None or step % every or step == self._last_logged_step:
            return
        self._last_logged_step = step
        share = self._close(wait)
        if share is not None:
            _log(trainer, {"train/data_wait": share})
        self._log_window.restart(wait)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_start(trainer, pl_module)
        wait = _loader_wait(trainer)
        if wait is not None and _fitting(trainer):
            self._close(wait)
            self._log_window.started = None  # validation time is not step time

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        wait = _loader_wait(trainer)
        if wait is not None and _fitting(trainer):
            self._log_window.restart(wait)
            self._bar_window.restart(wait)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        wait = _loader_wait(trainer)
        if wait is not None and wait.first_batch:
            _log(trainer, {"train/first_batch_wait_s": wait.first_batch[-1]})

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        wait = _loader_wait(trainer)
        if wait is None:
            return
        self._close(wait)
        self._log_window.started = None
        if self._elapsed <= 0:
            return
        share = self._waited / self._elapsed
        # Among the final metrics (metrics.json, the printed summary).
        trainer.callback_metrics["train/data_wait"] = torch.tensor(share)
        if trainer.is_global_zero:
            self._summarise(trainer, wait, share)

    def _take_wait_text(self, trainer: L.Trainer) -> str | None:
        """``data wait 61 % (epoch start 0.48 s)`` over the bar's window, then a new window (None: no
        stream or no open window)."""
        wait = _loader_wait(trainer)
        if wait is None:
            return None
        waited, elapsed = self._bar_window.read(wait)
        self._bar_window.restart(wait)
        if elapsed <= 0:
            return None
        text = f"data wait {100 * min(1.0, waited / elapsed):.0f} %"
        if wait.first_batch and wait.first_batch[-1] >= 0.005:
            text += f" (epoch start {wait.first_batch[-1]:.2f} s)"
        return text

    def _close(self, wait: LoaderWait) -> float | None:
        """Add the open logging window to the fit's totals; its share (None when it holds no time)."""
        waited, elapsed = self._log_window.read(wait)
        self._waited += waited
        self._elapsed += elapsed
        return min(1.0, waited / elapsed) if elapsed > 0 else None

    def _summarise(self, trainer: L.Trainer, wait: LoaderWait, share: float) -> None:
        firsts = wait.first_batch[self._first_batches_before :]
        later = firsts[1:]
        first = f"first batch of an epoch: {firsts[0]:.2f} s at the start" if firsts else "no epoch started"
        if later:
            first += f", {sum(later) / len(later):.3f} s on average after ({plural(len(later), 'epoch')})"
        if share < self.input_bound_share:
            log.info("data wait: %.0f %% of training step time waiting for data; %s", 100 * share, first)
            return
        datamodule = trainer.datamodule  # type: ignore[attr-defined]
        workers = getattr(datamodule, "num_workers", None)
        cache = (getattr(datamodule, "dataset_options", None) or {}).get("cache_dir", "")
        advice = [f"raise data.num_workers (now {workers}; up to one per spare CPU core)"]
        if cache is None:
            advice.append("cache decoded images (data.cache_dir='${paths.data_dir}/cache', quoted)")
        advice.append("or cut the per-sample work (data.train_transform: train_long_side, crop_size)")
        log.warning(
            "input-bound: %.0f %% of training step time waiting for data (%s). The loader builds batches "
            "slower than the model trains them: %s. docs/benchmarks.md, 'Data wait', has the figures.",
            100 * share,
            first,
            ", ".join(advice),
        )


class RichProgress(_DataWait, RichProgressBar):
    """Lightning's rich bar with the data-wait share over the last ``WINDOW_SECONDS`` among its metrics."""

    WINDOW_SECONDS = 10.0

    def __init__(self, *, leave: bool, input_bound_share: float) -> None:
        super().__init__(input_bound_share=input_bound_share, leave=leave)
        self._shown: str | None = None

    def get_metrics(
        self, trainer: L.Trainer, pl_module: L.LightningModule
    ) -> dict[str, int | str | float | dict[str, float]]:
        metrics = super().get_metrics(trainer, pl_module)
        started = self._bar_window.started
        if started is not None and time.perf_counter() - started >= self.WINDOW_SECONDS:
            self._shown = self._take_wait_text(trainer)
        if self._shown is not None:
            metrics["data"] = self._shown.removeprefix("data ")
        return metrics


class PlainProgress(_DataWait):
    """Logs ``step 120/200 (60%) | epoch 3 | loss 0.8123 | 12.3 img/s | data wait 4 % | elapsed 1:02 |
    ETA 0:41`` every ``every_n_seconds`` (0: every step; one loss sync per line), and the validation
    metrics after each validation."""

    def __init__(self, *, every_n_seconds: float, input_bound_share: float) -> None:
        super().__init__(input_bound_share=input_bound_share)
        self.every_n_seconds = every_n_seconds
        self._enabled = True
        self._start = 0.0
        self._start_step = 0
        self._window_start = 0.0
        self._window_images = 0
        self._last_line = 0.0

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._start = self._window_start = self._last_line = time.monotonic()
        self._start_step = trainer.global_step  # a resumed run's rate counts its own steps only
        self._window_images = 0

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if not self._enabled:
            return
        self._window_images += images_in(batch)
        now = time.monotonic()
        if now - self._last_line < self.every_n_seconds:
            return
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        parts = [self._position(trainer)]
        if isinstance(loss, Tensor):
            parts.append(f"loss {float(loss):.4f}")
        if self._window_images and now > self._window_start:
            parts.append(f"{self._window_images / (now - self._window_start):.1f} img/s")
        data_wait = self._take_wait_text(trainer)
        if data_wait is not None:
            parts.append(data_wait)
        log.info(" | ".join([*parts, self._timing(trainer, now)]))
        self._last_line = self._window_start = now
        self._window_images = 0

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if not self._enabled or trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        scores = sorted((k, v) for k, v in scalar_metrics(trainer).items() if k.startswith("val/"))
        metrics = " ".join(f"{k} {v:.4f}" for k, v in scores) or "no metrics"
        now = time.monotonic()
        log.info("validation at %s | %s | %s", self._position(trainer), metrics, self._timing(trainer, now))
        # The throughput window restarts: validation time is not training speed.
        self._window_start = self._last_line = now
        self._window_images = 0

    def _position(self, trainer: L.Trainer) -> str:
        total = _total(trainer)
        step = trainer.global_step
        done = f"step {step}/{total} ({100 * step / total:.0f}%)" if total else f"step {step}"
        return f"{done} | epoch {trainer.current_epoch}"

    def _timing(self, trainer: L.Trainer, now: float) -> str:
        elapsed = now - self._start
        text = f"elapsed {_clock(elapsed)}"
        total, done = _total(trainer), trainer.global_step - self._start_step
        if total and done > 0:
            # Wall time per step so far, validations included: they recur until the end.
            text += f" | ETA {_clock(elapsed / done * max(total - trainer.global_step, 0))}"
        return text


def _total(trainer: L.Trainer) -> int | None:
    total = trainer.estimated_stepping_batches
    return int(total) if math.isfinite(total) and total > 0 else None


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def images_in(batch: Any) -> int:
    """The images of a training batch (0 when it holds no ``images`` tensor)."""
    images = batch.get("images") if isinstance(batch, Mapping) else None
    return int(images.shape[0]) if isinstance(images, Tensor) and images.ndim else 0


def _fitting(trainer: L.Trainer) -> bool:
    return trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking


def _log(trainer: L.Trainer, metrics: dict[str, float]) -> None:
    """Plain floats straight to the loggers: a tensor logged through the module would be copied to the
    device (a sync on CUDA)."""
    for logger in trainer.loggers:
        logger.log_metrics({**metrics, "epoch": trainer.current_epoch}, step=trainer.global_step)
