"""Image decode: EXIF orientation, reduced-scale JPEG decode, and the EXIF rule for annotation frames.

``data.exif_mode``: ``rotated`` = annotations are in the upright frame; ``raw`` = in the stored-pixel
frame, mapped at load; ``auto`` = per image, the frame whose extents contain every polygon, ``rotated``
when both or neither fit (*ambiguous*).
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageFile

from ocr.geometry import apply_matrix
from ocr.utils.errors import UsageError

if TYPE_CHECKING:
    from ocr.types import Polygon

__all__ = [
    "EXIF_MODES",
    "IMAGE_SUFFIXES",
    "DecodedImage",
    "ImageReadError",
    "list_images",
    "orientation_matrix",
    "read_header",
    "read_image",
    "resolve_frame",
]

log = logging.getLogger(__name__)
_large_image_said = False  # the large-image line is logged once per process

EXIF_MODES = ("rotated", "raw", "auto")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
_ORIENTATION_TAG = 0x0112
_JPEG_REDUCTIONS = (8, 4, 2)
_SIXTEEN_BIT_GREY = ("I;16", "I;16L", "I;16B", "I;16N")
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


class ImageReadError(UsageError, OSError):
    """An image file is missing, unreadable or corrupt; the message names the file and why."""


@dataclass(frozen=True)
class DecodedImage:
    """A decoded, upright image: (H, W, 3) uint8 RGB, its full-resolution sizes after (``orig_``) and
    before (``raw_``) EXIF orientation, the tag (1..8) and ``decode_scale`` (1, 1/2, 1/4 or 1/8 decoded px
    per original px; the decoded size is ``ceil(orig * decode_scale)``)."""

    image: npt.NDArray[np.uint8]
    orig_width: int
    orig_height: int
    raw_width: int
    raw_height: int
    orientation: int
    decode_scale: float


def list_images(image_dir: Path) -> list[str]:
    """Image files under ``image_dir`` (recursive, suffix in ``IMAGE_SUFFIXES`` in any case), as sorted
    paths relative to it with ``/`` separators (the names annotation files use)."""
    return sorted(
        p.relative_to(image_dir).as_posix()
        for p in image_dir.rglob("*")
        if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
    )


def read_image(path: str | Path, min_long_side: int | None = None) -> DecodedImage:
    """Decode an image upright as 8-bit RGB; a JPEG whose long side is >= 2x ``min_long_side`` with the
    largest DCT reduction that keeps it >= ``min_long_side``. 16 bit is scaled, palettes expanded,
    transparency composited onto white; 32-bit grey refused (ImageReadError, as for unreadable files)."""
    path = _existing_file(path)
    try:
        im = _open(path)
    except Image.UnidentifiedImageError:
        raise ImageReadError(f"{path}: unreadable (not a recognised image format)") from None
    except (OSError, Image.DecompressionBombError) as exc:
        raise ImageReadError(f"{path}: unreadable ({exc})") from None
    with im:
        raw_width, raw_height = im.size
        orientation = _orientation(im)
        try:
            reduction = _draft(im, _reduction(im.format, max(raw_width, raw_height), min_long_side))
            im.load()
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
            raise ImageReadError(f"{path}: corrupt or truncated image data ({exc})") from None
        rgb = _to_rgb(im, path)
    if orientation in _TRANSPOSE:
        rgb = rgb.transpose(_TRANSPOSE[orientation])
    # a writable copy: np.asarray of a PIL image is read-only
    return _upright(np.array(rgb, dtype=np.uint8), raw_width, raw_height, orientation, 1.0 / reduction)


def _to_rgb(im: Image.Image, path: Path) -> Image.Image:
    """8-bit RGB from any pixel format Pillow decodes: ``convert("RGB")`` would clip 16-bit grey to 255 and
    drop alpha (transparent backgrounds often store black)."""
    if im.mode in _SIXTEEN_BIT_GREY:
        grey = np.asarray(im, dtype=np.uint32)
        return Image.fromarray(((grey * 255 + 32767) // 65535).astype(np.uint8)).convert("RGB")
    if im.mode in ("I", "F"):
        kind = "32-bit integer" if im.mode == "I" else "32-bit float"
        raise ImageReadError(
            f"{path}: unsupported pixel format {im.mode!r} ({kind} greyscale: its value range is unknown); "
            "save it as 8- or 16-bit greyscale or RGB"
        )
    if im.has_transparency_data:
        # Transparent pixels become paper white: receipts are dark text on a light background.
        rgba = im.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    try:
        return im.convert("RGB")
    except ValueError as exc:
        raise ImageReadError(f"{path}: unsupported pixel format {im.mode!r} ({exc})") from None


def read_header(path: str | Path) -> DecodedImage:
    """Sizes and EXIF orientation without decoding pixels (``image`` empty), the file checked by
    ``PIL.Image.verify`` (ImageReadError: missing, unreadable or corrupt)."""
    path = _existing_file(path)
    try:
        with _open(path) as im:
            im.verify()  # must come first; it leaves the file object unusable
        with _open(path) as im:
            raw_width, raw_height = im.size
            orientation = _orientation(im)
    except (OSError, SyntaxError, ValueError, TypeError, Image.DecompressionBombError) as exc:
        raise ImageReadError(f"{path}: unreadable or corrupt ({exc})") from None
    return _upright(np.zeros((0, 0, 3), np.uint8), raw_width, raw_height, orientation, 1.0)


def _open(path: Path) -> ImageFile.ImageFile:
    """``Image.open`` without PIL's DecompressionBombWarning (a large scan or photo is no attack here;
    PIL's own error at twice its limit still refuses one), said once per process in our words instead."""
    global _large_image_said
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        im = Image.open(path)
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and im.width * im.height > limit and not _large_image_said:
        _large_image_said = True
        log.info(
            "%s: a large image (%d x %d px, over PIL's %d-pixel warning limit): decoded anyway (images over "
            "twice the limit are refused as unreadable)",
            path,
            im.width,
            im.height,
            limit,
        )
    return im


