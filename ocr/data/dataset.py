"""Datasets: a labelled split (``ReceiptDataset``) and a folder of images for prediction.

``ReceiptDataset`` scans its split once at construction (``ocr.data.scan``); ``__getitem__`` then
decodes (reduced, or from the cache), augments and sanitises the polygons in input px, in the DataLoader
worker, which also warps the crop and draws the DB targets (``render_on=worker``) or ships the source
region and the polygons for ``ocr.data.coding.decode_batch`` to do so on the device (``render_on=device``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ocr.data.annotations import load_annotations
from ocr.data.cache import ImageCache, cache_fingerprint
from ocr.data.coding import encode_maps
from ocr.data.images import IMAGE_SUFFIXES, ImageReadError, list_images, read_header
from ocr.data.sanitize import merge_counts, sanitize_polygons
from ocr.data.scan import ON_MISSING, load_source, scan_split
from ocr.data.targets.db import make_db_targets
from ocr.data.transforms import EvalTransform, SourceImage, TrainTransform, Transform, TransformResult
from ocr.machine.hardware import usable_cores
from ocr.types import RENDER_ON, TARGET_KEYS, BatchCoding, Polygon, Sample, TargetParams
from ocr.utils.errors import InputNotFoundError

__all__ = ["IMAGE_SUFFIXES", "INPUT_PX", "ImageFolderDataset", "ReceiptDataset", "build_sample"]

log = logging.getLogger(__name__)

INPUT_PX = "input_px/"  # prefix of the sanitation counts taken in input px, after the transform


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
        render_on: str,
    ) -> None:
        """Scan the split (``ocr.data.scan``); ``targets`` holds ``TargetParams``' fields, ``cache_dir`` None
        disables the decoded-image cache. ValueError: an unknown ``on_missing_image``, ``render_on`` or target
        key; FileNotFoundError, ImageReadError, AnnotationError: the annotation file or (``fail``) the images.
        """
        if on_missing_image not in ON_MISSING:
            raise ValueError(f"on_missing_image: expected one of {ON_MISSING}, got {on_missing_image!r}")
        if render_on not in RENDER_ON:
            raise ValueError(f"render_on: expected one of {RENDER_ON}, got {render_on!r} <data.render_on>")
        self.targets = TargetParams.from_config(targets)
        drawn_there = self.targets if render_on == "device" else None  # the targets the device draws
        self.coding = BatchCoding(
            transform.mean, transform.std, self.targets.thresh_min, self.targets.thresh_max, drawn_there
        )
        # Only the train transform warps; an eval letterbox is a plain resize, rendered here either way.
        self.warp_on_device = render_on == "device" and isinstance(transform, TrainTransform)
        self.root, self.split = Path(root), split
        self.image_dir = self.root / "images" / split
        self.annotation_path = self.root / "jsons" / f"{split}.json"
        if not self.annotation_path.is_file():
            raise InputNotFoundError(
                f"{self.annotation_path}: annotation file of split {split!r} not found "
                f"(expected <root>/jsons/<split>.json, root={self.root})"
            )
        self.transform = transform
        self.min_polygon_size = float(min_polygon_size)
        self.source_long_side = int(transform.source_long_side)
        # what the cached pixels depend on, besides the annotation file and the code
        pixels = {"source_long_side": self.source_long_side, "exif_mode": exif_mode}
        self.cache: ImageCache | None = None
        if cache_dir is not None:
            self.cache = ImageCache(cache_dir, cache_fingerprint(self.annotation_path, pixels))
        # One process at a time fills a cache folder (the ranks of a node); the others then read it.
        with self.cache.filling() if self.cache is not None else nullcontext():
            self.entries, self.report = scan_split(
                load_annotations(self.annotation_path),
                split=split,
                image_dir=self.image_dir,
                annotation_path=self.annotation_path,
                exif_mode=exif_mode,
                on_missing_image=on_missing_image,
                source_long_side=self.source_long_side,
                min_polygon_size=self.min_polygon_size,
                cache=self.cache,
            )

    def __len__(self) -> int:
        return len(self.entries)

    def input_size(self, index: int) -> tuple[int, int]:
        """(height, width) of image ``index`` as the network sees it, from the scan (eval transforms only)."""
        entry = self.entries[index]
        return _eval_transform(self.transform).input_size(entry.orig_width, entry.orig_height)

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
        if self.warp_on_device:
            assert isinstance(self.transform, TrainTransform)  # warp_on_device says so
            _, result = self.transform.crop_region(source, entry.polygons, entry.ignore)
        else:
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
            self.coding,
        )


def build_sample(
    result: TransformResult,
    polygons_orig_px: list[Polygon],
    ignore: list[bool],
    texts: list[str | None],
    image_id: str,
    sanitation: dict[str, int],
    min_polygon_size: float,
    targets: TargetParams,
    coding: BatchCoding,
) -> Sample:
    """Sanitise the transformed polygons in input px and assemble a compact Sample: the DB maps drawn
    and encoded with ``coding``, or, when ``coding.targets`` is set, the polygons the device draws from.
    Its ``sanitation`` adds the input-px counts, under ``INPUT_PX`` + reason, to the scan's."""
    height, width = result.image.shape[1:] if result.warp is None else result.warp.out_size
    polys_px, ignore_px, input_counts = sanitize_polygons(
        result.polygons, ignore, width, height, min_polygon_size
    )
    on_device = coding.targets is not None
    tensors = (
        dict.fromkeys(TARGET_KEYS)
        if on_device
        else encode_maps(make_db_targets(polys_px, ignore_px, height, width, targets), coding)
    )  # (1, H, W) uint8 each, or None
    return Sample(
        image=result.image,
        prob_map=tensors["prob_map"],
        prob_mask=tensors["prob_mask"],
        thresh_map=tensors["thresh_map"],
        thresh_mask=tensors["thresh_mask"],
        warp=result.warp,
        target_polygons=polys_px if on_device else None,
        target_ignore=ignore_px if on_device else None,
        polygons=polygons_orig_px,
        ignore=ignore,
        texts=texts,
        geometry=result.geometry,
        image_id=image_id,
        sanitation=merge_counts(sanitation, {INPUT_PX + k: v for k, v in input_counts.items()}),
        coding=coding,
        photometric=result.photometric,
    )


