"""Tiny on-disk datasets for the dataset/datamodule/report tests (images <= 256 px)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ocr.data.datamodule import ReceiptDataModule
from ocr.data.dataset import ReceiptDataset
from ocr.data.photometric import PhotometricParams
from ocr.data.transforms import EvalTransform, TrainTransform, Transform

MEAN, STD = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
TARGETS = {"shrink_ratio": 0.4, "thresh_min": 0.3, "thresh_max": 0.7, "min_text_size": 2}
BLOCK = np.array([[30, 40], [110, 40], [110, 70], [30, 70]], np.float32)  # red block in every image


def block_image(width: int = 160, height: int = 120) -> Image.Image:
    """White image with a red block at ``BLOCK``."""
    pixels = np.full((height, width, 3), 255, np.uint8)
    pixels[40:70, 30:110] = (255, 0, 0)
    return Image.fromarray(pixels)


def write_split(
    root: Path,
    split: str,
    images: dict[str, list[dict[str, Any]]],
    create: bool = True,
    image_keys: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Write ``jsons/<split>.json`` and (``create``) a block image per name under ``images/<split>/``.

    ``image_keys`` adds keys (``img_w``, ``img_h``, ...) to the entries of the images it names.
    """
    (root / "images" / split).mkdir(parents=True, exist_ok=True)
    (root / "jsons").mkdir(parents=True, exist_ok=True)
    if create:
        for name in images:
            block_image().save(root / "images" / split / name)
    words = {
        name: {"words": {f"{i + 1:04d}": w for i, w in enumerate(ws)}, **(image_keys or {}).get(name, {})}
        for name, ws in images.items()
    }
    (root / "jsons" / f"{split}.json").write_text(json.dumps({"images": words}))


def block_words() -> list[dict[str, Any]]:
    """The block as text, a don't-care word and a degenerate two-point polygon."""
    return [
        {"points": BLOCK.tolist(), "text": "TOTAL"},
        {"points": [[120, 10], [150, 10], [150, 30], [120, 30]], "text": "###"},
        {"points": [[5, 5], [9, 9]], "text": "x"},
    ]


def make_root(root: Path, num_images: int = 3) -> Path:
    """train/val/test splits of ``num_images`` block images each."""
    for split in ("train", "val", "test"):
        write_split(root, split, {f"{split}_{i}.png": block_words() for i in range(num_images)})
    return root


def eval_transform(long_side: int = 64) -> EvalTransform:
    """Letterbox without normalisation (pixels stay in [0, 1])."""
    return EvalTransform(long_side=long_side, mean=MEAN, std=STD, fill=0, pad_multiple=None)


TRAIN_ARGS: dict[str, Any] = {
    "train_long_side": 96,
    "scale_range": (0.5, 3.0),
    "rotate_limit": 10.0,
    "p_rotate": 0.5,
    "p_flip": 0.5,
    "p_text_crop": 0.9,
    "brightness": 0.2,
    "contrast": 0.2,
    "saturation": 0.2,
    "hue": 0.02,
    "p_color": 0.5,
    "blur_limit": (3, 5),
    "p_blur": 0.1,
    "noise_std_range": (0.01, 0.04),
    "p_noise": 0.1,
    "mean": MEAN,
    "std": STD,
    "fill": 0,
}
# Overrides that leave only the geometric part (scale + crop) of the train transform.
NO_AUGMENTATION: dict[str, Any] = {
    "rotate_limit": 0.0,
    "p_rotate": 0.0,
    "p_flip": 0.0,
    "brightness": 0.0,
    "contrast": 0.0,
    "saturation": 0.0,
    "hue": 0.0,
    "p_color": 0.0,
    "blur_limit": (3, 3),
    "p_blur": 0.0,
    "noise_std_range": (0.0, 0.0),
    "p_noise": 0.0,
}


# The entries of ``TRAIN_ARGS`` that build the transform's ``PhotometricParams``.
PHOTOMETRIC_KEYS = tuple(inspect.signature(PhotometricParams).parameters)


def train_transform(crop_size: int = 64, **overrides: Any) -> TrainTransform:
    """Full augmentation at a small size; ``overrides`` replace entries of ``TRAIN_ARGS`` (photometric ones
    included: they go to the transform's ``PhotometricParams``)."""
    args = {**TRAIN_ARGS, **overrides}
    photometric = PhotometricParams(**{key: args.pop(key) for key in PHOTOMETRIC_KEYS})
    return TrainTransform(crop_size=crop_size, photometric=photometric, **args)


def receipt_datamodule(
    root: Path,
    *,
    num_workers: int = 0,
    synthetic: dict[str, int] | None = None,
    batch_size: int = 2,
    crop_size: int = 64,
    render_on: str = "worker",
    extra_train_roots: tuple[str, ...] = (),
) -> ReceiptDataModule:
    """A datamodule on ``root`` with the full train augmentation at ``crop_size`` and a 64 px letterbox."""
    return ReceiptDataModule(
        root=str(root),
        train_split="train",
        val_split="val",
        test_split="test",
        predict_image_dir=None,
        train_transform=train_transform(crop_size),
        eval_transform=eval_transform(64),
        exif_mode="rotated",
        on_missing_image="skip",
        min_polygon_size=1.0,
        targets=TARGETS,
        cache_dir=None,
        render_on=render_on,
        batch_size=batch_size,
        eval_batch_size=2,
        num_workers=num_workers,
        pin_memory=False,
        persistent_workers=num_workers > 0,
        synthetic=synthetic,
        extra_train_roots=extra_train_roots,
    )


def labelled_dataset(
    root: Path, split: str, transform: Transform, render_on: str = "worker", exif_mode: str = "rotated"
) -> ReceiptDataset:
    """A labelled split (of a ``make_root`` folder, or real receipts): missing images fail, ``TARGETS``,
    no cache."""
    return ReceiptDataset(
        root=root,
        split=split,
        transform=transform,
        exif_mode=exif_mode,
        on_missing_image="fail",
        min_polygon_size=1.0,
        targets=TARGETS,
        cache_dir=None,
        render_on=render_on,
    )
