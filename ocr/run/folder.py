"""The run folder: one owner (``.lock``), the run's identity (``run.json``), status sentinels, the claim.

The launching process takes ``<run>/.lock`` before it writes anything there and removes it at exit; a
second process refuses, naming the owner. A lock whose owner is gone (same host and the pid is not running
or was reused, or the same SLURM job requeued) is taken over with a warning; a live or remote owner's is
never broken. ``run.json`` holds a training run's ``run_id``; the sentinels say how the run ended:
``.SUCCESS``, ``.FAILURE`` (exception + traceback) or ``.INTERRUPTED`` (stopped by a signal, resumable).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import logging
import os
import socket
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict

from ocr.checkpoints.resume import START_AGAIN, Resume, refuse_file_resume, resume_from_command_line
from ocr.checkpoints.world_size import check_world_size
from ocr.utils.errors import OutputDirError, RunRefusedError
from ocr.utils.io import atomic_write_json, atomic_write_text

__all__ = [
    "LOCK_NAME",
    "RUN_RECORD",
    "OutputDirCheck",
    "RunClaim",
    "RunFolderBusyError",
    "RunLock",
    "claim_run",
    "clear_sentinels",
    "failure_written",
    "interrupted_exit_code",
    "is_launching_process",
    "process_start",
    "read_run_id",
    "record_failure",
    "writable_dir",
    "write_interrupted",
    "write_run_record",
    "write_success",
    "written_by_this_process",
]

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
RUN_RECORD = "run.json"
# Set to a rank other than 0 in the processes a distributed launch starts besides the launching one.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID")
STARTED = time.time()  # this process's start, near enough: the runners import this module first
_failures_written: set[Path] = set()  # .FAILURE files this process wrote
_interruptions_written: dict[Path, int] = {}  # .INTERRUPTED files this process wrote, with the exit code


class RunFolderBusyError(RunRefusedError):
    """The run folder is owned by another live process."""


@dataclass(frozen=True)
class LockOwner:
    """The process that owns a run folder, as written in its lock file."""

    pid: int
    host: str
    started: str  # when it took the lock (UTC, ISO 8601)
    process_start: str | None  # the pid's start time in clock ticks (Linux), to tell a reused pid
    slurm_job: str | None
    slurm_restart: int
    command: str

    @classmethod
    def this_process(cls) -> LockOwner:
        """This process."""
        return cls(
            pid=os.getpid(),
            host=socket.gethostname(),
            started=_now(),
            process_start=process_start(os.getpid()),
            slurm_job=os.environ.get("SLURM_JOB_ID"),
            slurm_restart=int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0),
            command=" ".join(sys.argv),
        )

    def same_process(self, other: LockOwner) -> bool:
        """True when both name one process (pid, host and start time)."""
        return (self.pid, self.host, self.process_start) == (other.pid, other.host, other.process_start)

    def describe(self) -> str:
        """``pid 123 on host gpu01 since <time> (SLURM job 42) running: <command>``."""
        job = f" (SLURM job {self.slurm_job})" if self.slurm_job else ""
        return f"pid {self.pid} on host {self.host} since {self.started}{job} running: {self.command}"

    def gone_because(self, successor: LockOwner) -> str | None:
        """Why this owner is known to be gone, as ``successor`` (the process that would take over) sees it,
        or None when it may still be running."""
        if self.slurm_job and self.slurm_job == successor.slurm_job:
            if successor.slurm_restart > self.slurm_restart:
                return (
                    f"SLURM job {self.slurm_job} was requeued (restart {self.slurm_restart} -> "
                    f"{successor.slurm_restart}): its earlier run has ended"
                )
        if self.host != successor.host:
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return f"process {self.pid} is not running"
        except PermissionError:  # another user's live process
            return None
        if self.process_start is not None and process_start(self.pid) != self.process_start:
            return f"pid {self.pid} now belongs to another process"
        return None


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux ``/proc``), None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def is_launching_process() -> bool:
    """False in a process that a distributed launch started besides the launching one (a rank other than
    0 in ``RANK``, ``LOCAL_RANK``, ``NODE_RANK``, ``GROUP_RANK`` or ``SLURM_PROCID``)."""
    return all(os.environ.get(name, "0") == "0" for name in RANK_VARIABLES)


def _read_owner(path: Path) -> LockOwner | None:
    """The owner in lock file ``path``, None when there is none; RunFolderBusyError when it names none."""
    try:
        return LockOwner(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise RunFolderBusyError(
            f"{path.parent} is a file, not a run folder: the run's folder (hydra.run.dir, or resume=) must "
            "be a directory"
        ) from None
    except (OSError, ValueError, TypeError) as exc:
        raise RunFolderBusyError(
            f"{path}: a run-folder lock that names no owner ({type(exc).__name__}: {exc}); if no process "
            "uses this folder, delete that file"
        ) from None


@contextlib.contextmanager
def _folder_mutex(folder: Path) -> Iterator[None]:
    """Serialise lock decisions in ``folder`` between processes (``flock``, where the file system has it:
    two processes that both find a stale lock must not both take it over)."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # e.g. NFS refuses flock on a read-only descriptor: go on
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