class ImageFolderDataset(Dataset[Sample]):
    """All images of a folder (sorted, recursive), for prediction: no annotations, zero targets."""

    def __init__(self, *, image_dir: str | Path, transform: Transform) -> None:
        """Scan ``image_dir`` for files with a suffix in ``IMAGE_SUFFIXES`` (FileNotFoundError: no folder)."""
        self.image_dir = Path(image_dir)
        if not self.image_dir.is_dir():
            raise InputNotFoundError(f"{self.image_dir}: predict image folder not found")
        self.transform = transform
        self.source_long_side = int(transform.source_long_side)
        self.files = list_images(self.image_dir)
        # The maps are zeros (no targets): code 0 decodes to 0.0 with a threshold range from 0.
        self.coding = BatchCoding(transform.mean, transform.std, 0.0, 1.0)

    def __len__(self) -> int:
        return len(self.files)

    @functools.cached_property
    def original_sizes(self) -> list[tuple[int, int] | None]:
        """(width, height) of each image from its header (None: unreadable), read once, in threads."""

        def header_size(name: str) -> tuple[int, int] | None:
            try:
                header = read_header(self.image_dir / name)
            except ImageReadError:
                return None
            return header.orig_width, header.orig_height

        with ThreadPoolExecutor(usable_cores()) as pool:
            return list(pool.map(header_size, self.files))

    def input_size(self, index: int) -> tuple[int, int]:
        """(height, width) of image ``index`` as the network sees it (an unreadable one's: the blank's)."""
        side = self.source_long_side
        width, height = self.original_sizes[index] or (side, side)
        return _eval_transform(self.transform).input_size(width, height)

    def __getitem__(self, index: int) -> Sample:
        """Decode and letterbox one image, zero targets; an unreadable one becomes blank (logged), so
        the submission still gets its row instead of the prediction run failing."""
        name = self.files[index]
        try:
            source = load_source(self.image_dir / name, self.source_long_side)
        except ImageReadError as err:
            log.error("predict: %s; its submission row will be empty", err)
            source = self._blank(index)
        result = self.transform(source, [], [])
        height, width = result.image.shape[1:]
        zeros = torch.zeros((1, height, width), dtype=torch.uint8)
        return Sample(
            image=result.image,
            prob_map=zeros,
            prob_mask=zeros.clone(),
            thresh_map=zeros.clone(),
            thresh_mask=zeros.clone(),
            warp=None,
            target_polygons=None,
            target_ignore=None,
            polygons=[],
            ignore=[],
            texts=[],
            geometry=result.geometry,
            image_id=name,
            sanitation={},
            coding=self.coding,
            photometric=None,
        )

    def _blank(self, index: int) -> SourceImage:
        """The stand-in of an unreadable image: blank, of its header's size when the loader read it (so
        that its input size is the planned one), else a ``source_long_side`` square."""
        side = self.source_long_side
        known = self.__dict__.get("original_sizes")  # never read all headers from inside a worker
        width, height = (known[index] if known is not None else None) or (side, side)
        scale = min(1.0, side / max(width, height))
        blank = np.zeros((max(1, round(height * scale)), max(1, round(width * scale)), 3), dtype=np.uint8)
        return SourceImage(blank, scale, width, height)


def _eval_transform(transform: Transform) -> EvalTransform:
    if not isinstance(transform, EvalTransform):
        raise TypeError(
            "input_size: expected a dataset with an EvalTransform (val/test/predict), got "
            f"{type(transform).__name__}"
        )
    return transform
