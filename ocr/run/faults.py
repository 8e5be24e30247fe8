"""CUDA faults: the one recogniser, the explanation we print, and the end of the process within seconds.

A CUDA fault (device-side assert, illegal address, launch failure, ECC, cuDNN/cuBLAS, NCCL) leaves the
context dead: every later CUDA call (Lightning's teardown, DataLoader worker shutdown, atexit handlers) may
fail or block. So the process ends with ``os._exit`` after killing its children and logging the closing
records, and a deadline armed at the fault ends it anyway if a hook blocks (writing straight to the
handlers' file descriptors). Error types are recognised by name: no torch import needed. Exit codes
(docs/troubleshooting/CUDA_DEBUGGING.md): ``EXIT_CUDA_FAULT`` here, ``EXIT_PEER_FAULT`` on the other ranks.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shlex
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from ocr.run.folder import failure_written, record_failure

__all__ = [
    "EXIT_CUDA_FAULT",
    "EXIT_PEER_FAULT",
    "EXIT_PEER_LOST",
    "EXIT_STALL",
    "CudaFault",
    "FaultExit",
    "FaultSite",
    "closing_line",
    "end_process",
    "error_record",
    "exception_chain",
    "exit_on_cuda_fault",
    "explanation",
    "find_cuda_fault",
    "headline",
    "is_cuda_fault",
    "log_file_only",
    "next_commands",
]

log = logging.getLogger(__name__)

# Exit codes, distinct from 1 (an error) and 86 (compute-sanitizer found errors).
EXIT_CUDA_FAULT = 84  # this process hit a CUDA fault
EXIT_PEER_FAULT = 85  # another DDP rank did
EXIT_PEER_LOST = 87  # another rank is gone or hangs (ocr.run.peers)
EXIT_STALL = 124  # as timeout(1): no step for too long (ocr.run.watchdog)

# (kind, message markers), first match wins; a message matching none of them is still a CUDA fault when
# its type is one of CUDA_ERROR_TYPES.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("device-side assert", ("device-side assert",)),
    ("illegal memory access", ("illegal memory access", "illegal address", "misaligned address")),
    ("illegal instruction", ("illegal instruction",)),
    ("kernel launch failure", ("unspecified launch failure", "launch failure", "launch timed out")),
    ("ECC error", ("ECC error",)),
    ("cuDNN failure", ("CUDNN_STATUS", "cuDNN error")),
    ("cuBLAS failure", ("CUBLAS_STATUS", "cuBLAS error")),
    ("NCCL failure", ("NCCL",)),
    ("CUDA error", ("CUDA error", "CUDA_ERROR", "CUDA driver error")),
)
# torch.AcceleratorError (torch >= 2.8 raises it for CUDA errors), torch.cuda.CudaError.
CUDA_ERROR_TYPES = frozenset({"AcceleratorError", "CudaError"})
NOT_A_FAULT_TYPES = frozenset({"OutOfMemoryError"})  # an OOM leaves the context usable
# Kernel faults (the first five kinds) CUDA reports at a later call, unless CUDA_LAUNCH_BLOCKING=1.
ASYNC_KINDS = frozenset(kind for kind, _ in KINDS[:5])
DOCS = "docs/troubleshooting/CUDA_DEBUGGING.md, 'When a run hits a CUDA fault'"


@dataclass(frozen=True)
class CudaFault:
    """The first CUDA error of an exception chain, its kind and whether CUDA reported it asynchronously."""

    exception: BaseException
    kind: str
    asynchronous: bool

    @property
    def summary(self) -> str:
        """``<type>: <first line of the message>``."""
        kind = type(self.exception)
        lines = str(self.exception).strip().splitlines()
        return f"{kind.__module__}.{kind.__qualname__}: {lines[0] if lines else ''}".removeprefix("builtins.")


@dataclass(frozen=True)
class FaultSite:
    """Where the fault was seen: host-side facts only (nothing may be read from the device any more)."""

    stage: str | None  # train, validate, sanity_check, test, predict; None outside the Lightning loops
    global_step: int | None
    epoch: int | None
    batch_idx: int | None
    rank: int
    world_size: int
    image_ids: tuple[str, ...]

    def describe(self) -> str:
        """``training, global step 3, epoch 0, batch 3, rank 0`` (what is known)."""
        if self.stage is None:
            return "outside the training/evaluation loops" + (
                f", rank {self.rank}" if self.world_size > 1 else ""
            )
        parts = [STAGE_NAMES.get(self.stage, self.stage)]
        parts += [f"global step {self.global_step}"] if self.global_step is not None else []
        parts += [f"epoch {self.epoch}"] if self.epoch is not None else []
        parts += [f"batch {self.batch_idx}"] if self.batch_idx is not None else []
        parts += [f"rank {self.rank} of {self.world_size}"] if self.world_size > 1 else []
        return ", ".join(parts)


STAGE_NAMES = {
    "train": "training",
    "sanity_check": "the sanity validation before training",
    "validate": "validation",
    "test": "test",
    "predict": "prediction",
}


def exception_chain(exception: BaseException) -> Iterator[BaseException]:
    """``exception``, then what it was raised from or during, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = exception
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _kind(exception: BaseException) -> str | None:
    names = {cls.__name__ for cls in type(exception).__mro__}
    if names & NOT_A_FAULT_TYPES:
        return None
    text = f"{type(exception).__name__}: {exception}"
    for kind, markers in KINDS:
        if any(marker in text for marker in markers):
            return kind
    return "CUDA error" if names & CUDA_ERROR_TYPES else None


