"""One owner per run folder: a lock file naming the owning process, and the run's identity.

The process that starts a run takes ``<run>/.lock`` (pid, host, start time, command, SLURM job) before it
writes anything there and removes it at exit; a second process refuses at start, naming the owner. A lock
left by a process that is gone (``kill -9``, a crashed job) is taken over with a warning: same host and
the pid is not running (or now belongs to another process), or the same SLURM job started again after a
requeue (``SLURM_RESTART_COUNT`` grew; the earlier run may have been on another node). A lock of a live
process, or of another host outside such a requeue, is never broken. Only the launching process of a
distributed run owns the folder: the ranks it starts (``LOCAL_RANK``/``RANK``/``SLURM_PROCID`` other
than 0) take no lock.

``<run>/run.json`` holds the run's identity (``run_id``), written once when the run starts; checkpoints
carry it in their config, so a checkpoint of another run is told apart. Standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import socket
import sys
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from ocr.utils.errors import UsageError
from ocr.utils.io import atomic_write_json

__all__ = [
    "LOCK_NAME",
    "RUN_RECORD",
    "LockOwner",
    "RunFolderBusyError",
    "RunLock",
    "RunRefusedError",
    "is_launching_process",
    "new_run_id",
    "read_run_id",
    "write_run_record",
]

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
RUN_RECORD = "run.json"
# Set to a rank other than 0 in the processes a distributed launch starts besides the launching one.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID")


class RunRefusedError(UsageError):
    """A run refused at start, before it wrote anything into its folder (its status stays as it was)."""


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
            started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            process_start=_process_start(os.getpid()),
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
        if self.process_start is not None and _process_start(self.pid) != self.process_start:
            return f"pid {self.pid} now belongs to another process"
        return None


def _process_start(pid: int) -> str | None:
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
    """The owner in lock file ``path``, None when there is none.

    Raises:
        RunFolderBusyError: the file exists but does not name an owner (edited by hand, or another tool's).
    """
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
    """Serialise lock decisions in ``folder`` between processes (``flock`` on the folder, where the file
    system supports it: two processes that both find a stale lock must not both take it over)."""
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
        """Own the run folder (created if missing); again in the owning process is a no-op.

        Raises:
            RunFolderBusyError: naming the owner, when another live process (or one that cannot be
                checked: another host) owns the folder; nothing is written then.
        """
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._take()
        atexit.register(self.release)

    def refuse_if_busy(self) -> None:
        """Check without writing anything that this process may take the folder.

        Raises:
            RunFolderBusyError: naming the owner, as :meth:`acquire` would.
        """
        self._stale_owner()

    def _stale_owner(self) -> tuple[LockOwner, str] | None:
        """The owner of a lock this process may take over, and why; None when there is no lock or it is
        this process's."""
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

    def _take(self) -> None:
        with _folder_mutex(self.run_dir):
            stale = self._stale_owner()
            if stale is not None:
                owner, reason = stale
                log.warning(
                    "Run folder %s: taking over the lock of %s: %s", self.run_dir, owner.describe(), reason
                )
            atomic_write_json(self.path, asdict(self.owner))

    def release(self) -> None:
        """Remove the lock file if this process still owns it."""
        with contextlib.suppress(OSError, RunFolderBusyError):
            current = _read_owner(self.path)
            if current is not None and current.same_process(self.owner):
                self.path.unlink()


def new_run_id() -> str:
    """A new run identity."""
    return uuid.uuid4().hex[:12]


def read_run_id(run_dir: str | os.PathLike[str]) -> str | None:
    """The identity in ``<run_dir>/run.json``; None for a folder without one (no run, or one started before
    runs had an identity).

    Raises:
        ValueError: naming the file when it is not such a record.
    """
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
