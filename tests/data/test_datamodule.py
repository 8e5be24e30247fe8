"""ReceiptDataModule: loaders with workers, per-worker seeding, synthetic auto-generation, Hydra configs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import hydra
import numpy as np
import pytest
import torch
from omegaconf import DictConfig

from ocr.data.coding import decode_batch
from ocr.data.datamodule import ReceiptDataModule
from ocr.types import TARGET_KEYS
from ocr.utils.hardware import pick
from tests.helpers.receipt_fixtures import (
    TARGETS,
    block_words,
    eval_transform,
    make_root,
    train_transform,
    write_split,
)


def _module(
    root: Path,
    num_workers: int = 0,
    synthetic: dict[str, int] | None = None,
    batch_size: int = 2,
    render_on: str = "worker",
) -> ReceiptDataModule:
    return ReceiptDataModule(
        root=str(root),
        train_split="train",
        val_split="val",
        test_split="test",
        predict_image_dir=None,
        train_transform=train_transform(64),
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
        persistent_workers=True,
        synthetic=synthetic,
    )


def _check_batch(batch: dict[str, Any], size: int, count: int) -> None:
    assert batch["images"].shape == (count, 3, size, size) and batch["images"].dtype == torch.uint8
    for key in ("prob_map", "prob_mask", "thresh_map", "thresh_mask"):
        assert batch[key].shape == (count, 1, size, size) and batch[key].dtype == torch.uint8, key
    assert (
        len(batch["polygons"])
        == len(batch["ignore"])
        == len(batch["geometry"])
        == len(batch["image_id"])
        == count
    )
    assert all(p.ndim == 2 and p.shape[1] == 2 for polys in batch["polygons"] for p in polys)


def test_loaders_with_two_workers(tmp_path: Path) -> None:
    module = _module(make_root(tmp_path, num_images=4), num_workers=2)
    module.prepare_data()
    module.setup("fit")
    train_loader = module.train_dataloader()
    assert train_loader.persistent_workers and train_loader.num_workers == 2
    batches = list(train_loader)
    assert len(batches) == 2
    for batch in batches:
        _check_batch(batch, 64, 2)
        assert batch["prob_map"].sum() > 0
    _check_batch(next(iter(module.val_dataloader())), 64, 2)
    _check_batch(next(iter(module.test_dataloader())), 64, 2)
    module.setup("predict")
    predict = next(iter(module.predict_dataloader()))
    _check_batch(predict, 64, 2)
    assert predict["polygons"] == [[], []]


def test_batches_the_device_renders_come_through_two_workers(tmp_path: Path) -> None:
    """data.render_on=device: regions and polygons collated in the workers (shared memory) decode to the
    batch contract."""
    module = _module(make_root(tmp_path, num_images=4), num_workers=2, render_on="device")
    module.setup("fit")
    for loader, size in ((module.train_dataloader(), 64), (module.val_dataloader(), 64)):
        for compact in loader:
            assert compact["prob_map"] is None and compact["target_polygons"] is not None
            batch = decode_batch(compact, channels_last=False)
            assert batch["images"].shape == (2, 3, size, size) and batch["images"].dtype == torch.float32
            assert all(batch[key].shape == (2, 1, size, size) for key in TARGET_KEYS)
            assert float((batch["prob_map"] * batch["prob_mask"]).sum()) > 0


def test_workers_draw_different_augmentations(tmp_path: Path) -> None:
    """Identical images in two workers must not get identical crops (per-worker seeding)."""
    for split in ("train", "val"):
        write_split(tmp_path, split, {f"same_{i}.png": block_words() for i in range(4)})
    module = _module(tmp_path, num_workers=2, batch_size=1)
    matrices = [batch["geometry"][0].matrix for batch in module.train_dataloader()]
    assert len(matrices) == 4
    assert not np.allclose(matrices[0], matrices[1])


def test_synthetic_data_is_generated_on_first_use(tmp_path: Path) -> None:
    root = tmp_path / "generated"
    module = _module(
        root,
        synthetic={
            "num_train": 2,
            "num_val": 1,
            "num_test": 1,
            "seed": 0,
            "long_side": 128,
            "style": "basic",
            "granularity": "word",
        },
    )
    module.prepare_data()
    module.setup("fit")
    assert (len(module.datasets["train"]), len(module.datasets["val"])) == (2, 1)
    _check_batch(next(iter(module.train_dataloader())), 64, 2)
    with pytest.raises(ValueError, match="synthetic"):
        _module(root, synthetic={"num_train": 2})


@pytest.mark.parametrize("name", ["synthetic", "receipts"])
def test_data_configs_build_loaders_at_their_sizes(
    tmp_path: Path, name: str, compose_cfg: Callable[..., DictConfig]
) -> None:
    """Each data config builds a datamodule whose batches come out at the config's crop and letterbox."""
    make_root(tmp_path, num_images=2)
    small = ["data.batch_size=2", "data.eval_batch_size=2", "data.num_workers=0", "data.pin_memory=false"]
    overrides = [f"data={name}", f"data.root={tmp_path}", "data.synthetic=null", *small]
    cfg = compose_cfg("train", overrides, tmp_path)
    module = hydra.utils.instantiate(cfg.data)
    assert isinstance(module, ReceiptDataModule)
    module.setup("fit")
    # The synthetic default is smaller on a machine without a GPU (hw.pick:<cpu>,<gpu>).
    crop = {"synthetic": pick(160, 640), "receipts": 640}[name]
    long_side = {"synthetic": pick(512, 640), "receipts": 1024}[name]
    train = next(iter(module.train_dataloader()))
    _check_batch(train, crop, 2)
    assert train["prob_map"].sum() > 0
    _check_batch(next(iter(module.val_dataloader())), long_side, 2)