class RunLock:
    """The lock file of one run folder, held by this process from :meth:`acquire` until :meth:`release`
    (registered to run at exit)."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.owner = LockOwner.this_process()

    def acquire(self) -> None:
        """Own the run folder (created if missing); RunFolderBusyError, writing nothing, when another
        live process (or one that cannot be checked: another host) owns it."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with _folder_mutex(self.run_dir):
            stale = self.refuse_if_busy()
            if stale is not None:
                owner, reason = stale
                log.warning(
                    "Run folder %s: taking over the lock of %s: %s", self.run_dir, owner.describe(), reason
                )
            atomic_write_json(self.path, asdict(self.owner))
        atexit.register(self.release)

    def refuse_if_busy(self) -> tuple[LockOwner, str] | None:
        """RunFolderBusyError as :meth:`acquire` would, writing nothing; else the owner of a lock this
        process may take over and why (None: no lock, or this process's)."""
        current = _read_owner(self.path)
        if current is None or current.same_process(self.owner):
            return None
        reason = current.gone_because(self.owner)
        if reason is None:
            raise RunFolderBusyError(
                f"{self.run_dir} is in use by {current.describe()}. One process per run folder: wait for it "
                "to end or choose another hydra.run.dir (a resume waits until the run has stopped); if that "
                f"process is gone for sure (its machine crashed), delete {self.path}"
            )
        return current, reason

    def release(self) -> None:
        """Remove the lock file if this process still owns it."""
        with contextlib.suppress(OSError, RunFolderBusyError):
            current = _read_owner(self.path)
            if current is not None and current.same_process(self.owner):
                self.path.unlink()


def read_run_id(run_dir: str | os.PathLike[str]) -> str | None:
    """The identity in ``<run_dir>/run.json``; None for a folder without one (ValueError: not a record)."""
    path = Path(run_dir) / RUN_RECORD
    try:
        run_id = json.loads(path.read_text())["run_id"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path}: expected a run record with a run_id, got {type(exc).__name__}: {exc}"
        ) from None
    return str(run_id)


