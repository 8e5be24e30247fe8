"""Compact batches: device-side decoding matches the former worker-side float32 batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ocr.data.coding import THRESH_LEVELS, decode_batch, encode_maps, normalize_images
from ocr.data.collate import collate_batch
from ocr.data.dataset import ReceiptDataset
from ocr.data.photometric import apply_photometric
from ocr.data.targets.db import make_db_targets
from ocr.types import BATCH_TENSOR_KEYS, BatchCoding, TargetParams
from tests.helpers.receipt_fixtures import TARGETS, labelled_dataset, make_root, train_transform

IMAGENET = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
CODING = BatchCoding(IMAGENET["mean"], IMAGENET["std"], 0.3, 0.7)


def _worker_side_normalisation(image_hwc: np.ndarray) -> torch.Tensor:
    """The float32 normalisation the workers ran before batches became compact (as it was written)."""
    mean, std = np.asarray(IMAGENET["mean"], np.float32), np.asarray(IMAGENET["std"], np.float32)
    arr = (image_hwc.astype(np.float32) / 255.0 - mean) / std
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))


def test_device_normalisation_equals_the_former_worker_normalisation() -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (2, 48, 40, 3), dtype=np.uint8)
    images[0, 0, :3] = [[0, 0, 0], [255, 255, 255], [128, 64, 32]]
    compact = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()  # (B, 3, H, W) uint8
    expected = torch.stack([_worker_side_normalisation(image) for image in images])
    got = normalize_images(compact, IMAGENET["mean"], IMAGENET["std"])
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


def test_normalisation_refuses_float_images() -> None:
    with pytest.raises(TypeError, match=r"images: expected \(B, 3, H, W\) uint8.*torch.float32"):
        normalize_images(torch.zeros(1, 3, 4, 4), IMAGENET["mean"], IMAGENET["std"])


def test_maps_round_trip_within_half_a_threshold_step() -> None:
    params = TargetParams(thresh_min=0.3, thresh_max=0.7, min_text_size=2)
    polygons = [
        np.array([[4, 6], [50, 8], [49, 22], [5, 20]], np.float32),
        np.array([[10, 30], [60, 30], [60, 52], [10, 52]], np.float32),
    ]
    maps = make_db_targets(polygons, [False, True], 64, 72, params)
    tensors = encode_maps(maps, CODING)
    assert all(t.dtype == torch.uint8 and t.shape == (1, 64, 72) for t in tensors.values())
    batch = {"images": torch.zeros(1, 3, 64, 72, dtype=torch.uint8), "coding": CODING}
    batch.update({key: value[None] for key, value in tensors.items()})
    decoded = decode_batch(batch)  # type: ignore[arg-type]
    for key in ("prob_map", "prob_mask", "thresh_mask"):
        assert decoded[key].dtype == torch.float32
        np.testing.assert_array_equal(decoded[key][0, 0].numpy(), maps[key])
    half_step = (params.thresh_max - params.thresh_min) / (2 * THRESH_LEVELS)
    error = np.abs(decoded["thresh_map"][0, 0].numpy() - maps["thresh_map"])
    assert error.max() <= half_step + 1e-6
    assert np.ptp(maps["thresh_map"]) > 0.2  # the map had a border to quantise


def test_decode_keeps_the_host_fields_and_the_default_layout() -> None:
    batch = {
        "images": torch.full((2, 3, 8, 8), 255, dtype=torch.uint8),
        **{key: torch.ones(2, 1, 8, 8, dtype=torch.uint8) for key in BATCH_TENSOR_KEYS[1:]},
        "image_id": ["a", "b"],
        "coding": CODING,
    }
    decoded = decode_batch(batch)  # type: ignore[arg-type]
    assert decoded["images"].is_contiguous()  # channels_last is the network's (DetectionModule.forward)
    assert decoded["image_id"] is batch["image_id"] and batch["images"].dtype == torch.uint8
    assert float(decoded["thresh_map"].max()) == pytest.approx(0.3 + 0.4 / THRESH_LEVELS)


def test_a_640_px_training_sample_is_at_most_3_mb_on_the_wire(tmp_path: Path) -> None:
    dataset = labelled_dataset(make_root(tmp_path, num_images=2), "train", train_transform(640, **IMAGENET))
    batch = collate_batch([dataset[0], dataset[1]])
    assert batch["images"].shape == (2, 3, 640, 640)
    per_sample = sum(batch[key].nbytes for key in BATCH_TENSOR_KEYS) / 2
    assert per_sample <= 3e6, per_sample
    assert batch["coding"] == BatchCoding(IMAGENET["mean"], IMAGENET["std"], 0.3, 0.7)
    # the photometric rows (host-side, not among the tensors that travel) are what decode_batch applies
    rows = batch["photometric"]
    assert rows is not None and rows.shape[0] == 2 and rows.dtype == torch.float32
    mean, std = (torch.tensor(IMAGENET[k]).view(1, 3, 1, 1) for k in ("mean", "std"))
    expected = (apply_photometric(batch["images"].float() / 255.0, rows) - mean) / std
    decoded = decode_batch(batch)["images"]
    torch.testing.assert_close(decoded, expected, atol=1e-5, rtol=1e-5)


def test_collate_refuses_a_mix_of_train_and_eval_samples(tmp_path: Path) -> None:
    root = make_root(tmp_path, num_images=1)
    common = {"root": root, "split": "train", "exif_mode": "rotated", "on_missing_image": "fail"}
    common |= {"min_polygon_size": 1.0, "targets": TARGETS, "cache_dir": None, "render_on": "worker"}
    train = ReceiptDataset(transform=train_transform(64, **IMAGENET), **common)[0]
    evaluation = dict(train, photometric=None)
    with pytest.raises(ValueError, match="every sample has photometric or none"):
        collate_batch([train, evaluation])  # type: ignore[list-item]
