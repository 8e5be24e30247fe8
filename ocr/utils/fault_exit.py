"""Ending the process after a CUDA fault: within seconds, our explanation last, no CUDA call on the way.

After a CUDA fault every CUDA call may fail or block: Lightning's teardown (it moves the optimizer state
to the CPU), DataLoader worker shutdown (pinned memory), CUDA's and NCCL's atexit handlers. So the
process ends with ``os._exit``: child processes (DataLoader workers) are killed first, the closing
records (the first CUDA error's traceback, the explanation) are logged and the log handlers flushed.
A deadline armed when the fault is first seen ends the process anyway if a hook after it blocks on the
dead context; it writes the closing records straight to the handlers' file descriptors (no lock).

Exit codes (documented in docs/troubleshooting/CUDA_DEBUGGING.md): ``EXIT_CUDA_FAULT`` on the process
that faulted, ``EXIT_PEER_FAULT`` on the other DDP ranks (``ocr.utils.peer_fault``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ocr.utils.cuda_fault import CudaFault, FaultSite, explanation, find_cuda_fault, headline, next_commands
from ocr.utils.sentinels import failure_written, write_failure

__all__ = [
    "DEADLINE_S",
    "EXIT_CUDA_FAULT",
    "EXIT_PEER_FAULT",
    "FaultExit",
    "closing_line",
    "end_process",
    "error_record",
    "exit_on_cuda_fault",
    "log_file_only",
]

log = logging.getLogger(__name__)

EXIT_CUDA_FAULT = 84  # distinct from 1 (an error), 124 (stall), 86 (compute-sanitizer found errors)
EXIT_PEER_FAULT = 85
DEADLINE_S = 7.0  # from the fault to the exit: the promise is 10 s
CHILD_JOIN_S = 1.0

_active: FaultExit | None = None  # the fault this process is ending for


Closing = tuple[str, BaseException | None]  # a message, and the exception whose traceback follows it


def closing_line(code: int) -> str:
    """The last line on the console of a process the fault exit ends (scripts look for it)."""
    return f"CUDA FAULT: ending the process with exit code {code}."


def error_record(message: str, exception: BaseException | None = None) -> logging.LogRecord:
    """An ERROR record of this module's logger (timestamped now), with ``exception``'s traceback."""
    exc_info = (type(exception), exception, exception.__traceback__) if exception is not None else None
    return log.makeRecord(log.name, logging.ERROR, __file__, 0, message, (), exc_info)


class FaultExit:
    """Ends this process for one CUDA fault: :meth:`arm` at once, :meth:`finish` when the hooks are done.

    Args:
        code: the exit code.
        closing: what is logged last (console and log file), just before the exit.
        deadline_s: after :meth:`arm`, the process ends within this many seconds whatever blocks.
    """

    def __init__(self, *, code: int, closing: Sequence[Closing], deadline_s: float) -> None:
        self.code = code
        self.closing = list(closing)
        self.deadline_s = deadline_s
        self._timer: threading.Timer | None = None

    @classmethod
    def for_fault(
        cls, fault: CudaFault, site: FaultSite, *, run_dir: Path, crash: Path | None, trainer_fn: str | None
    ) -> FaultExit:
        """The exit for ``fault``: it closes with the first CUDA error's traceback and the explanation
        (:func:`ocr.utils.cuda_fault.explanation`)."""
        commands = next_commands(trainer_fn, crash, sys.argv)
        text = explanation(
            fault,
            site,
            failure=run_dir / ".FAILURE",
            crash=crash,
            commands=commands,
            exit_code=EXIT_CUDA_FAULT,
        )
        closing: list[Closing] = [
            (f"CUDA FAULT: the traceback of the first CUDA error ({fault.kind}):", fault.exception),
            (text, None),
            (closing_line(EXIT_CUDA_FAULT), None),
        ]
        return cls(code=EXIT_CUDA_FAULT, closing=closing, deadline_s=DEADLINE_S)

    def arm(self) -> FaultExit:
        """Start the deadline and make this the process's exit (a second fault reuses it)."""
        global _active
        _active = self
        self._timer = threading.Timer(self.deadline_s, self._expire)
        self._timer.name = "cuda-fault-deadline"
        self._timer.daemon = True
        self._timer.start()
        return self

    def finish(self) -> NoReturn:
        """Kill child processes, log the closing lines, flush, ``os._exit``."""
        if self._timer is not None:
            self._timer.cancel()
        end_process(self.code, self.closing)

    def _expire(self) -> None:
        pids = _kill_children()
        late = (
            f"CUDA FAULT: a hook after the fault did not return within {self.deadline_s:g} s (blocked on the "
            f"dead CUDA context?): ending the process now (killed the child processes: pids {pids}); the "
            "crash bundle may be incomplete.",
            None,
        )
        _write_raw([error_record(*line) for line in (late, *self.closing)])
        _hard_exit(self.code)


