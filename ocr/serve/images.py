"""Images the web app works on: uploads checked and stored by content, and the images of a labelled split.

An upload is streamed to a hidden file (refused once it passes the size limit), stored under its content
hash, and checked with the decoder of training and prediction (``ocr.data.images``). A name without an
image suffix gets its format's, so that ``runners/predict.py image_dir=`` finds it.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from PIL import Image

from ocr.data.images import IMAGE_SUFFIXES, ImageReadError, read_header
from ocr.evaluation.host_work import GroundTruth
from ocr.utils.errors import UsageError
from ocr.utils.io import TEMP_SUFFIX, disk_full_error, is_out_of_space

__all__ = ["MAX_UPLOAD_BYTES", "ServedImage", "UploadError", "UploadSpool", "store_upload"]

MAX_UPLOAD_BYTES = 64 * 2**20
MAX_NAME_CHARS = 200  # file systems allow 255 bytes; the suffix and temp names need the rest
# The suffix an upload named without one gets, by the format Pillow finds (those predict lists).
FORMAT_SUFFIXES = {"JPEG": ".jpg", "PNG": ".png", "BMP": ".bmp", "TIFF": ".tif", "WEBP": ".webp"}


class UploadError(UsageError, ValueError):
    """An uploaded file the app cannot use; the message names it and says why."""


@dataclass(frozen=True)
class ServedImage:
    """An image the page can show: its file, the name the user knows it by, and its labels if any."""

    path: Path
    name: str
    width: int = 0  # original px after EXIF orientation
    height: int = 0
    truth: GroundTruth | None = field(default=None, repr=False)


def safe_file_name(name: str) -> str:
    """``name``'s last component with characters other than letters, digits, ``.``, ``_``, ``-`` replaced
    by ``_`` (never empty, never hidden)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", Path(name).name).lstrip(".")
    return cleaned or "upload"


class UploadSpool:
    """An upload as it arrives: written to a hidden temp file in ``directory`` and hashed chunk by chunk,
    refused once it (or its ``declared`` Content-Length) passes ``MAX_UPLOAD_BYTES``; the temp file is
    removed when the ``with`` block raises, :func:`store_upload` keeps it."""

    def __init__(self, directory: Path, name: str, declared: int | None) -> None:
        if len(name) > MAX_NAME_CHARS:
            raise UploadError(
                f"name: expected a file name of at most {MAX_NAME_CHARS} characters, got {len(name)}"
            )
        if declared is not None and declared > MAX_UPLOAD_BYTES:
            raise UploadError(f"{name}: {declared / 2**20:.0f} MiB, over the upload limit of 64 MiB")
        self.name = name
        self.size = 0
        self._hash = hashlib.sha256()
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".upload.", suffix=TEMP_SUFFIX)
        self.path = Path(tmp)
        self._file = os.fdopen(fd, "wb")

    def __enter__(self) -> UploadSpool:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._file.close()
        if exc is not None:
            self.path.unlink(missing_ok=True)

    def write(self, chunk: bytes) -> None:
        """Append ``chunk`` (UploadError over the limit, DiskFullError on a full disk)."""
        self.size += len(chunk)
        if self.size > MAX_UPLOAD_BYTES:
            raise UploadError(f"{self.name}: over the upload limit of 64 MiB (refused after 64 MiB)")
        self._hash.update(chunk)
        try:
            self._file.write(chunk)
        except OSError as exc:
            if is_out_of_space(exc):
                raise disk_full_error(self.path, None) from None
            raise

    @property
    def key(self) -> str:
        """A short content hash: the same bytes uploaded twice are one image (and one cached map)."""
        return self._hash.hexdigest()[:16]


def store_upload(spool: UploadSpool, directory: Path) -> tuple[str, ServedImage]:
    """Check a received upload and move it to ``directory/<key>/<name>`` (a folder for ``predict
    image_dir=``); returns its key and image. A refused one (UploadError) is removed."""
    name, path = spool.name, spool.path
    try:
        if not spool.size:
            raise UploadError(f"{name}: empty file (0 bytes), expected an image")
        image_format = _check_pixels(path, name)
        header = read_header(path)
        stored = directory / spool.key / _stored_name(name, image_format)
        stored.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o644)  # mkstemp creates 0600; uploads are read as any other input
        os.replace(path, stored)
    except (UploadError, ImageReadError) as exc:
        path.unlink(missing_ok=True)
        if isinstance(exc, UploadError):
            raise
        reason = str(exc).removeprefix(f"{path}: ").replace(f" '{path}'", "")
        if "cannot identify image file" in reason:
            reason = "not an image (Pillow does not recognise its format)"
        raise UploadError(f"{name}: {reason}; expected an image ({', '.join(IMAGE_SUFFIXES)})") from None
    return spool.key, ServedImage(stored, name, header.orig_width, header.orig_height)


def _stored_name(name: str, image_format: str | None) -> str:
    """``name`` made safe, with the suffix of ``image_format`` when it has no image suffix."""
    safe = safe_file_name(name)
    if Path(safe).suffix.lower() in IMAGE_SUFFIXES:
        return safe
    suffix = FORMAT_SUFFIXES.get(image_format or "")
    if suffix is None:
        raise UploadError(
            f"{name}: a {image_format or 'unknown'} image; expected one of {', '.join(IMAGE_SUFFIXES)} "
            "(the formats runners/predict.py reads)"
        )
    return safe + suffix


def _check_pixels(path: Path, name: str) -> str | None:
    """Refuse more pixels than Pillow's decompression-bomb limit before any is decoded (Pillow itself
    refuses only twice that); returns the format (None: not recognised, read_header says why)."""
    limit = Image.MAX_IMAGE_PIXELS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            with Image.open(path) as im:
                width, height = im.size
                image_format = im.format
        except Image.DecompressionBombError as exc:
            raise UploadError(
                f"{name}: {exc} (Pillow's decompression-bomb guard); downscale it first"
            ) from None
        except (OSError, SyntaxError, ValueError):
            return None
    if limit is not None and width * height > limit:
        raise UploadError(
            f"{name}: {width} x {height} px is over the limit of {limit / 1e6:.0f} Mpx (Pillow's "
            "decompression-bomb guard); downscale it first"
        )
    return image_format