def find_cuda_fault(exception: BaseException) -> CudaFault | None:
    """The first (innermost) CUDA error of ``exception``'s chain (a teardown failing on the dead context
    raises a second one), or None."""
    faults = [(error, kind) for error in exception_chain(exception) if (kind := _kind(error)) is not None]
    if not faults:
        return None
    error, kind = faults[-1]
    blocking = os.environ.get("CUDA_LAUNCH_BLOCKING") == "1"
    return CudaFault(exception=error, kind=kind, asynchronous=kind in ASYNC_KINDS and not blocking)


def is_cuda_fault(exception: BaseException) -> bool:
    """Whether ``exception`` (or one it was raised during) is a CUDA fault; an OOM is not one."""
    return find_cuda_fault(exception) is not None


def headline(fault: CudaFault, site: FaultSite, exit_code: int) -> str:
    """The first line we print: what faulted and where, and that the process ends now."""
    return (
        f"CUDA FAULT ({fault.kind}) in {site.describe()}: {fault.summary}. The CUDA context is dead: the "
        f"process ends with exit code {exit_code} without another CUDA call, after writing its report "
        "(host-side data only); the explanation follows at the end."
    )


def next_commands(trainer_fn: str | None, crash: Path | None, argv: Sequence[str]) -> list[str]:
    """What to run next: replay of the ``crash`` bundle, then the run again with CUDA_LAUNCH_BLOCKING=1
    (and memcheck for a ``fit``; its overrides in ``argv``, without ``hydra.*``, go to debug_cuda.sh)."""
    commands = []
    # A predict batch has no targets: replay runs forward + loss + backward.
    if crash is not None and trainer_fn != "predict":
        commands.append(f"scripts/debug_cuda.sh replay {shlex.quote(str(crash))} --device cuda --blocking")
    if trainer_fn == "fit":  # debug_cuda.sh's short runs train with runners/train.py
        overrides = shlex.join(arg for arg in argv[1:] if not arg.startswith(("hydra.", "hydra/")))
        commands.append(f"scripts/debug_cuda.sh blocking {overrides}".rstrip())
        commands.append(f"scripts/debug_cuda.sh sanitizer memcheck {overrides}".rstrip())
    else:
        script = shlex.join(argv) if argv else "<the same command>"
        commands.append(f"CUDA_LAUNCH_BLOCKING=1 TORCH_USE_CUDA_DSA=1 python {script}")
    return commands


