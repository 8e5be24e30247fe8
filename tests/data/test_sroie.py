"""Integration on the shared real receipts (../shared/datasets/sroie-compact); skipped when absent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ocr.data.coding import decode_batch
from ocr.data.collate import collate_batch
from ocr.data.dataset import ReceiptDataset
from ocr.data.transforms import EvalTransform, Transform
from ocr.geometry import to_input
from tests.helpers.receipt_fixtures import TARGETS, train_transform

IMAGENET = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}


def _dataset(root: Path, split: str, transform: Transform) -> ReceiptDataset:
    return ReceiptDataset(
        root=root,
        split=split,
        transform=transform,
        exif_mode="auto",
        on_missing_image="fail",
        min_polygon_size=1.0,
        targets=TARGETS,
        cache_dir=None,
    )


def test_val_batch_at_1024(sroie_root: Path) -> None:
    dataset = _dataset(
        sroie_root, "val", EvalTransform(long_side=1024, fill=0, pad_multiple=None, **IMAGENET)
    )
    assert len(dataset) == 50 and dataset.report.num_words > 1000
    batch = decode_batch(collate_batch([dataset[0], dataset[1]]), channels_last=False)
    assert batch["images"].shape == (2, 3, 1024, 1024) and batch["prob_map"].shape == (2, 1, 1024, 1024)
    for i in range(2):
        geometry = batch["geometry"][i]
        assert max(geometry.orig_width, geometry.orig_height) <= 2000
        polygons_px = to_input(batch["polygons"][i], geometry)
        assert all((p >= -1).all() and (p <= 1025).all() for p in polygons_px)
        text_fraction = float(batch["prob_map"][i].mean())
        assert 0.01 < text_fraction < 0.5, text_fraction
        # text pixels are darker than the paper around them
        ink = batch["images"][i].mean(0)[batch["prob_map"][i, 0] > 0.5].mean()
        paper = (
            batch["images"][i]
            .mean(0)[(batch["thresh_mask"][i, 0] == 0) & (batch["images"][i].mean(0) > -1.5)]
            .mean()
        )
        assert ink < paper


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_train_crops_keep_text(seed: int, sroie_root: Path) -> None:
    # Receipt-like scale (long side 512 * [0.5, 2]) and always a text-centred crop: every crop holds text.
    transform = train_transform(256, train_long_side=512, scale_range=(0.5, 2.0), p_text_crop=1.0)
    transform.set_random_seed(seed)
    dataset = _dataset(sroie_root, "train", transform)
    for i in np.linspace(0, len(dataset) - 1, 6).astype(int):
        assert float(dataset[int(i)]["prob_map"].sum()) > 0, f"seed {seed}: crop of image {i} has no text"
