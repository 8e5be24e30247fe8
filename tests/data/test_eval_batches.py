"""Eval batches of one input size each: a receipt is padded to a multiple, not to the square, and the
pixels the network sees are the square letterbox's own (cropped)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hydra.utils import instantiate
from PIL import Image

from ocr.data.dataset import ImageFolderDataset
from ocr.data.eval_batches import eval_loader, plan_batches
from ocr.data.images import ImageReadError
from ocr.data.scan import load_source
from ocr.data.transforms import EvalTransform, SourceImage, resize_by
from ocr.geometry import to_original
from ocr.run.config import compose_config
from ocr.types import Geometry
from tests.helpers.receipt_fixtures import MEAN, STD, block_words, labelled_dataset, write_split


def _transform(long_side: int, pad_multiple: int | None) -> EvalTransform:
    return EvalTransform(long_side=long_side, mean=MEAN, std=STD, fill=0, pad_multiple=pad_multiple)


def test_batches_hold_one_size_keep_dataset_order_and_cover_every_rank() -> None:
    sizes = [(64, 32), (64, 48), (64, 32), (64, 32), (64, 48), (64, 32)]
    assert plan_batches(sizes, 2, min_batches=1) == [[0, 2], [3, 5], [1, 4]]
    assert plan_batches([(64, 64)] * 5, 2, min_batches=1) == [[0, 1], [2, 3], [4]]  # the plain batches
    assert plan_batches([], 2, min_batches=2) == []  # an empty split: no batch, no error
    # Under DDP every rank needs a batch: the largest ones are split, never past one image each.
    assert plan_batches([(64, 64)] * 3, 8, min_batches=2) == [[0, 1], [2]]
    assert plan_batches([(64, 64)] * 2, 8, min_batches=4) == [[0], [1]]


@pytest.mark.parametrize("size", [(150, 200), (1000, 1333), (333, 2000), (2000, 611), (97, 1024), (1024, 45)])
def test_padded_input_is_the_square_letterbox_cropped(size: tuple[int, int]) -> None:
    """Same pixels, same geometry in original px: only padding is dropped (decoded at reduced scale too)."""
    width, height = size
    rng = np.random.default_rng(width * height)
    path_image = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
    for source_scale in (1.0, 0.5):
        shape = (max(1, round(height * source_scale)), max(1, round(width * source_scale)), 3)
        source = SourceImage(
            resize_by(path_image, source_scale)[: shape[0], : shape[1]], source_scale, width, height
        )
        square = _transform(256, None)(source, [], [])
        padded = _transform(256, 32)(source, [], [])
        out_h, out_w = padded.image.shape[1:]
        assert (out_h, out_w) == _transform(256, 32).input_size(width, height)
        assert out_h % 32 == 0 and out_w % 32 == 0 and max(out_h, out_w) == 256
        assert np.array_equal(padded.image.numpy(), square.image[:, :out_h, :out_w].numpy())
        assert not square.image[:, out_h:, :].any() and not square.image[:, :, out_w:].any()  # padding only
        assert (padded.geometry.input_height, padded.geometry.input_width) == (out_h, out_w)
        corner = [np.array([[out_w - 1, out_h - 1], [0, 0], [5, 7]], np.float32)]
        np.testing.assert_array_equal(
            to_original(corner, padded.geometry), to_original(corner, square.geometry)
        )


def test_receipt_batches_are_not_padded_to_the_square(tmp_path: Path) -> None:
    """Tall receipts at long side 128: inputs 128 x 64 and 128 x 96 (a multiple of 32), in batches of
    one size; the square would have computed 128 x 128 for each."""
    names = {"a.png": (60, 128), "b.png": (90, 120), "c.png": (40, 100), "d.png": (80, 110)}
    write_split(tmp_path, "val", {name: block_words() for name in names}, create=False)
    for name, (width, height) in names.items():
        Image.new("RGB", (width, height), (255, 255, 255)).save(tmp_path / "images" / "val" / name)
    dataset = labelled_dataset(tmp_path, "val", _transform(128, 32))
    loader = eval_loader(
        dataset,
        batch_size=4,
        world_size=1,
        num_workers=0,
        pin_memory=False,
        persistent_workers=False,
        worker_init_fn=lambda worker_id: None,
    )
    shapes = [(tuple(b["images"].shape), b["image_id"]) for b in loader]
    assert shapes == [((2, 3, 128, 64), ["a.png", "c.png"]), ((2, 3, 128, 96), ["b.png", "d.png"])]
    folder = ImageFolderDataset(image_dir=tmp_path / "images" / "val", transform=_transform(128, 32))
    assert [folder.input_size(i) for i in range(4)] == [(128, 64), (128, 96), (128, 64), (128, 96)]


def test_an_unreadable_predict_image_gets_a_blank_of_its_planned_size(tmp_path: Path) -> None:
    """A truncated JPEG whose header reads: its blank stand-in has the size its batch was planned for."""
    noise = np.random.default_rng(0).integers(0, 255, (128, 60, 3), dtype=np.uint8)
    Image.fromarray(noise).save(tmp_path / "tall.jpg", quality=95)
    (tmp_path / "broken.jpg").write_bytes((tmp_path / "tall.jpg").read_bytes()[:-2000])  # header kept
    folder = ImageFolderDataset(image_dir=tmp_path, transform=_transform(128, 32))
    with pytest.raises(ImageReadError):
        load_source(tmp_path / "broken.jpg", 128)
    planned = [folder.input_size(i) for i in range(len(folder))]
    samples = [folder[i] for i in range(len(folder))]
    assert [tuple(s["image"].shape[1:]) for s in samples] == planned == [(128, 64), (128, 64)]
    assert isinstance(samples[0]["geometry"], Geometry) and samples[0]["geometry"].orig_width == 60


@pytest.mark.parametrize("pad_multiple", [32, None])
def test_val_test_and_predict_loaders_of_the_receipts_config(
    tmp_path: Path, pad_multiple: int | None
) -> None:
    """Every image once, in batches of one input size; without ``pad_multiple`` the batches are the plain
    consecutive ones of before (all squares)."""
    names = {
        "a.png": (60, 128),
        "b.png": (90, 120),
        "c.png": (40, 100),
        "d.png": (80, 110),
        "e.png": (50, 90),
    }
    for split in ("val", "test"):
        write_split(tmp_path, split, {name: block_words() for name in names}, create=False)
        for name, (width, height) in names.items():
            Image.new("RGB", (width, height), (255, 255, 255)).save(tmp_path / "images" / split / name)
    overrides = [
        "data=receipts",
        f"data.root={tmp_path}",
        "data.eval_transform.long_side=128",
        f"data.eval_transform.pad_multiple={'null' if pad_multiple is None else pad_multiple}",
        "data.eval_batch_size=2",
        "data.num_workers=0",
        "data.persistent_workers=false",
        "data.pin_memory=false",
    ]
    datamodule = instantiate(compose_config("train", overrides).data)
    loaders = [datamodule.val_dataloader(), datamodule.test_dataloader(), datamodule.predict_dataloader()]
    for loader in loaders:
        batches = [(tuple(b["images"].shape[2:]), b["image_id"]) for b in loader]
        assert sorted(i for _, ids in batches for i in ids) == sorted(names)
        if pad_multiple is None:
            assert batches == [
                ((128, 128), ["a.png", "b.png"]),
                ((128, 128), ["c.png", "d.png"]),
                ((128, 128), ["e.png"]),
            ]
        else:
            assert batches == [
                ((128, 64), ["a.png", "c.png"]),
                ((128, 96), ["b.png", "d.png"]),
                ((128, 96), ["e.png"]),
            ]
