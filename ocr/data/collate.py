"""Collate samples into the batch contract (``ocr.types.Batch``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor

from ocr.data.device_targets import pack_polygons
from ocr.data.device_warp import pack_regions
from ocr.data.sanitize import merge_counts
from ocr.types import TARGET_KEYS, Batch, Sample

__all__ = ["collate_batch"]


def collate_batch(samples: Sequence[Sample]) -> Batch:
    """Stack the compact tensors; keep polygons, flags, geometry and ids as per-sample lists, the samples'
    one ``BatchCoding`` and their photometric rows; pack device-warp regions into one 1-D buffer and pad
    device-drawn polygons into tensors. ValueError (naming the image ids): no samples, differing shapes or
    codings, or a mix of samples with and without photometric parameters, warps or target polygons."""
    if not samples:
        raise ValueError("collate_batch: expected at least one sample, got an empty list")
    for field in ("photometric", "warp", "target_polygons"):
        if len({s[field] is None for s in samples}) != 1:  # type: ignore[literal-required]
            flags = [(s["image_id"], s[field] is not None) for s in samples]  # type: ignore[literal-required]
            raise ValueError(f"collate_batch: either every sample has {field} or none, got {flags}")
    codings = {s["coding"] for s in samples}
    if len(codings) != 1:
        by_id = [(s["image_id"], s["coding"]) for s in samples]
        raise ValueError(
            f"collate_batch: samples must share one BatchCoding to decode as one batch, got {by_id}"
        )
    first, coding = samples[0], samples[0]["coding"]
    if first["warp"] is None:
        shapes = [(s["image_id"], tuple(s["image"].shape)) for s in samples]
        if len({shape for _, shape in shapes}) != 1:
            raise ValueError(f"collate_batch: images must share one (3, H, W) shape to stack, got {shapes}")
        images, warp = _stack([s["image"] for s in samples]), None  # (B, 3, H, W)
    else:
        regions = [s["image"] for s in samples]
        out = _batch_buffer(sum(r.numel() for r in regions), torch.uint8)
        images, warp = pack_regions(regions, [s["warp"] for s in samples], out)  # type: ignore[misc]
    maps: dict[str, Tensor | None] = dict.fromkeys(TARGET_KEYS)
    target_polygons = None
    if first["target_polygons"] is None:
        maps = {key: _stack([s[key] for s in samples]) for key in TARGET_KEYS}  # type: ignore[misc]
    else:
        height, width = warp.out_size if warp is not None else tuple(images.shape[2:])
        assert coding.targets is not None  # a dataset sets both (ocr.data.dataset, render_on=device)
        target_polygons = pack_polygons(
            [s["target_polygons"] for s in samples],  # type: ignore[misc]
            [s["target_ignore"] for s in samples],  # type: ignore[misc]
            height,
            width,
            coding.targets,
        )
    rows = [s["photometric"] for s in samples]
    return cast(
        Batch,
        {
            "images": images,
            **maps,
            "polygons": [s["polygons"] for s in samples],
            "ignore": [s["ignore"] for s in samples],
            "texts": [s["texts"] for s in samples],
            "geometry": [s["geometry"] for s in samples],
            "image_id": [s["image_id"] for s in samples],
            "sanitation": merge_counts(*(s["sanitation"] for s in samples)),
            "coding": coding,
            "photometric": None if rows[0] is None else torch.stack(rows),  # type: ignore[arg-type]
            "warp": warp,
            "target_polygons": target_polygons,
        },
    )


def _stack(tensors: Sequence[Tensor]) -> Tensor:
    """``torch.stack`` into a buffer that :func:`_batch_buffer` allocates."""
    out = _batch_buffer(len(tensors) * tensors[0].numel(), tensors[0].dtype)
    return torch.stack(list(tensors), out=out.view(len(tensors), *tensors[0].shape))


def _batch_buffer(numel: int, dtype: torch.dtype) -> Tensor:
    """A 1-D tensor for a batch; in a DataLoader worker in shared memory, as torch's default_collate
    allocates it, so that handing the batch to the main process does not copy it once more."""
    if torch.utils.data.get_worker_info() is None:
        return torch.empty(numel, dtype=dtype)
    storage = torch.empty(0, dtype=dtype)._typed_storage()._new_shared(numel)
    return torch.empty(0, dtype=dtype).new(storage)  # type: ignore[call-overload]
