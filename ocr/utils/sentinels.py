"""Run-status sentinels: ``.SUCCESS`` or ``.FAILURE`` (exception + traceback) in the run directory.

Standard library only, so a runner that fails before torch/Lightning are imported still reports quickly.
"""

from __future__ import annotations

import logging
import traceback
from datetime import datetime, timezone
from pathlib import Path

from ocr.utils.io import atomic_write_text

__all__ = ["write_failure", "write_success"]

log = logging.getLogger(__name__)


def write_failure(run_dir: str | Path, exception: BaseException) -> Path:
    """Write ``run_dir/.FAILURE`` with the exception and its traceback (creates ``run_dir``)."""
    trace = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    text = f"{_now()} {type(exception).__name__}: {exception}\n\n{trace}"
    path = atomic_write_text(Path(run_dir) / ".FAILURE", text)
    (Path(run_dir) / ".SUCCESS").unlink(missing_ok=True)  # e.g. fit succeeded, then the test failed
    log.error("Run failed: %s: %s (report: %s)", type(exception).__name__, exception, path)
    return path


def write_success(run_dir: str | Path, summary: str) -> Path:
    """Write ``run_dir/.SUCCESS`` and remove a stale ``.FAILURE`` from a resumed run."""
    path = atomic_write_text(Path(run_dir) / ".SUCCESS", f"{_now()} {summary}\n")
    (Path(run_dir) / ".FAILURE").unlink(missing_ok=True)
    return path


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
