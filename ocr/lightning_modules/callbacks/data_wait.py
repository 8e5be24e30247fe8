"""The data-wait figure of a run: the share of training time spent waiting for the train loader.

The train stream (``ocr.data.stream``) adds up the seconds the loop spends blocked in ``next()`` on its
DataLoader iterator, and the wait for each epoch's first batch (host clocks: no device sync). This callback
divides them by the training wall time between the same moments, validation left out, and reports:

- ``train/data_wait`` (share of step time, over each logging interval) and ``train/first_batch_wait_s``
  (each epoch) to the run's loggers (the metrics CSV, wandb), as plain floats;
- at the end of training one line, ``data wait: 4 % of training step time ...``, or a warning from
  ``input_bound_share`` on (``input-bound: 61 % of training step time waiting for data ...``) that says
  what to change; the run's final metrics (``metrics.json``) get ``train/data_wait``.

The progress lines show the same share over their own interval (``progress.py``). On a GPU the host runs
ahead of the device, so a host-side wait is an upper bound of the time the device idles for data.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn

from ocr.data.stream import LoaderWait
from ocr.utils.text import plural

__all__ = ["DataWait", "WaitWindow", "loader_wait"]

log = logging.getLogger(__name__)


def loader_wait(trainer: L.Trainer) -> LoaderWait | None:
    """The train loader's wait record (``ReceiptDataModule.loader_wait``); None without one."""
    wait = getattr(trainer.datamodule, "loader_wait", None)  # type: ignore[attr-defined]
    return wait if isinstance(wait, LoaderWait) else None


class WaitWindow:
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

    def share(self, wait: LoaderWait) -> float | None:
        """Share of the window spent waiting; None for an empty window."""
        waited, elapsed = self.read(wait)
        return min(1.0, waited / elapsed) if elapsed > 0 else None


class DataWait(Callback):
    """Logs the data-wait share and the first-batch waits, and sums them up at the end of training.

    Args:
        input_bound_share: from this share of training step time spent waiting for data on, the end of
            training warns that the run is input-bound and says what to change.
    """

    def __init__(self, *, input_bound_share: float) -> None:
        if not 0 < input_bound_share <= 1:
            raise ValueError(
                f"callbacks.data_wait.input_bound_share: expected a share in (0, 1], got {input_bound_share}"
            )
        self.input_bound_share = input_bound_share
        self._window = WaitWindow()
        self._waited = 0.0  # over the run's training windows
        self._elapsed = 0.0
        self._last_logged_step = -1
        self._first_batches_before = 0  # first-batch waits recorded before this fit

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        wait = loader_wait(trainer)
        if wait is not None:
            # The first batch was fetched when Lightning set up the loader: its wait counts from there.
            self._first_batches_before = max(0, len(wait.first_batch) - 1)
            self._window.restart(wait)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        wait = loader_wait(trainer)
        step = trainer.global_step
        every = max(1, trainer.log_every_n_steps)  # type: ignore[attr-defined]  # set by Lightning's connector
        if wait is None or step % every or step == self._last_logged_step:
            return
        self._last_logged_step = step
        share = self._close(wait)
        if share is not None:
            _log(trainer, {"train/data_wait": share})
        self._window.restart(wait)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        wait = loader_wait(trainer)
        if wait is not None and _fitting(trainer):
            self._close(wait)
            self._window.started = None  # validation time is not step time

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        wait = loader_wait(trainer)
        if wait is not None and _fitting(trainer):
            self._window.restart(wait)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        wait = loader_wait(trainer)
        if wait is not None and wait.first_batch:
            _log(trainer, {"train/first_batch_wait_s": wait.first_batch[-1]})

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        wait = loader_wait(trainer)
        if wait is None:
            return
        self._close(wait)
        self._window.started = None
        if self._elapsed <= 0:
            return
        share = self._waited / self._elapsed
        # Read by runners/train.py with the other final metrics (metrics.json, the printed summary).
        trainer.callback_metrics["train/data_wait"] = torch.tensor(share)
        if trainer.is_global_zero:
            self._summarise(trainer, wait, share)

    def _close(self, wait: LoaderWait) -> float | None:
        """Add the open window to the run's totals; its share (None when it holds no time)."""
        waited, elapsed = self._window.read(wait)
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


def _fitting(trainer: L.Trainer) -> bool:
    return trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking


def _log(trainer: L.Trainer, metrics: dict[str, float]) -> None:
    """Plain floats straight to the loggers: a tensor logged through the module would be copied to the
    device (a sync on CUDA)."""
    for logger in trainer.loggers:
        logger.log_metrics({**metrics, "epoch": trainer.current_epoch}, step=trainer.global_step)
