"""The one-time scan of a labelled split, and loading a source image (decode, scale, decode cache).

Every listed image is decoded at start (at the training size into the cache, else at the smallest
reduced scale, which still refuses what the full decode refuses), so broken files are found before
training, skipped and counted or (``on_missing_image=fail``) all named in one error. Unannotated files and
wrong ``img_w``/``img_h`` are counted and warned about once; EXIF frames are resolved and polygons
sanitised in original px.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np

from ocr.data.annotations import ImageRecord
from ocr.data.cache import ImageCache
from ocr.data.images import (
    DecodedImage,
    ImageReadError,
    list_images,
    read_header,
    read_image,
    resolve_frame,
)
from ocr.data.sanitize import merge_counts, sanitize_words
from ocr.data.transforms import SourceImage, resize_by
from ocr.machine.hardware import usable_cores
from ocr.types import Polygon

__all__ = ["ON_MISSING", "ScanEntry", "ScanReport", "load_source", "scale_source", "scan_split"]

log = logging.getLogger(__name__)

ON_MISSING = ("skip", "fail")
_NAMES_LOGGED = 5
_NAMES_IN_ERRORS = 50
_SMALLEST = 1  # read_image's min_long_side for the largest DCT reduction (1/8)
_NO_PIXELS = np.zeros((0, 0, 3), np.uint8)


@dataclass
class ScanReport:
    """What the one-time scan of a split found."""

    split: str
    num_images: int = 0  # usable images
    num_words: int = 0  # polygons kept after sanitation, don't-care included
    num_ignore: int = 0
    missing: list[str] = field(default_factory=list)  # skipped: file not found
    unreadable: list[str] = field(default_factory=list)  # skipped: the decoder refuses the file
    unannotated: list[str] = field(default_factory=list)  # image files on disk without an annotation entry
    size_mismatch: list[str] = field(default_factory=list)  # img_w/img_h disagree with the decoded image
    ambiguous: int = 0  # exif_mode=auto images where neither or both frames fit
    sanitation: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """One log line."""
        skipped = self.missing + self.unreadable
        names = _names(skipped)
        return (
            f"{self.split}: {self.num_images} images, {self.num_words} words ({self.num_ignore} don't-care), "
            f"skipped {len(self.missing)} missing + {len(self.unreadable)} unreadable"
            f"{f' ({names})' if skipped else ''}, {len(self.unannotated)} unannotated image files, "
            f"{len(self.size_mismatch)} img_w/img_h mismatches, {self.ambiguous} ambiguous EXIF frames, "
            f"sanitation {self.sanitation or '{}'}"
        )


@dataclass(frozen=True)
class ScanEntry:
    """A usable image of the split with its sanitised annotations."""

    file_name: str
    polygons: list[Polygon]  # original px, sanitised
    ignore: list[bool]
    texts: list[str | None]
    orig_width: int
    orig_height: int
    sanitation: dict[str, int]


def load_source(
    path: Path,
    long_side: int,
    cache: ImageCache | None = None,
    image_id: str = "",
    orig_size: tuple[int, int] | None = None,
) -> SourceImage:
    """Decode ``path`` upright (DCT-reduced first when much larger), scaled so its long side is at most
    ``long_side``; read from or written to ``cache`` when ``orig_size`` (width, height) is known."""
    if cache is not None and orig_size is not None:
        cached = cache.load(image_id, path)
        if cached is not None:
            return SourceImage(cached, _source_scale(*orig_size, long_side), *orig_size)
    return scale_source(read_image(path, min_long_side=long_side), long_side, cache, image_id, path)


def scale_source(
    decoded: DecodedImage,
    long_side: int,
    cache: ImageCache | None = None,
    image_id: str = "",
    path: Path | None = None,
) -> SourceImage:
    """Scale a decoded image so its long side is at most ``long_side``; with ``cache``, store the result."""
    scale = _source_scale(decoded.orig_width, decoded.orig_height, long_side)
    image = resize_by(decoded.image, scale / decoded.decode_scale)
    if cache is not None:
        cache.save(image_id, image, path)
    return SourceImage(image, scale, decoded.orig_width, decoded.orig_height)


def _source_scale(orig_width: int, orig_height: int, long_side: int) -> float:
    return min(1.0, long_side / max(orig_width, orig_height))


def scan_split(
    records: Mapping[str, ImageRecord],
    *,
    split: str,
    image_dir: Path,
    annotation_path: Path,
    exif_mode: str,
    on_missing_image: str,
    source_long_side: int,
    min_polygon_size: float,
    cache: ImageCache | None,
) -> tuple[list[ScanEntry], ScanReport]:
    """Decode-check, resolve and sanitise every listed image; returns the usable ones and the counts
    (FileNotFoundError or ImageReadError with ``fail``, naming every missing and unreadable one)."""
    report = ScanReport(split)
    entries, errors, mismatches = [], [], []
    probe = partial(_probe, image_dir=image_dir, long_side=source_long_side, cache=cache)
    # Pillow releases the GIL while decoding: one thread per usable core.
    with ThreadPoolExecutor(usable_cores()) as pool:
        for (name, record), header in zip(records.items(), pool.map(probe, records), strict=True):
            if isinstance(header, ImageReadError):
                (report.unreadable if (image_dir / name).exists() else report.missing).append(name)
                errors.append(header)
                log.debug("%s", header)
                continue
            if _size_disagrees(record, header):
                report.size_mismatch.append(name)
                mismatches.append(
                    f"{name}: {record.img_w or '?'}x{record.img_h or '?'} recorded, "
                    f"{header.orig_width}x{header.orig_height} decoded"
                )
            entries.append(_entry(record, header, exif_mode, min_polygon_size, report))
    if errors and on_missing_image == "fail":
        _raise_unusable(image_dir, annotation_path, report, errors[0])
    if errors:
        log.warning(
            "%s: skipped %d images (data.on_missing_image=skip): %s (first error: %s)",
            annotation_path,
            len(errors),
            _names(report.missing + report.unreadable),
            errors[0],
        )
    if mismatches:
        log.warning(
            "%s: %d images have img_w/img_h that disagree with the image file (%s); the decoded image's "
            "size is used and the polygons are taken as its pixels",
            annotation_path,
            len(mismatches),
            _names(mismatches),
        )
    report.unannotated = sorted(set(list_images(image_dir)) - set(records))
    if report.unannotated:
        log.warning(
            "%s: %d image files under %s have no entry in the annotation file and are not used: %s",
            annotation_path,
            len(report.unannotated),
            image_dir,
            _names(report.unannotated),
        )
    report.num_images = len(entries)
    return entries, report


def _probe(
    name: str, *, image_dir: Path, long_side: int, cache: ImageCache | None
) -> DecodedImage | ImageReadError:
    """Sizes and orientation of an image the decoder accepts (pixels dropped), or why it refuses it; with
    the cache on, decoded as ``load_source`` will and stored (a cached one is only header-read), else
    decoded at the smallest reduced scale."""
    path = image_dir / name
    try:
        if cache is not None and path.is_file() and cache.path(name, path).is_file():
            return read_header(path)
        decoded = read_image(path, min_long_side=long_side if cache is not None else _SMALLEST)
    except ImageReadError as exc:
        return exc
    if cache is not None:
        scale_source(decoded, long_side, cache, name, path)
    return replace(decoded, image=_NO_PIXELS)


def _entry(
    record: ImageRecord, header: DecodedImage, exif_mode: str, min_polygon_size: float, report: ScanReport
) -> ScanEntry:
    polygons, ambiguous = resolve_frame([w.points for w in record.words], header, exif_mode)
    report.ambiguous += int(ambiguous)
    kept, flags, texts, counts = sanitize_words(
        polygons,
        [w.ignore for w in record.words],
        [w.text for w in record.words],
        header.orig_width,
        header.orig_height,
        min_polygon_size,
    )
    report.num_words += len(kept)
    report.num_ignore += sum(flags)
    report.sanitation = merge_counts(report.sanitation, counts)
    return ScanEntry(record.file_name, kept, flags, texts, header.orig_width, header.orig_height, counts)


def _size_disagrees(record: ImageRecord, header: DecodedImage) -> bool:
    """``img_w``/``img_h`` given and matching neither the upright nor the stored (pre-EXIF) frame."""
    if record.img_w is None and record.img_h is None:
        return False
    frames = ((header.orig_width, header.orig_height), (header.raw_width, header.raw_height))
    return not any(record.img_w in (None, w) and record.img_h in (None, h) for w, h in frames)


def _raise_unusable(
    image_dir: Path, annotation_path: Path, report: ScanReport, first: ImageReadError
) -> None:
    """One error naming every missing and every unreadable image (``data.on_missing_image=fail``)."""
    parts = []
    if report.missing:
        parts.append(f"{len(report.missing)} missing: {_names(report.missing, _NAMES_IN_ERRORS)}")
    if report.unreadable:
        parts.append(
            f"{len(report.unreadable)} unreadable, corrupt or truncated: "
            f"{_names(report.unreadable, _NAMES_IN_ERRORS)}"
        )
    message = (
        f"{annotation_path}: listed images under {image_dir}: {'; '.join(parts)} (first error: {first}) "
        "(set data.on_missing_image=skip to skip and count them)"
    )
    raise (FileNotFoundError if report.missing else ImageReadError)(message)


def _names(names: list[str], limit: int = _NAMES_LOGGED) -> str:
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