def exit_on_cuda_fault(exception: BaseException, run_dir: Path) -> None:
    """For the runners' task wrapper: end the process here when ``exception`` holds a CUDA fault.

    Writes ``.FAILURE`` (the first CUDA error) unless this run already did; an error raised after the
    fault (Lightning's teardown on the dead context) goes to the log file only. Returns only when there is
    no CUDA fault.
    """
    fault = find_cuda_fault(exception)
    if fault is None:
        return
    ending = _active
    if ending is None:  # the fault was not seen inside the trainer (or no CudaFaultExit callback ran)
        rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        site = FaultSite(None, None, None, None, rank, world_size, ())
        ending = FaultExit.for_fault(fault, site, run_dir=run_dir, crash=None, trainer_fn=None).arm()
        log.error(headline(fault, site, ending.code))
    if fault.exception is not exception:
        log_file_only(
            error_record("Raised after the CUDA fault, on the dead context (not the cause):", exception)
        )
    if not failure_written(run_dir):
        try:
            write_failure(run_dir, fault.exception)
        except OSError as error:
            log.error("Could not write %s: %s", run_dir / ".FAILURE", error)
    ending.finish()


def end_process(code: int, closing: Sequence[Closing]) -> NoReturn:
    """Kill child processes (DataLoader workers), log ``closing``, flush every handler, ``os._exit``."""
    pids = _kill_children()
    if pids:
        log.info("Ending the process: killed the child processes (DataLoader workers): pids %s", pids)
    for line in closing:
        log.handle(error_record(*line))
    for handler in _handlers():
        try:
            handler.flush()
        except (OSError, ValueError):
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    _hard_exit(code)


def log_file_only(record: logging.LogRecord) -> None:
    """Write ``record`` to the log files (Hydra's ``<task>.log``), not to the console."""
    for handler in _handlers():
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def _handlers() -> list[logging.Handler]:
    return list(logging.getLogger().handlers)


def _kill_children() -> list[int]:
    """SIGKILL this process's multiprocessing children (DataLoader workers) and reap them: a worker
    shutdown through the loader would join its pin-memory thread, which may be stuck in CUDA."""
    children = multiprocessing.active_children()
    for child in children:
        child.kill()
    for child in children:
        child.join(CHILD_JOIN_S)
    return [child.pid for child in children if child.pid is not None]


def _write_raw(records: Sequence[logging.LogRecord]) -> None:
    """``records`` formatted by each handler, written to its file descriptor without taking its lock
    (standard error, unformatted, when no handler has one)."""
    targets: list[tuple[logging.Handler, int]] = []
    for handler in _handlers():
        stream: Any = getattr(handler, "stream", None)
        try:
            targets.append((handler, stream.fileno()))
        except (AttributeError, OSError, ValueError):  # no stream, or one without a descriptor
            continue
    for record in records:
        lines = [(fd, handler.format(record)) for handler, fd in targets] or [(2, record.getMessage())]
        for fd, text in lines:
            try:
                os.write(fd, (text + "\n").encode(errors="replace"))
            except OSError:
                pass


def _hard_exit(code: int) -> NoReturn:
    os._exit(code)
