"""Run-status sentinels: ``.SUCCESS``, ``.FAILURE`` (exception + traceback) or ``.INTERRUPTED`` (stopped
by a signal, resumable) in the run directory.

Standard library only, so a runner that fails before torch/Lightning are imported still reports quickly.
"""

from __future__ import annotations

import logging
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from ocr.utils.io import atomic_write_text

__all__ = [
    "clear_sentinels",
    "failure_written",
    "interrupted_exit_code",
    "write_failure",
    "write_interrupted",
    "write_success",
    "written_by_this_process",
]

log = logging.getLogger(__name__)

_STARTED = time.time()
_failures_written: set[Path] = set()  # .FAILURE files this process wrote
_interruptions_written: dict[Path, int] = {}  # .INTERRUPTED files this process wrote, with the exit code


def write_failure(run_dir: str | Path, exception: BaseException) -> Path:
    """Write ``run_dir/.FAILURE`` with the exception and its traceback (creates ``run_dir``)."""
    trace = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    text = f"{_now()} {type(exception).__name__}: {exception}\n\n{trace}"
    path = atomic_write_text(Path(run_dir) / ".FAILURE", text)
    _failures_written.add(path.resolve())
    (Path(run_dir) / ".SUCCESS").unlink(missing_ok=True)  # e.g. fit succeeded, then the test failed
    log.error("Run failed: %s: %s (report: %s)", type(exception).__name__, exception, path)
    return path


def write_success(run_dir: str | Path, summary: str) -> Path:
    """Write ``run_dir/.SUCCESS`` and remove a stale ``.FAILURE`` from a resumed run."""
    path = atomic_write_text(Path(run_dir) / ".SUCCESS", f"{_now()} {summary}\n")
    (Path(run_dir) / ".FAILURE").unlink(missing_ok=True)
    (Path(run_dir) / ".INTERRUPTED").unlink(missing_ok=True)
    return path


def write_interrupted(run_dir: str | Path, summary: str, exit_code: int) -> Path:
    """Write ``run_dir/.INTERRUPTED`` (a run stopped by a signal, which can resume) in place of another
    status; the process is to exit with ``exit_code`` (128 + the signal number, as a shell reports it)."""
    path = atomic_write_text(Path(run_dir) / ".INTERRUPTED", f"{_now()} {summary}\n")
    _interruptions_written[path.resolve()] = exit_code
    for name in (".SUCCESS", ".FAILURE"):
        (Path(run_dir) / name).unlink(missing_ok=True)
    return path


def interrupted_exit_code(run_dir: str | Path) -> int | None:
    """The exit code of the interruption this process recorded in ``run_dir``, None when it recorded none."""
    return _interruptions_written.get((Path(run_dir) / ".INTERRUPTED").resolve())


def failure_written(run_dir: str | Path) -> bool:
    """True when this run already reported its failure in ``run_dir/.FAILURE``: this process wrote it, or
    another process of the same run (a DDP rank) did since this one started; a ``.FAILURE`` left by an
    earlier run of a resumed directory does not count."""
    path = (Path(run_dir) / ".FAILURE").resolve()
    if path in _failures_written:
        return True
    try:
        return path.stat().st_mtime >= _STARTED
    except OSError:
        return False


def written_by_this_process(run_dir: str | Path) -> bool:
    """True when this process wrote ``run_dir/.FAILURE`` (another rank's report is not)."""
    return (Path(run_dir) / ".FAILURE").resolve() in _failures_written


def clear_sentinels(run_dir: str | Path) -> None:
    """Remove the status an earlier run of ``run_dir`` left (a resume starts)."""
    for name in (".SUCCESS", ".FAILURE", ".INTERRUPTED"):
        path = Path(run_dir) / name
        if path.exists():
            log.info("Removing %s from the run's earlier attempt", path)
            path.unlink(missing_ok=True)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
