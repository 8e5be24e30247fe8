"""Collate samples into the batch contract (``ocr.types.Batch``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ocr.data.sanitize import merge_counts
from ocr.types import TARGET_KEYS, Batch, Sample

__all__ = ["collate_batch"]


def collate_batch(samples: Sequence[Sample]) -> Batch:
    """Stack the compact image and target tensors; keep polygons, flags, geometry and ids as per-sample
    lists, the samples' one ``BatchCoding`` and their photometric rows (stacked, or None in eval).

    Raises:
        ValueError: no samples, samples whose tensor shapes differ, or samples with different codings
            (names the image ids).
    """
    if not samples:
        raise ValueError("collate_batch: expected at least one sample, got an empty list")
    shapes = {tuple(s["image"].shape) for s in samples}
    if len(shapes) != 1:
        ids = [(s["image_id"], tuple(s["image"].shape)) for s in samples]
        raise ValueError(f"collate_batch: images must share one (3, H, W) shape to stack, got {ids}")
    codings = {s["coding"] for s in samples}
    if len(codings) != 1:
        by_id = [(s["image_id"], s["coding"]) for s in samples]
        raise ValueError(
            f"collate_batch: samples must share one BatchCoding to decode as one batch, got {by_id}"
        )
    rows = [s["photometric"] for s in samples]
    if len({row is None for row in rows}) != 1:
        flags = [(s["image_id"], s["photometric"] is not None) for s in samples]
        raise ValueError(
            f"collate_batch: either every sample has photometric parameters or none, got {flags}"
        )
    stacked = {key: torch.stack([s[key] for s in samples]) for key in TARGET_KEYS}  # (B, 1, H, W)
    return Batch(
        images=torch.stack([s["image"] for s in samples]),  # (B, 3, H, W)
        prob_map=stacked["prob_map"],
        prob_mask=stacked["prob_mask"],
        thresh_map=stacked["thresh_map"],
        thresh_mask=stacked["thresh_mask"],
        polygons=[s["polygons"] for s in samples],
        ignore=[s["ignore"] for s in samples],
        texts=[s["texts"] for s in samples],
        geometry=[s["geometry"] for s in samples],
        image_id=[s["image_id"] for s in samples],
        sanitation=merge_counts(*(s["sanitation"] for s in samples)),
        coding=samples[0]["coding"],
        photometric=None if rows[0] is None else torch.stack(rows),  # type: ignore[arg-type]
    )
