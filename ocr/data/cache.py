"""On-disk cache of decoded and resized images, keyed so that a stale entry can never be used.

Entries live under ``<directory>/<fingerprint[:16]>/`` (:func:`cache_fingerprint`: the annotation file,
the transform config and the source of ``ocr/data/*.py``); an entry's name also hashes the image id and
the source file's size and mtime. The scan that fills a folder holds its lock (:meth:`ImageCache.filling`),
so the ranks of a node fill it once. The cache belongs on a node's local disk.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import logging
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from ocr.utils.io import atomic_write_bytes

__all__ = ["ImageCache", "cache_fingerprint", "code_version"]

log = logging.getLogger(__name__)

_DATA_PACKAGE = Path(__file__).resolve().parent
RESERVE_BYTES = 5 * 2**30  # the cache never leaves less than this free on its disk
LOCK_NAME = ".filling.lock"


def cache_fingerprint(annotation_path: str | Path | None, transform_config: Mapping[str, Any]) -> str:
    """Hex sha256 over the annotation file bytes (None for predict), ``transform_config`` (JSON with sorted
    keys) and :func:`code_version`."""
    digest = hashlib.sha256()
    digest.update(b"annotations\0")
    digest.update(Path(annotation_path).read_bytes() if annotation_path is not None else b"\0none\0")
    digest.update(b"\0transform\0")
    digest.update(json.dumps(_plain(transform_config), sort_keys=True, default=repr).encode())
    digest.update(b"\0code\0")
    digest.update(code_version().encode())
    return digest.hexdigest()


def code_version() -> str:
    """Hex sha256 of the names and sources of ``ocr/data/*.py`` (the code that makes cached pixels)."""
    digest = hashlib.sha256()
    for path in sorted(_DATA_PACKAGE.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class ImageCache:
    """Decoded+resized images as ``.npy`` files under ``directory/fingerprint[:16]/``."""

    def __init__(self, directory: str | Path, fingerprint: str, reserve_bytes: int = RESERVE_BYTES) -> None:
        """Use the cache folder of ``fingerprint`` under ``directory`` (created on first save); entries
        that would leave less than ``reserve_bytes`` free on its disk are not written (counted in
        ``skipped``, one warning): a large dataset fills the cache as far as the disk allows."""
        self.directory = Path(directory) / fingerprint[:16]
        self.reserve_bytes = int(reserve_bytes)
        self.skipped = 0

    def path(self, image_id: str, source: str | Path | None = None) -> Path:
        """File of an entry; ``source`` (the image file) adds its size and mtime to the key."""
        key = image_id
        if source is not None:
            stat = Path(source).stat()
            key = f"{image_id}\0{stat.st_size}\0{stat.st_mtime_ns}"
        return self.directory / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.npy"

    @contextmanager
    def filling(self) -> Iterator[None]:
        """Hold the folder's lock while filling it (a scan); another process waits for it, then finds the
        entries there. The lock goes with the process, also when it is killed. A folder that cannot be
        locked (read-only, a file system without locks) is filled without it, as every write is atomic."""
        handle: BinaryIO | None = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            handle = open(self.directory / LOCK_NAME, "a+b")
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError as exc:
            if handle is not None:
                handle.close()
            log.warning("image cache: cannot lock %s (%s); filling it without the lock", self.directory, exc)
            yield
            return
        try:
            yield
        finally:
            handle.close()  # releases the lock

    def load(self, image_id: str, source: str | Path | None = None) -> npt.NDArray[Any] | None:
        """The cached array (mapped copy-on-write: a crop copies only its part), or None on a miss or an
        unreadable entry."""
        try:
            return np.load(self.path(image_id, source), mmap_mode="c", allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return None

    def save(self, image_id: str, image: npt.NDArray[Any], source: str | Path | None = None) -> None:
        """Store ``image`` atomically; a failed write (race, full disk) is logged, never raised."""
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(image), allow_pickle=False)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(self.directory).free
            if free - buffer.tell() < self.reserve_bytes:
                if not self.skipped:
                    log.warning(
                        "image cache: %s has %.1f GiB free, under the %.1f GiB reserve; images from %r on "
                        "are decoded each time instead of cached",
                        self.directory,
                        free / 2**30,
                        self.reserve_bytes / 2**30,
                        image_id,
                    )
                self.skipped += 1
                return
            atomic_write_bytes(self.path(image_id, source), buffer.getvalue())
        except OSError as exc:
            log.warning("image cache: could not write %r to %s (%s)", image_id, self.directory, exc)


def _plain(value: Any) -> Any:
    """Mappings and sequences (OmegaConf containers included) as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(v) for v in value]
    return value
