"""Compact batches: what the DataLoader workers emit and how the device turns it into network input.

A 640 px sample leaves its worker as 2.87 MB instead of 11.5 MB: uint8 RGB, uint8 {0, 1} maps and the
threshold map as uint8 codes over ``[thresh_min, thresh_max]`` (at most ``(max - min) / 510`` off).
:func:`decode_batch` converts, augments (train) and normalises once, on the batch's device, after making
the crops and maps there when the batch carries them (``data.render_on=device``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from ocr.data.device_targets import draw_db_targets
from ocr.data.device_warp import warp_regions
from ocr.data.photometric import apply_photometric
from ocr.types import BATCH_TENSOR_KEYS, TARGET_KEYS, Batch, BatchCoding, TargetKey

__all__ = ["THRESH_LEVELS", "decode_batch", "encode_maps", "move_batch", "normalize_images"]

THRESH_LEVELS = 255  # uint8 codes 0..255 span [thresh_min, thresh_max]


def encode_maps(
    maps: Mapping[TargetKey, npt.NDArray[np.float32]], coding: BatchCoding
) -> dict[TargetKey, Tensor]:
    """The four (H, W) float32 DB maps -> (1, H, W) uint8 tensors: masks and ``prob_map`` as 0/1, the
    threshold map as codes over ``[coding.thresh_min, coding.thresh_max]``."""
    lo, hi = coding.thresh_min, coding.thresh_max
    alpha = THRESH_LEVELS / (hi - lo)
    linear = {key: (alpha, -lo * alpha) if key == "thresh_map" else (1.0, 0.0) for key in TARGET_KEYS}
    # One saturating, rounding pass each (the values are >= 0, so the absolute value changes nothing).
    return {
        key: torch.from_numpy(cv2.convertScaleAbs(maps[key], alpha=a, beta=b))[None]
        for key, (a, b) in linear.items()
    }


def normalize_images(images: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """(B, 3, H, W) uint8 RGB -> float32 ``(images / 255 - mean) / std`` (TypeError: not uint8)."""
    return _standardize(_unit(images), mean, std)


def _unit(images: Tensor) -> Tensor:
    """(B, 3, H, W) uint8 -> float32 in [0, 1]; raises TypeError for any other dtype."""
    if images.dtype != torch.uint8:
        raise TypeError(
            f"images: expected (B, 3, H, W) uint8 RGB (the compact batch), got {tuple(images.shape)} "
            f"{images.dtype} on {images.device}"
        )
    return images.float() / 255.0


def _standardize(scaled: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """(B, 3, H, W) float RGB in [0, 1] -> ``(scaled - mean) / std``."""
    # Python scalars, not tensors of mean/std: a host-to-device copy from pageable memory waits for the
    # stream, i.e. would sync every step on CUDA.
    channels = [(scaled[:, c] - m) / s for c, (m, s) in enumerate(zip(mean, std, strict=True))]
    return torch.stack(channels, dim=1)


def move_batch(batch: Batch, device: torch.device) -> Batch:
    """A new batch with the compact tensors on ``device`` (non-blocking: the loader pins them,
    ``data.pin_memory``). Polygons, geometry records and photometric rows stay host-side (Lightning's
    generic transfer refuses frozen dataclasses), as do a device batch's warps and target polygons
    (:func:`decode_batch` sends them); ``batch`` itself is left as it is."""
    moved: dict[str, Any] = dict(batch)
    for key in BATCH_TENSOR_KEYS:
        if moved[key] is not None:  # the maps are None when decode_batch draws them (render_on=device)
            moved[key] = moved[key].to(device, non_blocking=True)
    return moved  # type: ignore[return-value]


def decode_batch(batch: Batch) -> Batch:
    """A new batch whose tensors are what the network and the loss read, on the device the compact
    tensors are on: float32 normalised images (the crops made first when the batch carries ``warp``;
    photometric augmentation first, for train batches) and float32 maps (drawn when the batch carries
    ``target_polygons``). The memory format is the network's business (``DetectionModule.forward``)."""
    coding = batch["coding"]
    decoded = Batch(**batch)
    warps = batch.get("warp")
    rows = batch.get("photometric")
    if warps is None and rows is None:
        images = normalize_images(batch["images"], coding.mean, coding.std)  # (B, 3, H, W) float32
    else:
        unit = _unit(batch["images"]) if warps is None else warp_regions(batch["images"], warps)
        if rows is not None:
            unit = apply_photometric(unit, rows)
        images = _standardize(unit, coding.mean, coding.std)
    decoded["images"] = images
    polygons = batch.get("target_polygons")
    if polygons is not None:
        height, width = images.shape[2:]
        maps = draw_db_targets(polygons, height, width, coding.thresh_min, coding.thresh_max, images.device)
        decoded.update(maps)  # type: ignore[typeddict-item]
        return decoded
    step = (coding.thresh_max - coding.thresh_min) / THRESH_LEVELS
    decoded["thresh_map"] = batch["thresh_map"].float() * step + coding.thresh_min
    for key in ("prob_map", "prob_mask", "thresh_mask"):
        decoded[key] = batch[key].float()  # type: ignore[literal-required]
    return decoded
