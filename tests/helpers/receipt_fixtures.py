"""Tiny on-disk datasets for the dataset/datamodule/report tests (images <= 256 px)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ocr.data.transforms import EvalTransform, TrainTransform

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


def train_transform(crop_size: int = 64, **overrides: Any) -> TrainTransform:
    """Full augmentation at a small size; ``overrides`` replace entries of ``TRAIN_ARGS``."""
    return TrainTransform(crop_size=crop_size, **{**TRAIN_ARGS, **overrides})
