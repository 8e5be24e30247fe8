"""Atomic file writes: a temp file in the destination directory, fsync, then rename."""

from __future__ import annotations

import csv
import errno
import io
import json
import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ocr.machine.environment import free_bytes
from ocr.utils.errors import UsageError

__all__ = [
    "DiskFullError",
    "atomic_write_bytes",
    "atomic_write_csv",
    "atomic_write_json",
    "atomic_write_text",
    "disk_full_error",
    "format_mib",
    "is_out_of_space",
    "remove_stale_temp_files",
]

log = logging.getLogger(__name__)

# ENOSPC: the disk is full; EDQUOT: the user's quota is.
OUT_OF_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
TEMP_SUFFIX = ".tmp"


class DiskFullError(UsageError, OSError):
    """A write failed for lack of disk space; the message names the file, the free space and the fix."""


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically, creating parent directories first (DiskFullError when the
    disk or quota is full, the temp file removed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; outputs are meant to be shared
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if is_out_of_space(exc):
            raise disk_full_error(path, len(data)) from None
        raise
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 text atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_csv(path: str | os.PathLike[str], rows: Iterable[Iterable[Any]]) -> Path:
    """Write CSV rows (``\\n`` line ends) atomically."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return atomic_write_text(path, buffer.getvalue())


def atomic_write_json(path: str | os.PathLike[str], obj: Any, indent: int | None = 2) -> Path:
    """Write JSON atomically; non-JSON values (paths, numpy scalars) are stringified."""
    text = json.dumps(obj, indent=indent, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v))
    return atomic_write_text(path, text + "\n")


def is_out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` is an OS error for a full disk or quota."""
    return isinstance(exc, OSError) and exc.errno in OUT_OF_SPACE_ERRNOS


def disk_full_error(path: str | os.PathLike[str], needed_bytes: int | None) -> DiskFullError:
    """The error for a write of ``path`` that ran out of space (free space measured now)."""
    free, folder = free_bytes(Path(path).parent)
    needed = f"about {format_mib(needed_bytes)} needed, " if needed_bytes else ""
    return DiskFullError(
        errno.ENOSPC,
        f"No space left on the disk to write {path}: {needed}{format_mib(free)} free in {folder} "
        "(the partial file was removed). Free some space, or write the run elsewhere with "
        "hydra.run.dir=<folder on a larger disk>",
    )


def remove_stale_temp_files(directory: str | os.PathLike[str]) -> list[Path]:
    """Delete the ``*.tmp`` files an interrupted write left in ``directory`` (not recursive)."""
    removed = []
    for tmp in sorted(Path(directory).glob(f"*{TEMP_SUFFIX}")):
        if tmp.is_file():
            size = tmp.stat().st_size
            tmp.unlink(missing_ok=True)
            log.warning("Removed %s (%s) left by an interrupted write", tmp, format_mib(size))
            removed.append(tmp)
    return removed


def format_mib(num_bytes: int) -> str:
    """``num_bytes`` as ``"12.3 MiB"``."""
    return f"{num_bytes / 2**20:.1f} MiB"
