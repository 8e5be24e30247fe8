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
from ocr.data.collate import collate_batch
from ocr.data.datamodule import ReceiptDataModule, seed_worker
from ocr.data.photometric import apply_photometric
from ocr.data.stream import TrainStream
from ocr.machine.hardware import pick
from ocr.types import BATCH_TENSOR_KEYS, TARGET_KEYS, Batch
from ocr.utils.errors import ConfigValueError, InputNotFoundError
from tests.helpers.receipt_fixtures import (
    block_words,
    make_root,
    receipt_datamodule,
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
    return receipt_datamodule(
        root, num_workers=num_workers, synthetic=synthetic, batch_size=batch_size, render_on=render_on
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
    assert isinstance(train_loader, TrainStream) and len(train_loader) == 2
    batches = list(train_loader)  # one epoch
    assert len(batches) == 2
    val_loader = module.val_dataloader()
    assert val_loader.persistent_workers and val_loader.num_workers == 2
    for batch in batches:
        _check_batch(batch, 64, 2)
        assert batch["prob_map"].sum() > 0
    _check_batch(next(iter(val_loader)), 64, 2)
    _check_batch(next(iter(module.test_dataloader())), 64, 2)
    module.teardown("fit")
    module.setup("predict")
    predict = next(iter(module.predict_dataloader()))
    _check_batch(predict, 64, 2)
    assert predict["polygons"] == [[], []]


IMAGENET = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}


def test_the_transfer_hooks_move_only_tensors_keep_the_cpu_batch_and_decode(tmp_path: Path) -> None:
    module = _module(make_root(tmp_path, num_images=2))
    module.train_transform = train_transform(64, **IMAGENET)
    module.setup("fit")
    augmented = collate_batch([module.datasets["train"][0], module.datasets["train"][1]])
    rows = augmented["photometric"]
    assert rows is not None
    batch = Batch(**dict(augmented, photometric=None))  # as val/test batches: normalisation only
    kept = module.on_before_batch_transfer(batch, 0)
    on_meta = module.transfer_batch_to_device(kept, torch.device("meta"), 0)
    assert all(on_meta[k].device.type == "meta" for k in BATCH_TENSOR_KEYS)
    assert on_meta["geometry"] is batch["geometry"] and module.last_cpu_batch is batch
    assert batch["images"].device.type == "cpu" and batch["images"].dtype == torch.uint8
    decoded = module.on_after_batch_transfer(module.transfer_batch_to_device(kept, torch.device("cpu"), 0), 0)
    # the worker-side formula of the float32 batches, as it was written
    mean, std = np.asarray(IMAGENET["mean"], np.float32), np.asarray(IMAGENET["std"], np.float32)
    hwc = batch["images"].permute(0, 2, 3, 1).numpy()
    expected = torch.from_numpy(((hwc.astype(np.float32) / 255.0 - mean) / std).transpose(0, 3, 1, 2))
    torch.testing.assert_close(decoded["images"], expected, rtol=1e-6, atol=1e-6)
    assert all(decoded[k].dtype == torch.float32 for k in BATCH_TENSOR_KEYS)
    # a train batch: its photometric rows first (host-side, they do not travel), then the same formula
    moved = module.transfer_batch_to_device(augmented, torch.device("cpu"), 0)
    assert moved["photometric"] is rows
    pixels = apply_photometric(augmented["images"].float() / 255.0, rows).permute(0, 2, 3, 1).numpy()
    expected = torch.from_numpy(((pixels - mean) / std).transpose(0, 3, 1, 2))
    torch.testing.assert_close(
        module.on_after_batch_transfer(moved, 0)["images"], expected, rtol=1e-5, atol=1e-5
    )


def test_a_batch_the_device_renders_moves_its_regions_and_decodes(tmp_path: Path) -> None:
    """data.render_on=device: no maps on the wire (the hook leaves them None), drawn by the decode."""
    module = _module(make_root(tmp_path, num_images=2), render_on="device")
    module.setup("fit")
    batch = collate_batch([module.datasets["train"][0], module.datasets["train"][1]])
    kept = module.on_before_batch_transfer(batch, 0)
    moved = module.transfer_batch_to_device(kept, torch.device("cpu"), 0)
    assert moved["prob_map"] is None and moved["images"].ndim == 1
    decoded = module.on_after_batch_transfer(moved, 0)
    assert decoded["images"].shape == (2, 3, 64, 64)
    assert all(decoded[k].shape[1:] == (1, 64, 64) and decoded[k].dtype == torch.float32 for k in TARGET_KEYS)
    assert module.last_cpu_batch is batch


def test_batches_the_device_renders_come_through_two_workers(tmp_path: Path) -> None:
    """data.render_on=device: regions and polygons collated in the workers (shared memory) decode to the
    batch contract."""
    module = _module(make_root(tmp_path, num_images=4), num_workers=2, render_on="device")
    module.setup("fit")
    for loader, size in ((module.train_dataloader(), 64), (module.val_dataloader(), 64)):
        for compact in loader:
            assert compact["prob_map"] is None and compact["target_polygons"] is not None
            batch = decode_batch(compact)
            assert batch["images"].shape == (2, 3, size, size) and batch["images"].dtype == torch.float32
            assert all(batch[key].shape == (2, 1, size, size) for key in TARGET_KEYS)
            assert float((batch["prob_map"] * batch["prob_mask"]).sum()) > 0


def test_workers_draw_different_augmentations(tmp_path: Path) -> None:
    """Identical images must not get identical crops, whichever worker builds them (per-sample seeds)."""
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


def test_dataloader_workers_of_each_global_rank_draw_their_own_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """srun (SLURM_PROCID) and Lightning's own launcher (LOCAL_RANK per node) leave RANK unset: the global
    rank Lightning sets on each rank decides, so local rank 1 of node 0 and of node 1 differ."""
    from lightning.pytorch.utilities import rank_zero_only

    for key in ("RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "5")
    firsts = []
    for rank in (1, 5):
        monkeypatch.setattr(rank_zero_only, "rank", rank)
        torch.manual_seed(7)  # the seed every rank's worker starts from
        seed_worker(0)
        firsts.append(np.random.random())
    assert firsts[0] != firsts[1]


def test_only_global_rank_zero_generates_the_synthetic_set(tmp_path: Path) -> None:
    """The data root is on a file system every node shares (docs/distributed.md): the local rank 0 of
    node 1 must not generate the set there at the same time as node 0's (Lightning's own decision)."""
    from lightning.pytorch.profilers import PassThroughProfiler
    from lightning.pytorch.trainer.connectors.data_connector import _DataConnector

    tiny = {"num_train": 1, "num_val": 1, "num_test": 1, "seed": 0, "long_side": 64}
    module = _module(tmp_path / "generated", synthetic={**tiny, "style": "basic", "granularity": "word"})
    for node, generated in ((1, False), (0, True)):
        trainer = SimpleNamespace(
            local_rank=0,
            node_rank=node,
            datamodule=module,
            lightning_module=None,
            profiler=PassThroughProfiler(),
        )
        _DataConnector(trainer).prepare_data()  # type: ignore[arg-type]
        assert (tmp_path / "generated" / "manifest.json").is_file() == generated, node


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
        InputNotFoundError, match=r"train\.json: train split 'train' <data\.train_split=train> has no usable"
    ):
        _module(tmp_path).setup("fit")
    write_split(tmp_path, "train", {"ghost_0.png": block_words(), "ghost_1.png": block_words()}, create=False)
    with pytest.raises(
        InputNotFoundError, match=r"2 listed, 2 missing, 0 unreadable\); training needs at least one"
    ):
        _module(tmp_path).setup("fit")


def test_a_train_split_without_a_labelled_word_is_named_as_such(tmp_path: Path) -> None:
    """Every epoch used to blame min_text_size and the crop settings, and the run succeeded."""
    make_root(tmp_path)
    dont_care = {"points": [[120, 10], [150, 10], [150, 30], [120, 30]], "text": "###"}
    write_split(tmp_path, "train", {"a.png": [], "b.png": [dont_care]})
    with pytest.raises(InputNotFoundError) as info:
        _module(tmp_path).setup("fit")
    message = str(info.value)
    assert "train split 'train' <data.train_split=train> has no labelled words: 2 usable images" in message
    assert "training needs labelled text" in message


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


def test_a_validation_interval_longer_than_an_epoch_is_one_line_with_the_fixes(tmp_path: Path) -> None:
    """trainer.val_check_interval=5 with 2 batches per epoch: Lightning's own error came as a traceback."""
    module = _module(make_root(tmp_path, num_images=4))  # 4 images of batch 2: 2 batches per epoch
    module.trainer = SimpleNamespace(  # type: ignore[assignment]  # what the check reads of a Trainer
        overfit_batches=0, global_rank=0, world_size=1, val_check_interval=5, check_val_every_n_epoch=1
    )
    with pytest.raises(ConfigValueError) as info:
        module.train_dataloader()
    assert str(info.value).startswith(
        "trainer.val_check_interval: expected <= 2 (the training batches per epoch"
    )
    assert "got 5; to validate every 5 steps across epochs set trainer.check_val_every_n_epoch=null" in str(
        info.value
    )
    module.trainer.check_val_every_n_epoch = None
    module.train_dataloader()