def write_run_record(run_dir: str | os.PathLike[str], run_id: str) -> Path:
    """Write ``<run_dir>/run.json`` with ``run_id`` and where and when the run started."""
    owner = LockOwner.this_process()
    return atomic_write_json(
        Path(run_dir) / RUN_RECORD,
        {"run_id": run_id, "started": owner.started, "host": owner.host, "slurm_job": owner.slurm_job},
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _write_status(run_dir: str | Path, name: str, text: str, *stale: str) -> Path:
    """Write the sentinel ``run_dir/name`` (``<time> text``), then remove the ``stale`` ones."""
    path = atomic_write_text(Path(run_dir) / name, f"{_now()} {text}")
    for other in stale:
        (Path(run_dir) / other).unlink(missing_ok=True)
    return path


def write_failure(run_dir: str | Path, exception: BaseException) -> Path:
    """Write ``run_dir/.FAILURE`` with the exception and its traceback (creates ``run_dir``); a ``.SUCCESS``
    goes (e.g. fit succeeded, then the test failed)."""
    trace = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    path = _write_status(
        run_dir, ".FAILURE", f"{type(exception).__name__}: {exception}\n\n{trace}", ".SUCCESS"
    )
    _failures_written.add(path.resolve())
    log.error("Run failed: %s: %s (report: %s)", type(exception).__name__, exception, path)
    return path


def record_failure(run_dir: str | Path, exception: BaseException) -> None:
    """:func:`write_failure`; a failure to write (a full disk) is one line, not a chained traceback."""
    try:
        write_failure(run_dir, exception)
    except OSError as error:
        log.error("Could not write %s: %s", Path(run_dir) / ".FAILURE", error)


def write_success(run_dir: str | Path, summary: str) -> Path:
    """Write ``run_dir/.SUCCESS`` and remove a stale ``.FAILURE`` or ``.INTERRUPTED``."""
    return _write_status(run_dir, ".SUCCESS", f"{summary}\n", ".FAILURE", ".INTERRUPTED")


def write_interrupted(run_dir: str | Path, summary: str, exit_code: int) -> Path:
    """Write ``run_dir/.INTERRUPTED`` in place of another status; the process is to exit with
    ``exit_code`` (128 + the signal number, as a shell reports it)."""
    path = _write_status(run_dir, ".INTERRUPTED", f"{summary}\n", ".SUCCESS", ".FAILURE")
    _interruptions_written[path.resolve()] = exit_code
    return path


def interrupted_exit_code(run_dir: str | Path) -> int | None:
    """The exit code of the interruption this process recorded in ``run_dir``, None when it recorded none."""
    return _interruptions_written.get((Path(run_dir) / ".INTERRUPTED").resolve())


def failure_written(run_dir: str | Path) -> bool:
    """True when this run already reported its failure: this process wrote ``.FAILURE``, or another process
    of the same run (a DDP rank) did since this one started; one left by an earlier attempt does not count."""
    path = (Path(run_dir) / ".FAILURE").resolve()
    try:
        return path in _failures_written or path.stat().st_mtime >= STARTED
    except OSError:
        return False


def written_by_this_process(run_dir: str | Path) -> bool:
    """True when this process wrote ``run_dir/.FAILURE`` (another rank's report is not)."""
    return (Path(run_dir) / ".FAILURE").resolve() in _failures_written


def clear_sentinels(run_dir: str | Path) -> None:
    """Remove the status an earlier attempt of ``run_dir`` left (a resume starts)."""
    for name in (".SUCCESS", ".FAILURE", ".INTERRUPTED"):
        path = Path(run_dir) / name
        if path.exists():
            log.info("Removing %s from the run's earlier attempt", path)
            path.unlink(missing_ok=True)


def writable_dir(path: str | os.PathLike[str], key: str, *, create: bool) -> Path:
    """Check that files can be written in the folder ``path`` (created when ``create``; else nothing is left
    behind); OutputDirError names ``key``, the folder and why."""
    path = Path(path)
    existing = path
    try:
        if create:
            path.mkdir(parents=True, exist_ok=True)
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "a file is in the way", str(existing))
        if existing == path:
            with tempfile.TemporaryFile(dir=path):
                pass
        else:  # a probe folder, removed at once: the missing folders could be created there
            os.rmdir(tempfile.mkdtemp(dir=existing))
    except OSError as exc:
        reason = (exc.strerror or type(exc).__name__).lower()
        raise OutputDirError(
            f"{key}={path}: expected a folder this process can create and write files in, but "
            f"{existing}: {reason}; pass {key}=<a writable folder>"
        ) from exc
    return path


