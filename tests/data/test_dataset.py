"""ReceiptDataset, ImageFolderDataset and collate on tiny on-disk fixtures (incl. 8 EXIF orientations)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from receipt_fixtures import BLOCK, TARGETS, block_image, block_words, eval_transform, make_root, write_split

from ocr.data.collate import collate_batch
from ocr.data.dataset import ImageFolderDataset, ReceiptDataset
from ocr.data.images import ImageReadError, orientation_matrix
from ocr.data.transforms import denormalize
from ocr.geometry import apply_matrix, to_input, to_original

MEAN, STD = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)


def _dataset(
    root: Path,
    split: str = "val",
    long_side: int = 64,
    on_missing: str = "skip",
    exif_mode: str = "rotated",
    cache_dir: Path | None = None,
) -> ReceiptDataset:
    return ReceiptDataset(
        root=root,
        split=split,
        transform=eval_transform(long_side),
        exif_mode=exif_mode,
        on_missing_image=on_missing,
        min_polygon_size=1.0,
        targets=TARGETS,
        cache_dir=cache_dir,
    )


def _prob_centroid(sample: dict) -> np.ndarray:
    """Centre of the prob map's text pixels in input px.

    Pixel index = coordinate, the cv2.fillPoly/findContours convention the targets and post-processing share.
    """
    ys, xs = np.nonzero(sample["prob_map"][0].numpy() > 0.5)
    return np.array([[xs.mean(), ys.mean()]], np.float32)


def test_sample_contract_and_scan_counts(tmp_path: Path) -> None:
    dataset = _dataset(make_root(tmp_path))
    assert len(dataset) == 3
    sample = dataset[0]
    assert sample["image"].shape == (3, 64, 64) and sample["image"].dtype == torch.float32
    for key in ("prob_map", "prob_mask", "thresh_map", "thresh_mask"):
        assert sample[key].shape == (1, 64, 64) and sample[key].dtype == torch.float32, key
    # the two-point polygon is removed and counted; the don't-care word is kept with ignore=True
    assert sample["ignore"] == [False, True] and sample["texts"] == ["TOTAL", "###"]
    assert sample["sanitation"] == {"too_few_points": 1}
    np.testing.assert_allclose(sample["polygons"][0], BLOCK)
    assert dataset.report.sanitation == {"too_few_points": 3}
    assert (dataset.report.num_words, dataset.report.num_ignore) == (6, 3)
    assert sample["prob_map"].sum() > 0 and sample["thresh_mask"].sum() > 0
    assert sample["prob_mask"][0, 5:11, 49:59].sum() == 0  # don't-care region (x 48-60, y 4-12) masked
    np.testing.assert_allclose(
        to_original([_prob_centroid(sample)], sample["geometry"])[0][0], BLOCK.mean(axis=0), atol=1.0
    )


def _exif_jpeg(path: Path, orientation: int) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation
    block_image(96, 64).save(path, quality=95, exif=exif)


@pytest.mark.parametrize("exif_mode", ["raw", "rotated"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_round_trip_within_one_pixel(tmp_path: Path, orientation: int, exif_mode: str) -> None:
    """Raw block -> upright original px -> letterboxed input -> to_original lands on the block."""
    raw_block = np.array([[30, 40], [80, 40], [80, 60], [30, 60]], np.float32)  # inside the 96x64 image
    upright = apply_matrix(raw_block, orientation_matrix(orientation, 96, 64))
    stored = raw_block if exif_mode == "raw" else upright
    name = f"o{orientation}.jpg"
    write_split(tmp_path, "val", {name: [{"points": stored.tolist()}]}, create=False)
    _exif_jpeg(tmp_path / "images" / "val" / name, orientation)
    sample = _dataset(tmp_path, long_side=128, exif_mode=exif_mode)[0]
    geometry = sample["geometry"]
    assert (geometry.orig_width, geometry.orig_height) == ((64, 96) if orientation >= 5 else (96, 64))
    np.testing.assert_allclose(sample["polygons"][0], upright, atol=1e-3)
    centre_px = to_input([upright.mean(axis=0, keepdims=True)], geometry)[0][0]
    pixel = denormalize(sample["image"], MEAN, STD)[int(centre_px[1]), int(centre_px[0])]
    assert pixel[0] > 180 and pixel[1] < 90, f"block colour expected at the mapped centre, got {pixel}"
    back = to_original([_prob_centroid(sample)], geometry)[0][0]
    np.testing.assert_allclose(back, upright.mean(axis=0), atol=1.0)


def test_missing_image_skip_and_count_vs_fail(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    make_root(tmp_path)
    write_split(tmp_path, "val", {"val_0.png": block_words(), "ghost.png": block_words()}, create=False)
    with caplog.at_level(logging.WARNING, logger="ocr.data.dataset"):
        dataset = _dataset(tmp_path, on_missing="skip")
    assert len(dataset) == 1 and dataset.report.missing == ["ghost.png"]
    assert len([r for r in caplog.records if "ghost.png" in r.getMessage()]) == 1
    with pytest.raises(FileNotFoundError, match="ghost.png"):
        _dataset(tmp_path, on_missing="fail")


def test_corrupt_image_skip_and_count_vs_fail(tmp_path: Path) -> None:
    make_root(tmp_path)
    write_split(tmp_path, "val", {"val_0.png": block_words(), "bad.jpg": block_words()}, create=False)
    (tmp_path / "images" / "val" / "bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    dataset = _dataset(tmp_path, on_missing="skip")
    assert len(dataset) == 1 and dataset.report.unreadable == ["bad.jpg"]
    with pytest.raises(ImageReadError, match="bad.jpg"):
        _dataset(tmp_path, on_missing="fail")


def test_reduced_scale_decode_and_cache_keep_geometry(tmp_path: Path) -> None:
    """A 256 px JPEG for a 64 px input is DCT-decoded small; cached or not, geometry maps to full res."""
    big = np.full((192, 256, 3), 255, np.uint8)
    big[64:128, 48:208] = (255, 0, 0)
    block = np.array([[48, 64], [208, 64], [208, 128], [48, 128]], np.float32)
    write_split(tmp_path, "val", {"big.jpg": [{"points": block.tolist()}]}, create=False)
    Image.fromarray(big).save(tmp_path / "images" / "val" / "big.jpg", quality=95)
    samples = [_dataset(tmp_path, cache_dir=tmp_path / "cache")[0] for _ in range(2)]  # miss, then hit
    assert list((tmp_path / "cache").rglob("*.npy"))
    np.testing.assert_allclose(samples[0]["image"].numpy(), samples[1]["image"].numpy())
    for sample in samples:
        np.testing.assert_allclose(
            to_original([_prob_centroid(sample)], sample["geometry"])[0][0], block.mean(axis=0), atol=2.0
        )


def test_invalid_options_fail_loudly(tmp_path: Path) -> None:
    make_root(tmp_path)
    with pytest.raises(ValueError, match="on_missing_image"):
        _dataset(tmp_path, on_missing="ignore")
    with pytest.raises(ValueError, match="targets"):
        ReceiptDataset(
            root=tmp_path,
            split="val",
            transform=eval_transform(),
            exif_mode="rotated",
            on_missing_image="skip",
            min_polygon_size=1.0,
            targets={**TARGETS, "k": 50},
            cache_dir=None,
        )
    with pytest.raises(FileNotFoundError, match="nosuch.json"):
        _dataset(tmp_path, split="nosuch")


def test_image_folder_dataset(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    block_image().save(tmp_path / "b.png")
    block_image(80, 200).save(tmp_path / "sub" / "a.JPG")
    (tmp_path / "notes.txt").write_text("not an image")
    dataset = ImageFolderDataset(image_dir=tmp_path, transform=eval_transform())
    assert dataset.files == ["b.png", "sub/a.JPG"]
    sample = dataset[1]
    assert sample["image"].shape == (3, 64, 64) and sample["prob_map"].sum() == 0 and sample["polygons"] == []
    assert (sample["geometry"].orig_width, sample["geometry"].orig_height) == (80, 200)
    with pytest.raises(FileNotFoundError):
        ImageFolderDataset(image_dir=tmp_path / "missing", transform=eval_transform())


def test_collate_batch_contract(tmp_path: Path) -> None:
    dataset = _dataset(make_root(tmp_path))
    batch = collate_batch([dataset[0], dataset[1]])
    assert batch["images"].shape == (2, 3, 64, 64) and batch["prob_map"].shape == (2, 1, 64, 64)
    assert batch["image_id"] == ["val_0.png", "val_1.png"] and len(batch["geometry"]) == 2
    assert batch["sanitation"] == {"too_few_points": 2} and batch["ignore"] == [[False, True]] * 2
    other = ReceiptDataset(
        root=tmp_path,
        split="val",
        transform=eval_transform(32),
        exif_mode="rotated",
        on_missing_image="skip",
        min_polygon_size=1.0,
        targets=TARGETS,
        cache_dir=None,
    )
    with pytest.raises(ValueError, match="val_0.png"):
        collate_batch([dataset[0], other[0]])
    with pytest.raises(ValueError, match="empty"):
        collate_batch([])
