"""A fit's signal handlers. Signals take Lightning's SIGTERM path (the first Ctrl-C too, so no half-updated
state); a second one, or the stall watchdog, raises ``KeyboardInterrupt`` at once, without a checkpoint.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ocr.checkpoints.saving import RunCheckpoint
from ocr.run.folder import write_interrupted
from ocr.run.watchdog import StallWatchdog
from ocr.utils.commands import resume_command

__all__ = ["EXIT_CODES", "Interrupts", "is_interruption"]

log = logging.getLogger(__name__)

SIGNAL_CONNECTOR_LOGGER = "lightning.pytorch.trainer.connectors.signal_connector"
# As a shell reports a process a signal ended: 128 + the signal number.
EXIT_CODES = {"SIGINT": 128 + signal.SIGINT, "SIGTERM": 128 + signal.SIGTERM}


def is_interruption(exception: BaseException, trainer: L.Trainer) -> bool:
    """True for a stop by a signal (Ctrl-C or SIGTERM), which is not a failure; the interrupt of the
    trainer's stall watchdog (``exit_on_stall``) is one."""
    return isinstance(exception, KeyboardInterrupt | SIGTERMException) and not _stalled(trainer)


def _stalled(trainer: L.Trainer) -> bool:
    callbacks = trainer.callbacks  # type: ignore[attr-defined]  # set by Lightning's connector
    return any(isinstance(c, StallWatchdog) and c.interrupted_for_stall for c in callbacks)


class Interrupts:
    """The signal handlers of a fit; on a stop by a signal, saves ``last.ckpt`` (through the run's
    ``RunCheckpoint``) and writes and logs ``.INTERRUPTED`` with the resume command."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.ctrl_c = False
        self.second_signal: str | None = None  # the signal that stopped the run at once
        self._previous_handler: Any = None  # SIGINT's handler before fit, restored after it
        self._previous_sigterm: Any = None  # Lightning's SIGTERM handler, called by ours the first time
        self._trainer: L.Trainer | None = None

    def install(self, trainer: L.Trainer) -> None:
        """At train start, after Lightning registered its handlers; main thread only; a SIGINT ignored on
        purpose (a script's background job) stays ignored."""
        self._trainer = trainer
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            self._previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
        if main and callable(signal.getsignal(signal.SIGTERM)):
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)

    def restore(self) -> None:
        """The handlers of before the fit."""
        self._trainer = None
        if self._previous_handler is not None:
            signal.signal(signal.SIGINT, self._previous_handler)
            self._previous_handler = None
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None

    def _stopping(self) -> bool:
        return self.ctrl_c or (self._trainer is not None and self._trainer.received_sigterm)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        sigterm_handler = self._previous_sigterm or signal.getsignal(signal.SIGTERM)  # Lightning's
        stalled = self._trainer is not None and _stalled(self._trainer)
        if self._stopping() or stalled or not callable(sigterm_handler):
            self.second_signal = "Ctrl-C"
            raise KeyboardInterrupt
        self.ctrl_c = True
        log.warning(
            "Ctrl-C: stopping after the current step and saving last.ckpt (Ctrl-C again stops at once, "
            "without saving)"
        )
        # Lightning's handler logs "Received SIGTERM", which is not what the user sent.
        connector_log = logging.getLogger(SIGNAL_CONNECTOR_LOGGER)
        disabled, connector_log.disabled = connector_log.disabled, True
        try:
            sigterm_handler(signal.SIGTERM, frame)
        finally:
            connector_log.disabled = disabled

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """A first SIGTERM is Lightning's graceful stop; a second one stops at once (as Ctrl-C does)."""
        if self._stopping():
            self.second_signal = "SIGTERM"
            log.warning("SIGTERM again: stopping at once, without saving")
            raise KeyboardInterrupt
        log.warning(
            "SIGTERM: stopping after the current step and saving last.ckpt (SIGTERM or Ctrl-C again stops "
            "at once, without saving)"
        )
        self._previous_sigterm(signum, frame)

    def record(self, trainer: L.Trainer, exception: BaseException) -> None:
        """For a stop by a signal: ``last.ckpt`` when the state is whole, ``.INTERRUPTED`` on rank 0."""
        if self.second_signal == "SIGTERM":
            cause = "SIGTERM"
        else:
            cause = "Ctrl-C" if self.ctrl_c or isinstance(exception, KeyboardInterrupt) else "SIGTERM"
        saved = None
        checkpoint = trainer.checkpoint_callback
        # Only a stop Lightning raised between steps leaves a whole state to save.
        if isinstance(exception, SIGTERMException) and isinstance(checkpoint, RunCheckpoint):
            saved = checkpoint.save_on_interrupt(trainer)
        if not trainer.is_global_zero:
            return
        during = " during a validation" if trainer.validating or trainer.sanity_checking else ""
        summary = f"interrupted by {cause} at step {trainer.global_step}{during}; "
        if saved:
            summary += f"{saved} holds that step. Resume: {resume_command(self.run_dir)}"
        elif isinstance(checkpoint, RunCheckpoint) and any(Path(str(checkpoint.dirpath)).glob("*.ckpt")):
            summary += f"no checkpoint written now. Resume from the latest: {resume_command(self.run_dir)}"
        else:
            summary += (
                "no checkpoint yet, nothing to resume: delete the folder to start again there, or start "
                "again in another"
            )
        write_interrupted(self.run_dir, summary, EXIT_CODES["SIGINT" if cause == "Ctrl-C" else "SIGTERM"])
        log.warning("Run %s", summary)