def test_an_empty_train_split_fails_naming_split_and_file(tmp_path: Path) -> None:
    make_root(tmp_path)
    write_split(tmp_path, "train", {})
    with pytest.raises(
        ValueError, match=r"train\.json: train split 'train' <data\.train_split=train> has no usable"
    ):
        _module(tmp_path).setup("fit")
    write_split(tmp_path, "train", {"ghost_0.png": block_words(), "ghost_1.png": block_words()}, create=False)
    with pytest.raises(ValueError, match=r"2 listed, 2 missing, 0 unreadable\); training needs at least one"):
        _module(tmp_path).setup("fit")


def test_an_empty_val_split_warns_at_start_and_keeps_the_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_root(tmp_path)
    write_split(tmp_path, "val", {})
    module = _module(tmp_path)
    with caplog.at_level(logging.WARNING, logger="ocr.data.datamodule"):
        module.setup("fit")
    assert module.no_validation_reason is not None and "val split 'val'" in module.no_validation_reason
    [warning] = [r.getMessage() for r in caplog.records if r.name == "ocr.data.datamodule"]
    assert "no validation will run, so no val/hmean and no best checkpoint" in warning
    assert _module(make_root(tmp_path / "full")).no_validation_reason is None


@pytest.mark.parametrize("stage", ["fit", "test"])
def test_each_rank_needs_an_evaluation_image(tmp_path: Path, stage: str) -> None:
    """Evaluation is sharded without repeats: 3 images cannot feed 4 ranks (their sync would hang)."""
    make_root(tmp_path, num_images=3)
    module = _module(tmp_path)
    module.trainer = SimpleNamespace(world_size=4)  # what Lightning sets; no process group needed
    split = "val" if stage == "fit" else "test"
    with pytest.raises(ValueError, match=rf"{split} split '{split}'.* has 3 images for 4 ranks \(DDP\)"):
        module.setup(stage)
    module.trainer = SimpleNamespace(world_size=3)
    module.setup(stage)
    assert len(module.datasets[split]) == 3


def test_train_runner_says_no_validation_ran(
    tmp_path: Path,
    tiny_run: list[str],
    compose_cfg: Callable[[str, list[str], Path], DictConfig],
    runner_module: Callable[[str], ModuleType],
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path / "data"
    write_split(root, "train", {f"t{i}.png": block_words() for i in range(2)})
    write_split(root, "val", {})
    overrides = [*tiny_run, f"data.root={root}", "data.synthetic=null", "trainer.max_steps=1"]
    overrides += ["test_after_fit=false", "logger=none"]
    runner_module("train").train(compose_cfg("train", overrides, tmp_path / "run"))
    assert (tmp_path / "run" / ".SUCCESS").is_file()
    out = capsys.readouterr().out
    assert f"No validation ran: {root / 'jsons' / 'val.json'}: val split 'val'" in out
    assert "the annotation file lists no image" in out
