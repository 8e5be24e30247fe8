"""``data.render_on``: the worker path and the device path give the network and the loss the same batch.

The same seed draws the same augmentation on both paths, so the decoded batches are compared directly,
within the tolerances tests/data/test_device_warp.py and tests/data/test_device_targets.py state.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
from omegaconf import DictConfig

import ocr.data.coding as coding
from ocr.data.coding import THRESH_LEVELS, decode_batch
from ocr.data.collate import collate_batch
from ocr.data.transforms import Transform
from ocr.types import BATCH_TENSOR_KEYS, Batch
from tests.data.test_device_targets import _only_on_the_border
from tests.helpers.receipt_fixtures import (
    MEAN,
    STD,
    TARGETS,
    eval_transform,
    labelled_dataset,
    make_root,
    train_transform,
)


def _batches(root: Path, split: str, transform: Transform, seed: int = 0) -> tuple[Batch, Batch]:
    """The split's first three samples on each path, collated, with the same augmentation draws."""
    batches = []
    for render_on in ("worker", "device"):
        dataset = labelled_dataset(root, split, transform, render_on)
        if hasattr(transform, "set_random_seed"):
            transform.set_random_seed(seed)
        batches.append(collate_batch([dataset[i] for i in range(3)]))
    return batches[0], batches[1]


def assert_same_maps(worker: Batch, device: Batch) -> None:
    """The decoded maps of both paths agree within the tolerances of tests/data/test_device_targets.py."""
    half_step = (TARGETS["thresh_max"] - TARGETS["thresh_min"]) / (2 * THRESH_LEVELS)
    torch.testing.assert_close(device["thresh_map"], worker["thresh_map"], atol=half_step + 1e-5, rtol=0)
    torch.testing.assert_close(device["thresh_mask"], worker["thresh_mask"], atol=0, rtol=0)
    for key in ("prob_map", "prob_mask"):
        for got, want in zip(device[key][:, 0].numpy(), worker[key][:, 0].numpy(), strict=True):
            assert _only_on_the_border(want, got), key
    assert float(worker["prob_map"].sum()) > 0


@pytest.mark.parametrize("seed", [0, 1])
def test_train_batches_decode_alike_on_both_paths(tmp_path: Path, seed: int) -> None:
    root = make_root(tmp_path)
    worker, device = _batches(root, "train", train_transform(64, mean=MEAN, std=STD, fill=9), seed)
    assert device["images"].ndim == 1 and device["images"].dtype == torch.uint8  # the packed regions
    assert device["warp"] is not None and device["target_polygons"] is not None
    assert all(device[key] is None for key in BATCH_TENSOR_KEYS[1:])
    decoded_worker = decode_batch(worker)
    decoded_device = decode_batch(device)
    assert decoded_device["images"].shape == decoded_worker["images"].shape == (3, 3, 64, 64)
    # MEAN 0 and STD 1: images stay in [0, 1]; the photometric rows (noise included) are the same
    difference = (decoded_device["images"] - decoded_worker["images"]).abs() * 255
    assert float(difference.mean()) < 0.5 and float(difference.max()) <= 3
    assert_same_maps(decoded_worker, decoded_device)
    assert all(decoded_device[key].dtype == torch.float32 for key in BATCH_TENSOR_KEYS)


def test_eval_batches_draw_their_targets_on_the_device(tmp_path: Path) -> None:
    """A letterbox is rendered in the worker on both paths; only the maps move."""
    root = make_root(tmp_path)
    worker, device = _batches(root, "val", eval_transform(96))
    assert device["warp"] is None and device["target_polygons"] is not None
    torch.testing.assert_close(device["images"], worker["images"])
    assert_same_maps(decode_batch(worker), decode_batch(device))


def test_render_on_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"render_on: expected one of \('worker', 'device'\), got 'gpu'"):
        labelled_dataset(make_root(tmp_path), "train", train_transform(64), "gpu")


def test_device_batches_are_smaller_on_the_wire(tmp_path: Path) -> None:
    """The region a 640 px crop reads from a 160 x 120 image, and a few polygons, instead of the crop and
    four maps (2.87 MB at 640 px)."""
    root = make_root(tmp_path)
    worker, device = _batches(root, "train", train_transform(640, mean=MEAN, std=STD))
    tensors = [device["images"], device["warp"].theta, *device["target_polygons"][:4]]  # type: ignore[index]
    device_bytes = sum(t.nbytes for t in tensors)
    worker_bytes = sum(worker[key].nbytes for key in BATCH_TENSOR_KEYS)
    assert device_bytes < 0.1 * worker_bytes
    np.testing.assert_array_equal(
        decode_batch(device)["thresh_mask"].numpy(),
        decode_batch(worker)["thresh_mask"].numpy(),
    )


@pytest.mark.slow  # a tiny run of the train runner: about a minute on 2 busy cores
def test_a_cpu_training_run_goes_through_the_device_path(
    tmp_path: Path,
    tiny_run: list[str],
    compose_cfg: Callable[[str, list[str], Path], DictConfig],
    runner_module: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """data.render_on=device forced on the CPU preset: the runner trains, validates and tests on crops and
    maps that decode_batch makes (the key is read as set; nothing falls back to the worker path)."""
    calls = {"warp": 0, "targets": 0}

    def counted(name: str, function: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            calls[name] += 1
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(coding, "warp_regions", counted("warp", coding.warp_regions))
    monkeypatch.setattr(coding, "draw_db_targets", counted("targets", coding.draw_db_targets))
    overrides = [*tiny_run, f"data.root={tmp_path / 'data'}", "data.render_on=device", "trainer.max_steps=3"]
    cfg = compose_cfg("train", [*overrides, "logger=none"], tmp_path / "run")
    metrics = runner_module("train").train(cfg)
    assert (tmp_path / "run" / ".SUCCESS").is_file()
    # one epoch of 3 train batches warped; they, the validation after it and the test (3 images each,
    # batch 2) drawn on the device
    assert calls == {"warp": 3, "targets": 3 + 2 + 2}
    assert math.isfinite(metrics["train/loss"]) and 0.0 <= metrics["test/hmean"] <= 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_decoding_on_cuda_never_waits_for_the_device(tmp_path: Path) -> None:
    """The whole device stage (crops, photometric augmentation, maps) with CUDA's sync check on."""
    _, device = _batches(make_root(tmp_path), "train", train_transform(64, mean=MEAN, std=STD))
    moved = dict(device, images=device["images"].pin_memory().to("cuda", non_blocking=True))
    decode_batch(moved)  # type: ignore[arg-type]  # warm-up: allocator, kernels
    torch.cuda.set_sync_debug_mode("error")
    try:
        decoded = decode_batch(moved)  # type: ignore[arg-type]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    reference = decode_batch(device)
    torch.testing.assert_close(decoded["thresh_map"].cpu(), reference["thresh_map"], atol=1e-5, rtol=0)
