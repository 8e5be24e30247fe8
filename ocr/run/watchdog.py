"""Stall watchdog: dump every thread's Python stack when no step completes for ``timeout_s`` seconds.

The thread starts in ``__init__`` (before data setup and the first CUDA call), so hangs in imports,
dataset scans, worker start-up and the first step are covered. The dump goes to stderr through
``faulthandler`` (no locks: it works while the main thread is stuck in C code) and to
``<run dir>/stall-<n>.txt`` (``stall-node<n>-rank<k>-<n>.txt`` on other ranks). Under DDP a rank that stops
for a stall says so in the process group's store, and the others, waiting for it in a collective, stop too
with the same exit code.
"""

from __future__ import annotations

import _thread
import faulthandler
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_only

from ocr.machine.distributed import launch_info, rank_tag
from ocr.run.faults import EXIT_STALL, end_process
from ocr.run.peers import Poller, announce_fault, default_store, peer_fault
from ocr.utils.config_types import PositiveFloat
from ocr.utils.io import atomic_write_bytes

__all__ = ["StallWatchdog"]

log = logging.getLogger(__name__)

STALL_KEY = "ocr/stall"  # the process group's store: the first rank that stops for a stall


def _make_interruptible() -> None:
    """Let ``_thread.interrupt_main`` work: it does nothing while SIGINT is ignored or left to the OS,
    as in a process started with ``nohup`` or with ``&`` from a script."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        log.info("Stall watchdog: SIGINT was ignored; restored Python's handler so a stall can interrupt")


class StallWatchdog(Callback):
    """Dumps all thread stacks when no batch completes within ``timeout_s`` (again with ``repeat``);
    ``exit_on_stall`` then interrupts the main thread, and exits 124 if still stuck ``timeout_s`` later."""

    def __init__(
        self, *, timeout_s: PositiveFloat, repeat: bool, exit_on_stall: bool, dirpath: str | None
    ) -> None:
        self.timeout_s = float(timeout_s)
        self.repeat = repeat
        self.exit_on_stall = exit_on_stall
        self.dirpath = Path(dirpath) if dirpath is not None else None
        self.dumps: list[Path] = []
        self._last_beat = time.monotonic()
        self._last_event = "start-up (no step completed yet)"
        self._interrupted_at: float | None = None
        self._stall_beat: float | None = None
        self._dumps_in_stall = 0
        self._poller = Poller("stall-watchdog", min(1.0, self.timeout_s / 4), self._poll)
        self._node_rank = launch_info().node_rank or 0
        self._store: Any | None = None  # the process group's store under DDP, set up with the trainer
        if exit_on_stall:
            _make_interruptible()
        self.start()

    @property
    def interrupted_for_stall(self) -> bool:
        """True once this watchdog interrupted the main thread for a stall (``exit_on_stall``): that
        KeyboardInterrupt is a failure, not a user's Ctrl-C."""
        return self._interrupted_at is not None

    def start(self) -> None:
        """Start (or restart) the watchdog thread; the stall clock starts now."""
        self.feed("start-up (no step completed yet)")
        self._poller.start()

    def stop(self) -> None:
        """Stop the thread (idempotent)."""
        self._poller.stop(join_s=5.0)

    def feed(self, event: str) -> None:
        """Record progress: the stall clock restarts."""
        self._last_beat = time.monotonic()
        self._last_event = event
        self._interrupted_at = None

    def _poll(self) -> None:
        beat, now = self._last_beat, time.monotonic()
        if beat != self._stall_beat:
            self._stall_beat, self._dumps_in_stall = beat, 0
        self._stop_for_stalled_peer()
        if self._interrupted_at is not None and now - self._interrupted_at >= self.timeout_s:
            self._hard_exit(now - self._interrupted_at)
        due = now - beat >= self.timeout_s * (self._dumps_in_stall + 1)
        if not due or (self._dumps_in_stall and not self.repeat):
            return
        self._report(now - beat)
        self._dumps_in_stall += 1
        if self.exit_on_stall and self._interrupted_at is None:
            log.error("Stall: interrupting the main thread <callbacks.stall_watchdog.exit_on_stall=true>")
            self._interrupted_at = time.monotonic()
            self._announce(now - beat)
            _thread.interrupt_main()

    def _announce(self, stalled_s: float) -> None:
        """Tell the other DDP ranks that this one stops for a stall."""
        if self._store is not None:
            record = {
                "rank": rank_zero_only.rank,  # type: ignore[attr-defined]
                "node": self._node_rank,
                "stalled_s": round(stalled_s),
                "last": self._last_event,
                "dump": str(self.dumps[-1]) if self.dumps else None,
            }
            announce_fault(self._store, record, key=STALL_KEY)

    def _stop_for_stalled_peer(self) -> None:
        """End this rank when another one stopped for a stall: this one waits for it in a collective."""
        if self._store is None or self._poller.stopped:
            return
        record = peer_fault(self._store, rank_zero_only.rank, key=STALL_KEY)  # type: ignore[attr-defined]
        if record is None:
            return
        message = (
            f"Stall on rank {record.get('rank')} (node {record.get('node')}): no step for "
            f"{record.get('stalled_s')} s, last progress: {record.get('last')}; its stacks: "
            f"{record.get('dump')}. This rank stops too, with exit code {EXIT_STALL}: the collectives "
            "it waits for cannot complete <callbacks.stall_watchdog.exit_on_stall=true>"
        )
        end_process(EXIT_STALL, [(message, None)])

    def _report(self, stalled_s: float) -> None:
        header = (
            f"\n*** stall watchdog: no training/validation step completed for {stalled_s:.0f} s "
            f"(timeout_s={self.timeout_s:g}); last progress: {self._last_event}. "
            "Stacks of all threads follow. ***\n"
        ).encode()
        with tempfile.TemporaryFile() as handle:  # every thread's stack, as faulthandler prints it
            faulthandler.dump_traceback(file=handle, all_threads=True)
            handle.seek(0)
            stacks = handle.read()
        try:
            os.write(sys.__stderr__.fileno() if sys.__stderr__ else 2, header + stacks)
        except (OSError, ValueError):
            pass
        # rank_zero_only.rank is set on the function by Lightning; each DDP rank dumps its own stacks.
        tag = rank_tag(rank_zero_only.rank, self._node_rank)  # type: ignore[attr-defined]
        name = f"stall-{tag}-{len(self.dumps) + 1}.txt" if tag else f"stall-{len(self.dumps) + 1}.txt"
        path = (self.dirpath or Path("outputs")) / name
        try:
            atomic_write_bytes(path, header + stacks)
            self.dumps.append(path)
            log.error("Stall: stacks of all threads written to %s", path)
        except OSError as exc:
            log.error("Stall: could not write %s: %s", path, exc)

    @staticmethod
    def _hard_exit(waited_s: float) -> None:
        log.error(
            "Stall: main thread still stuck %.0f s after the interrupt; exiting with code %d",
            waited_s,
            EXIT_STALL,
        )
        logging.shutdown()
        os._exit(EXIT_STALL)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.dirpath is None:
            self.dirpath = Path(trainer.default_root_dir)
        self._node_rank = trainer.node_rank
        self._store = default_store() if trainer.world_size > 1 else None
        self.start()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.feed(f"train step {trainer.global_step} (batch {batch_idx})")

    def _eval_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.feed(f"{'test' if trainer.testing else 'validation'} batch {batch_idx}")

    on_validation_batch_end = on_test_batch_end = _eval_batch_end

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.feed("validation end")

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.stop()

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self.stop()