def _existing_file(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        reason = "not a file" if path.exists() else "missing file"
        raise ImageReadError(f"{path}: {reason}")
    return path


def _upright(
    image: npt.NDArray[np.uint8], raw_width: int, raw_height: int, orientation: int, decode_scale: float
) -> DecodedImage:
    swap = orientation >= 5  # orientations 5-8 turn the image by 90 degrees
    return DecodedImage(
        image=image,
        orig_width=raw_height if swap else raw_width,
        orig_height=raw_width if swap else raw_height,
        raw_width=raw_width,
        raw_height=raw_height,
        orientation=orientation,
        decode_scale=decode_scale,
    )


def orientation_matrix(orientation: int, raw_width: int, raw_height: int) -> npt.NDArray[np.float64]:
    """(3, 3) transform from stored-pixel to upright coordinates (continuous) for an EXIF orientation 1..8."""
    w, h = float(raw_width), float(raw_height)
    rows = {
        1: ((1, 0, 0), (0, 1, 0)),
        2: ((-1, 0, w), (0, 1, 0)),
        3: ((-1, 0, w), (0, -1, h)),
        4: ((1, 0, 0), (0, -1, h)),
        5: ((0, 1, 0), (1, 0, 0)),
        6: ((0, -1, h), (1, 0, 0)),
        7: ((0, -1, h), (-1, 0, w)),
        8: ((0, 1, 0), (-1, 0, w)),
    }
    if orientation not in rows:
        raise ValueError(f"EXIF orientation: expected an integer in 1..8, got {orientation!r}")
    return np.array([*rows[orientation], (0, 0, 1)], dtype=np.float64)


def resolve_frame(polygons: list[Polygon], decoded: DecodedImage, mode: str) -> tuple[list[Polygon], bool]:
    """(K, 2) annotation polygons in original (upright) px, float32, by the EXIF rule ``mode``, and whether
    ``auto`` was ambiguous."""
    if mode not in EXIF_MODES:
        raise ValueError(f"exif_mode: expected one of {EXIF_MODES}, got {mode!r}")
    polys = [np.asarray(p, dtype=np.float32).reshape(-1, 2) for p in polygons]
    if decoded.orientation == 1 or mode == "rotated":
        return polys, False
    ambiguous = False
    if mode == "auto":
        fits_rotated = _fits(polys, decoded.orig_width, decoded.orig_height)
        fits_raw = _fits(polys, decoded.raw_width, decoded.raw_height)
        ambiguous = fits_rotated == fits_raw and bool(polys)
        if fits_rotated or ambiguous:
            return polys, ambiguous
    matrix = orientation_matrix(decoded.orientation, decoded.raw_width, decoded.raw_height)
    return [apply_matrix(p, matrix) for p in polys], ambiguous


def _orientation(im: ImageFile.ImageFile) -> int:
    try:
        value = int(im.getexif().get(_ORIENTATION_TAG, 1))
    except (TypeError, ValueError, SyntaxError, OSError) as exc:
        log.debug("%s: unreadable EXIF orientation (%s); using 1", im.filename, exc)
        return 1
    return value if 1 <= value <= 8 else 1


def _reduction(image_format: str | None, long_side: int, min_long_side: int | None) -> int:
    if image_format != "JPEG" or not min_long_side or min_long_side <= 0 or long_side < 2 * min_long_side:
        return 1
    for reduction in _JPEG_REDUCTIONS:
        if math.ceil(long_side / reduction) >= min_long_side:
            return reduction
    return 1


def _draft(im: Image.Image, reduction: int) -> int:
    """Ask the JPEG decoder for a 1/``reduction`` DCT-scaled decode; returns the reduction it applied."""
    if reduction == 1:
        return 1
    # Floor division makes Pillow pick exactly ``reduction`` (it picks the largest 8/4/2/1 <= size ratio).
    width = im.width
    result = im.draft("RGB", (max(1, width // reduction), max(1, im.height // reduction)))
    return 1 if result is None else max(1, round(width / result[1][2]))


def _fits(polygons: list[Polygon], width: int, height: int) -> bool:
    """Whether every finite point lies in ``[0, width] x [0, height]`` within a small tolerance."""
    # A few px (or 0.5 % of the long side) of slack: annotators click on or just past the border.
    tol = max(2.0, 0.005 * max(width, height))
    for poly in polygons:
        pts = poly[np.isfinite(poly).all(axis=1)]
        if len(pts) and (pts.min() < -tol or pts[:, 0].max() > width + tol or pts[:, 1].max() > height + tol):
            return False
    return True