def explanation(
    fault: CudaFault,
    site: FaultSite,
    *,
    failure: Path,
    crash: Path | None,
    commands: Sequence[str],
    exit_code: int,
) -> str:
    """The block we print last: what faulted, where, which images, what to run next, the exit code."""
    ids = ", ".join(site.image_ids[:16]) + (" ..." if len(site.image_ids) > 16 else "")
    if fault.asynchronous:
        timing = (
            "CUDA reports a failed kernel at a later call that waits for the GPU, so the traceback above "
            "shows where the error was noticed, which can be after (and unrelated to) the operation that "
            "failed, and the batch in flight may not be the one whose kernel failed. With "
            "CUDA_LAUNCH_BLOCKING=1 every launch waits for its kernel and the traceback points at the "
            "failing operation (slow: for debugging only); the commands below set it."
        )
    else:
        timing = "The traceback above is where the failing call was made" + (
            " (CUDA_LAUNCH_BLOCKING=1 was set)." if os.environ.get("CUDA_LAUNCH_BLOCKING") == "1" else "."
        )
    lines = [
        f"CUDA FAULT: {fault.kind}, {fault.summary}",
        f"  where:   {site.describe()}",
        f"  images:  {ids or '(no batch on the host)'}",
        f"  timing:  {timing}",
        f"  report:  {failure}" + (f" and the crash bundle {crash}" if crash is not None else ""),
        "  next:    " + "\n           ".join(commands),
        f"  exit:    code {exit_code}, without Lightning's teardown or any other CUDA call ({DOCS})",
    ]
    return "\n".join(lines)


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
    """Ends this process for one CUDA fault with ``code``: :meth:`arm` at once (the process ends within
    ``deadline_s`` whatever blocks), :meth:`finish` when the hooks are done; ``closing`` is logged last."""

    def __init__(self, *, code: int, closing: Sequence[Closing], deadline_s: float) -> None:
        self.code = code
        self.closing = list(closing)
        self.deadline_s = deadline_s
        self._timer: threading.Timer | None = None

    @classmethod
    def for_fault(
        cls, fault: CudaFault, site: FaultSite, *, run_dir: Path, crash: Path | None, trainer_fn: str | None
    ) -> FaultExit:
        """The exit for ``fault``: it closes with the first CUDA error's traceback and the explanation."""
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
    """For the entry decorator: end the process here when ``exception`` holds a CUDA fault, writing
    ``.FAILURE`` (the first CUDA error) unless the run did; a later error goes to the log file only."""
    fault = find_cuda_fault(exception)
    if fault is None:
        return
    ending = _active
    if ending is None:  # the fault was not seen inside the trainer (or no guard callback ran)
        rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        site = FaultSite(None, None, None, None, rank, world_size, ())
        ending = FaultExit.for_fault(fault, site, run_dir=run_dir, crash=None, trainer_fn=None).arm()
        log.error(headline(fault, site, ending.code))
    if fault.exception is not exception:
        log_file_only(
            error_record("Raised after the CUDA fault, on the dead context (not the cause):", exception)
        )
    if not failure_written(run_dir):
        record_failure(run_dir, fault.exception)
    ending.finish()


def end_process(code: int, closing: Sequence[Closing]) -> NoReturn:
    """Kill child processes (DataLoader workers), log ``closing``, flush every handler, ``os._exit``."""
    pids = _kill_children()
    if pids:
        log.info("Ending the process: killed the child processes (DataLoader workers): pids %s", pids)
    for line in closing:
        log.handle(error_record(*line))
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(OSError, ValueError):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    _hard_exit(code)


def log_file_only(record: logging.LogRecord) -> None:
    """Write ``record`` to the log files (Hydra's ``<task>.log``), not to the console."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


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
    for handler in logging.getLogger().handlers:
        stream: Any = getattr(handler, "stream", None)
        try:
            targets.append((handler, stream.fileno()))
        except (AttributeError, OSError, ValueError):  # no stream, or one without a descriptor
            continue
    for record in records:
        lines = [(fd, handler.format(record)) for handler, fd in targets] or [(2, record.getMessage())]
        for fd, text in lines:
            with contextlib.suppress(OSError):
                os.write(fd, (text + "\n").encode(errors="replace"))


def _hard_exit(code: int) -> NoReturn:
    os._exit(code)
