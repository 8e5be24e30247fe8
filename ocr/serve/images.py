"""Images the web app works on: uploads checked and stored by content, and the images of a labelled split.

An upload is written to the app's folder under its content hash and read back with the same decoder as
training and prediction (``ocr.data.images``), so a file that is not an image, a corrupt one, or one
larger than Pillow's decompression-bomb limit is refused with a message naming the file and why.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from ocr.data.images import IMAGE_SUFFIXES, ImageReadError, read_header
from ocr.evaluation.host_work import GroundTruth
from ocr.utils.errors import UsageError
from ocr.utils.io import atomic_write_bytes

__all__ = [
    "MAX_UPLOAD_BYTES",
    "ServedImage",
    "UploadError",
    "image_key",
    "safe_file_name",
    "store_upload",
]

MAX_UPLOAD_BYTES = 64 * 2**20


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


def image_key(data: bytes) -> str:
    """A short content hash: the same bytes uploaded twice are one image (and one cached map)."""
    return hashlib.sha256(data).hexdigest()[:16]


def safe_file_name(name: str) -> str:
    """``name``'s last component with characters other than letters, digits, ``.``, ``_``, ``-`` replaced
    by ``_`` (never empty, never hidden)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", Path(name).name).lstrip(".")
    return cleaned or "upload"


def store_upload(data: bytes, name: str, directory: Path) -> tuple[str, ServedImage]:
    """Check an uploaded file and store it as ``directory/<key>/<name>`` (a folder of its own, that
    ``runners/predict.py image_dir=`` can be pointed at); returns its key and image.

    Raises:
        UploadError: empty, larger than ``MAX_UPLOAD_BYTES``, not an image Pillow reads, corrupt, or more
            pixels than Pillow's decompression-bomb limit.
    """
    if not data:
        raise UploadError(f"{name}: empty file (0 bytes), expected an image")
    if len(data) > MAX_UPLOAD_BYTES:
        raise UploadError(f"{name}: {len(data) / 2**20:.0f} MiB, over the upload limit of 64 MiB")
    key = image_key(data)
    path = atomic_write_bytes(directory / key / safe_file_name(name), data)
    try:
        _check_pixels(path, name)
        header = read_header(path)
    except (UploadError, ImageReadError) as exc:
        _remove(path)
        if isinstance(exc, UploadError):
            raise
        reason = str(exc).removeprefix(f"{path}: ").replace(f" '{path}'", "")
        if "cannot identify image file" in reason:
            reason = "not an image (Pillow does not recognise its format)"
        raise UploadError(f"{name}: {reason}; expected an image ({', '.join(IMAGE_SUFFIXES)})") from None
    return key, ServedImage(path, name, header.orig_width, header.orig_height)


def _check_pixels(path: Path, name: str) -> None:
    """Refuse an image with more pixels than Pillow's decompression-bomb limit before any is decoded
    (Pillow itself refuses only twice that, and only warns between).

    Raises:
        UploadError: naming the size and the limit.
    """
    limit = Image.MAX_IMAGE_PIXELS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            with Image.open(path) as im:
                width, height = im.size
        except Image.DecompressionBombError as exc:
            raise UploadError(
                f"{name}: {exc} (Pillow's decompression-bomb guard); downscale it first"
            ) from None
        except (OSError, SyntaxError, ValueError):
            return  # read_header says what is wrong with it
    if limit is not None and width * height > limit:
        raise UploadError(
            f"{name}: {width} x {height} px is over the limit of {limit / 1e6:.0f} Mpx (Pillow's "
            "decompression-bomb guard); downscale it first"
        )


def _remove(path: Path) -> None:
    """Delete a refused upload and its folder (when a same-content upload did not already fill it)."""
    path.unlink(missing_ok=True)
    if not any(path.parent.iterdir()):
        path.parent.rmdir()
