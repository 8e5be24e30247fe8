"""An output folder this process can write, checked before anything is written into it.

Hydra creates the run directory and writes ``.hydra/`` into it before a runner starts, so a read-only
folder used to end in a raw ``PermissionError`` traceback from Hydra's own code. :class:`OutputDirCheck`
(a Hydra callback, ``hydra.callbacks`` in configs/hydra/default.yaml) checks the run or sweep directory
first and stops with one line naming the key; the runners' ``run_dir`` checks ``paths.output_dir`` the
same way (:func:`writable_dir`).
"""

from __future__ import annotations

import errno
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ocr.utils.cli import exit_with_message
from ocr.utils.errors import OutputDirError

__all__ = ["OutputDirCheck", "writable_dir"]

log = logging.getLogger(__name__)


def writable_dir(path: str | os.PathLike[str], key: str, *, create: bool) -> Path:
    """Check that files can be written in the folder ``path`` (created when ``create``; else nothing is
    left behind: a missing folder's nearest existing parent must take a new folder).

    Args:
        path: the folder.
        key: the config key that set it, named in the error.
        create: create the folder (and its parents) when missing.

    Raises:
        OutputDirError: the folder cannot be created or written, naming the key, the folder and why.
    """
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
    """Hydra callback: the run (or sweep) directory is writable before Hydra writes into it; else the run
    stops with the message alone and exit status 1 (the traceback with ``HYDRA_FULL_ERROR=1``)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config.hydra.run.dir, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config.hydra.sweep.dir, "hydra.sweep.dir")

    @staticmethod
    def _check(directory: str, key: str) -> None:
        try:
            writable_dir(directory, key, create=False)  # Hydra creates it next
        except OutputDirError as exc:
            exit_with_message(exc, exc)
