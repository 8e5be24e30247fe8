"""Datasets: a labelled split (``ReceiptDataset``) and a folder of images for prediction.

``ReceiptDataset`` scans its split once at construction: missing or unreadable images are skipped and
counted (or fail, per ``on_missing_image``), EXIF frames are resolved (ambiguous ``auto`` decisions
counted) and annotation polygons are sanitised in original px (counts by reason). ``__getitem__`` then
decodes (at reduced scale when the input is much smaller, or from the on-disk cache), transforms,
sanitises in input px and draws the DB targets, all in the DataLoader worker.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ocr.data.annotations import ImageRecord, load_annotations
from ocr.data.cache import ImageCache, cache_fingerprint
from ocr.data.images import DecodedImage, ImageReadError, read_header, read_image, resolve_frame
from ocr.data.sanitize import merge_counts, sanitize_polygons, sanitize_words
from ocr.data.targets import make_db_targets
from ocr.data.transforms import SourceImage, Transform, TransformResult, resize_by
from ocr.types import Polygon, Sample

__all__ = ["IMAGE_SUFFIXES", "ImageFolderDataset", "ReceiptDataset", "ScanReport", "load_source"]

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
ON_MISSING = ("skip", "fail")
TARGET_KEYS = ("shrink_ratio", "thresh_min", "thresh_max", "min_text_size")
_NAMES_SHOWN = 5


@dataclass
class ScanReport:
    """What the one-time scan of a split found."""

    split: str
    num_images: int = 0  # usable images
    num_words: int = 0  # polygons kept after sanitation, don't-care included
    num_ignore: int = 0
    missing: list[str] = field(default_factory=list)  # skipped: file not found
    unreadable: list[str] = field(default_factory=list)  # skipped: header unreadable/corrupt
    ambiguous: int = 0  # exif_mode=auto images where neither or both frames fit
    sanitation: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """One log line."""
        skipped = self.missing + self.unreadable
        names = _names(skipped)
        return (
            f"{self.split}: {self.num_images} images, {self.num_words} words ({self.num_ignore} don't-care), "
            f"skipped {len(self.missing)} missing + {len(self.unreadable)} unreadable"
            f"{f' ({names})' if skipped else ''}, {self.ambiguous} ambiguous EXIF frames, "
            f"sanitation {self.sanitation or '{}'}"
        )


@dataclass(frozen=True)
class _Entry:
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
    """Decode ``path`` upright, scaled so its long side is at most ``long_side`` (exact scale).

    JPEGs much larger than needed are DCT-decoded at reduced scale first. With ``cache`` and a known
    ``orig_size`` (width, height), the scaled image is read from / written to the on-disk cache.

    Raises:
        ImageReadError: missing, unreadable or corrupt image file.
    """
    if cache is not None and orig_size is not None:
        cached = cache.load(image_id, path)
        if cached is not None:
            return SourceImage(cached, _source_scale(*orig_size, long_side), *orig_size)
    decoded = read_image(path, min_long_side=long_side)
    scale = _source_scale(decoded.orig_width, decoded.orig_height, long_side)
    image = resize_by(decoded.image, scale / decoded.decode_scale)
    if cache is not None:
        cache.save(image_id, image, path)
    return SourceImage(image, scale, decoded.orig_width, decoded.orig_height)


def _source_scale(orig_width: int, orig_height: int, long_side: int) -> float:
    return min(1.0, long_side / max(orig_width, orig_height))


class ReceiptDataset(Dataset[Sample]):
    """A labelled split: ``<root>/jsons/<split>.json`` + ``<root>/images/<split>/<file>``."""

    def __init__(
        self,
        *,
        root: str | Path,
        split: str,
        transform: Transform,
        exif_mode: str,
        on_missing_image: str,
        min_polygon_size: float,
        targets: Mapping[str, float],
        cache_dir: str | Path | None,
    ) -> None:
        """Scan the split.

        Args:
            root: dataset folder.
            split: split name (``train``, ``val``, ``test``, ...).
            transform: a ``TrainTransform`` or ``EvalTransform``.
            exif_mode: ``rotated``, ``raw`` or ``auto`` (see ``ocr.data.images``).
            on_missing_image: ``skip`` (skip and count missing/unreadable images) or ``fail``.
            min_polygon_size: polygons whose shorter side is below this (px) are removed.
            targets: keyword arguments of ``make_db_targets``: shrink_ratio, thresh_min, thresh_max,
                min_text_size.
            cache_dir: folder of the decoded-image cache; None disables it.

        Raises:
            FileNotFoundError: the annotation file is missing, or (``fail``) images are missing.
            ImageReadError: (``fail``) images are unreadable.
            AnnotationError: the annotation file is malformed.
        """
        if on_missing_image not in ON_MISSING:
            raise ValueError(f"on_missing_image: expected one of {ON_MISSING}, got {on_missing_image!r}")
        if set(targets) != set(TARGET_KEYS):
            raise ValueError(f"targets: expected exactly the keys {TARGET_KEYS}, got {sorted(targets)}")
        self.root, self.split = Path(root), split
        self.image_dir = self.root / "images" / split
        self.annotation_path = self.root / "jsons" / f"{split}.json"
        if not self.annotation_path.is_file():
            raise FileNotFoundError(
                f"{self.annotation_path}: annotation file of split {split!r} not found "
                f"(expected <root>/jsons/<split>.json, root={self.root})"
            )
        self.transform = transform
        self.min_polygon_size = float(min_polygon_size)
        self.targets = {k: targets[k] for k in TARGET_KEYS}
        self.source_long_side = int(transform.source_long_side)
        self.cache = (
            None
            if cache_dir is None
            else ImageCache(
                cache_dir,
                cache_fingerprint(
                    self.annotation_path, {"source_long_side": self.source_long_side, "exif_mode": exif_mode}
                ),
            )
        )
        self.report = ScanReport(split)
        self.entries = self._scan(load_annotations(self.annotation_path), exif_mode, on_missing_image)

    def __len__(self) -> int:
        """Number of usable images."""
        return len(self.entries)

    def __getitem__(self, index: int) -> Sample:
        """Decode, transform and draw the targets of one image (runs in the DataLoader worker)."""
        entry = self.entries[index]
        source = load_source(
            self.image_dir / entry.file_name,
            self.source_long_side,
            self.cache,
            entry.file_name,
            (entry.orig_width, entry.orig_height),
        )
        result = self.transform(source, entry.polygons, entry.ignore)
        return build_sample(
            result,
            entry.polygons,
            entry.ignore,
            entry.texts,
            entry.file_name,
            entry.sanitation,
            self.min_polygon_size,
            self.targets,
        )

    def _scan(self, records: Mapping[str, ImageRecord], exif_mode: str, on_missing: str) -> list[_Entry]:
        entries = []
        for name, record in records.items():
            path = self.image_dir / name
            try:
                header = read_header(path)
            except ImageReadError as exc:
                (self.report.missing if not path.exists() else self.report.unreadable).append(name)
                log.debug("%s", exc)
                continue
            entries.append(self._entry(record, header, exif_mode))
        if on_missing == "fail" and (self.report.missing or self.report.unreadable):
            _raise_missing(self.image_dir, self.annotation_path, self.report)
        if self.report.missing or self.report.unreadable:
            log.warning(
                "%s: skipped %d images (data.on_missing_image=skip): %s",
                self.annotation_path,
                len(self.report.missing) + len(self.report.unreadable),
                _names(self.report.missing + self.report.unreadable),
            )
        self.report.num_images = len(entries)
        return entries

    def _entry(self, record: ImageRecord, header: DecodedImage, exif_mode: str) -> _Entry:
        polygons, ambiguous = resolve_frame([w.points for w in record.words], header, exif_mode)
        self.report.ambiguous += int(ambiguous)
        kept, flags, texts, counts = sanitize_words(
            polygons,
            [w.ignore for w in record.words],
            [w.text for w in record.words],
            header.orig_width,
            header.orig_height,
            self.min_polygon_size,
        )
        self.report.num_words += len(kept)
        self.report.num_ignore += sum(flags)
        self.report.sanitation = merge_counts(self.report.sanitation, counts)
        return _Entry(record.file_name, kept, flags, texts, header.orig_width, header.orig_height, counts)


def build_sample(
    result: TransformResult,
    polygons_orig_px: list[Polygon],
    ignore: list[bool],
    texts: list[str | None],
    image_id: str,
    sanitation: dict[str, int],
    min_polygon_size: float,
    targets: Mapping[str, float],
) -> Sample:
    """Sanitise the transformed polygons in input px (clip to the input), draw targets, assemble a Sample."""
    height, width = result.image.shape[1:]
    polys_px, ignore_px, _ = sanitize_polygons(result.polygons, ignore, width, height, min_polygon_size)
    maps = make_db_targets(polys_px, ignore_px, height, width, **targets)
    tensors = {
        key: torch.from_numpy(np.ascontiguousarray(maps[key], np.float32))[None]  # (1, H, W)
        for key in ("prob_map", "prob_mask", "thresh_map", "thresh_mask")
    }
    return Sample(
        image=result.image,
        prob_map=tensors["prob_map"],
        prob_mask=tensors["prob_mask"],
        thresh_map=tensors["thresh_map"],
        thresh_mask=tensors["thresh_mask"],
        polygons=polygons_orig_px,
        ignore=ignore,
        texts=texts,
        geometry=result.geometry,
        image_id=image_id,
        sanitation=dict(sanitation),
    )


def _raise_missing(image_dir: Path, annotation_path: Path, report: ScanReport) -> None:
    hint = "(set data.on_missing_image=skip to skip and count them)"
    if report.missing:
        raise FileNotFoundError(
            f"{annotation_path}: {len(report.missing)} listed images are missing under {image_dir}: "
            f"{_names(report.missing)} {hint}"
        )
    raise ImageReadError(
        f"{annotation_path}: {len(report.unreadable)} images under {image_dir} are unreadable or corrupt: "
        f"{_names(report.unreadable)} {hint}"
    )


def _names(names: list[str]) -> str:
    return ", ".join(names[:_NAMES_SHOWN]) + (", ..." if len(names) > _NAMES_SHOWN else "")


class ImageFolderDataset(Dataset[Sample]):
    """All images of a folder (sorted, recursive), for prediction: no annotations, zero targets."""

    def __init__(self, *, image_dir: str | Path, transform: Transform) -> None:
        """Scan ``image_dir`` for files with a suffix in ``IMAGE_SUFFIXES``.

        Raises:
            FileNotFoundError: ``image_dir`` is not a folder.
        """
        self.image_dir = Path(image_dir)
        if not self.image_dir.is_dir():
            raise FileNotFoundError(f"{self.image_dir}: predict image folder not found")
        self.transform = transform
        self.source_long_side = int(transform.source_long_side)
        self.files = sorted(
            p.relative_to(self.image_dir).as_posix()
            for p in self.image_dir.rglob("*")
            if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
        )

    def __len__(self) -> int:
        """Number of image files found."""
        return len(self.files)

    def __getitem__(self, index: int) -> Sample:
        """Decode and letterbox one image; targets are zeros.

        An unreadable image becomes a blank one (logged with its name), so the submission still gets
        its row, with no detections, instead of the whole prediction run failing.
        """
        name = self.files[index]
        try:
            source = load_source(self.image_dir / name, self.source_long_side)
        except ImageReadError as err:
            log.error("predict: %s; its submission row will be empty", err)
            blank = np.zeros((self.source_long_side, self.source_long_side, 3), dtype=np.uint8)
            source = SourceImage(blank, 1.0, self.source_long_side, self.source_long_side)
        result = self.transform(source, [], [])
        height, width = result.image.shape[1:]
        zeros = torch.zeros((1, height, width), dtype=torch.float32)
        return Sample(
            image=result.image,
            prob_map=zeros,
            prob_mask=zeros.clone(),
            thresh_map=zeros.clone(),
            thresh_mask=zeros.clone(),
            polygons=[],
            ignore=[],
            texts=[],
            geometry=result.geometry,
            image_id=name,
            sanitation={},
        )
