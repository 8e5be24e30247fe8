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
from tests.data.test_render_on import assert_same_maps
from tests.helpers.receipt_fixtures import labelled_dataset, train_transform

IMAGENET = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}


def _dataset(root: Path, split: str, transform: Transform, render_on: str = "worker") -> ReceiptDataset:
    return labelled_dataset(root, split, transform, render_on, exif_mode="auto")


def test_val_batch_at_1024(sroie_root: Path) -> None:
    dataset = _dataset(
        sroie_root, "val", EvalTransform(long_side=1024, fill=0, pad_multiple=None, **IMAGENET)
    )
    assert len(dataset) == 50 and dataset.report.num_words > 1000
    batch = decode_batch(collate_batch([dataset[0], dataset[1]]))
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


def test_the_device_path_gives_the_worker_path_batch(sroie_root: Path) -> None:
    """data.render_on=device on real receipts: the same crops (within a grey level) and maps (within the
    tolerances of tests/data/test_device_targets.py) as the worker path from the same draws."""
    decoded = []
    for render_on in ("worker", "device"):
        transform = train_transform(256, train_long_side=512, p_text_crop=1.0, mean=(0, 0, 0), std=(1, 1, 1))
        transform.set_random_seed(3)
        dataset = _dataset(sroie_root, "train", transform, render_on)
        batch = collate_batch([dataset[i] for i in (0, 40, 80, 120)])
        decoded.append(decode_batch(batch))
    worker, device = decoded
    grey = (device["images"] - worker["images"]).abs() * 255
    assert float(grey.mean()) < 0.5 and float(grey.max()) <= 3
    assert_same_maps(worker, device)