class OutputDirCheck(Callback):
    """Hydra callback: the run (or sweep) directory is writable before Hydra creates it (its own mkdir
    would end in a raw traceback); else one line and exit status 1."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config.hydra.run.dir, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config.hydra.sweep.dir, "hydra.sweep.dir")

    @staticmethod
    def _check(directory: str, key: str) -> None:
        try:
            writable_dir(directory, key, create=False)
        except OutputDirError as exc:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            log.error("%s", exc)
            raise SystemExit(1) from None


@dataclass
class RunClaim:
    """A run this process may write: its folder, identity (training runs), the resume it continues (None:
    a new run) and its lock (None in a rank other than 0 of a distributed run)."""

    run_dir: Path
    run_id: str | None
    resume: Resume | None
    lock: RunLock | None

    def release(self) -> None:
        """Give the folder up (the lock file is removed)."""
        if self.lock is not None:
            self.lock.release()


def _occupant(run_dir: Path) -> str | None:
    """What shows that ``run_dir`` holds a run (Hydra's ``.hydra/`` and log file do not), or None."""
    found = [name for name in (RUN_RECORD, "config.yaml", "metrics.json") if (run_dir / name).is_file()]
    if any((run_dir / "checkpoints").glob("*.ckpt")):
        found.append("checkpoints/*.ckpt")
    if not found:
        return None
    run_id = read_run_id(run_dir)
    return f"run {run_id} ({', '.join(found)})" if run_id else f"a run ({', '.join(found)})"


def _refuse_occupied(run_dir: Path) -> None:
    occupant = _occupant(run_dir)
    if occupant is None:
        return
    resumable = any((run_dir / "checkpoints").glob("*.ckpt")) or any(run_dir.glob("hpc_ckpt_*.ckpt"))
    if not resumable:
        raise RunRefusedError(
            f"{run_dir} holds {occupant}: a new run never writes into another run's folder, and that run "
            "has no checkpoint to resume (killed before its first one?): "
            + START_AGAIN.format(run_dir=run_dir)
        )
    raise RunRefusedError(
        f"{run_dir} holds {occupant}: a new run never writes into another run's folder. Resume it "
        f"(resume={run_dir}), choose another hydra.run.dir, or delete the folder to start over"
    )


def claim_run(cfg: DictConfig, *, training: bool, check: Callable[[DictConfig], None]) -> RunClaim:
    """Claim the run folder ``cfg.paths.output_dir``: every refusal first (RunRefusedError or
    FileNotFoundError), then ``check`` on the config, and only then the first write (lock, ``run.json``)."""
    run_dir = Path(cfg.paths.output_dir).resolve()
    lock = RunLock(run_dir) if is_launching_process() else None
    resume = None
    if training:
        if cfg.get("run_id") is not None:
            raise RunRefusedError(
                f"run_id={cfg.run_id}: the run's identity is set by the runner, not the command line"
            )
        refuse_file_resume(cfg.get("resume"))  # before the lock, which would look for <file>/.lock
    if lock is not None:
        lock.refuse_if_busy()
        if not run_dir.is_file():  # a file is named by the lock ("is a file, not a run folder")
            writable_dir(run_dir, "paths.output_dir", create=False)
    if training:
        resume = resume_from_command_line(cfg, read_run_id(run_dir) if run_dir.is_dir() else None)
        if resume is not None:
            allow = bool(resume.config.resume_allow_world_size_change)
            check_world_size(resume.world_size, resume.config, resume.checkpoint, allow)
        elif lock is not None:
            _refuse_occupied(run_dir)
    check(resume.config if resume is not None else cfg)
    if lock is not None:
        lock.acquire()
    run_id = None
    if training:
        run_id = (
            read_run_id(run_dir) or (resume.run_id if resume is not None else None) or uuid.uuid4().hex[:12]
        )
        if lock is not None and not (run_dir / RUN_RECORD).is_file():
            write_run_record(run_dir, run_id)
    return RunClaim(run_dir, run_id, resume, lock)


def run_config(cfg: DictConfig, claim: RunClaim) -> DictConfig:
    """The config a training run runs: the resumed run's own, or ``cfg``; with ``run_id`` set."""
    config = claim.resume.config if claim.resume is not None else cfg
    with open_dict(config):
        config.run_id = claim.run_id
    return config
