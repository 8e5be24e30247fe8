from __future__ import annotations

import functools
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning import LightningModule

from ocr.data.coding import decode_batch
from ocr.data.collate import collate_batch
from ocr.geometry import letterbox_geometry
from ocr.inference.onnx_runtime import OnnxPredictModule
from ocr.lightning_modules.build import build_module
from ocr.lightning_modules.detection_module import DetectionModule, add_scores
from ocr.run.config import compose_config
from ocr.types import TARGET_KEYS
from tests.helpers.receipt_fixtures import labelled_dataset, make_root, train_transform

IMAGENET = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}


def _module(compile: bool = False) -> DetectionModule:
    """The default train config's module with a small network, NCHW, no warm-up."""
    overrides = ["model.encoder.name=resnet10t", "model.decoder.channels=32", "scheduler.warmup_ratio=0.0"]
    cfg = compose_config("train", [*overrides, "module.channels_last=false", f"module.compile={compile}"])
    return build_module(cfg)


def _batch(size: int = 64) -> dict:
    geometry, _ = letterbox_geometry(size, size, size)
    box = np.array([[8, 8], [40, 8], [40, 20], [8, 20]], np.float32)
    return {
        "images": torch.randn(2, 3, size, size),
        **{key: torch.zeros(2, 1, size, size) for key in TARGET_KEYS},
        "polygons": [[box], []],
        "ignore": [[False], []],
        "texts": [[None], []],
        "geometry": [geometry, geometry],
        "image_id": ["a.jpg", "b.jpg"],
        "sanitation": {"too_small": 2},
    }


def test_compile_wraps_once_keeps_state_dict_keys_and_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # dynamo's "eager" backend traces like the real one but skips code generation: seconds, not minutes.
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    module = _module(compile=True)
    module.setup("fit")
    compiled = module._compiled_net
    module.setup("test")  # fit then test: a second setup must not compile the compiled network
    assert module._compiled_net is compiled is not None
    assert all(k.startswith(("net.", "val_metric.", "test_metric.")) for k in module.state_dict())
    images = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(module(images).prob_logits, module.net(images).prob_logits)


def test_the_batch_hooks_are_left_to_the_datamodule() -> None:
    """Lightning calls a datamodule's batch-transfer hooks only where the module does not override them."""
    for hook in ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer"):
        assert getattr(DetectionModule, hook) is getattr(LightningModule, hook), hook
        assert getattr(OnnxPredictModule, hook) is getattr(LightningModule, hook), hook


@pytest.mark.parametrize("channels_last", [False, True])
def test_forward_gives_the_network_its_memory_format(channels_last: bool) -> None:
    module = _module()
    module.channels_last = channels_last
    module.setup("fit")
    seen = []
    module.net.encoder.register_forward_pre_hook(lambda _, args: seen.append(args[0]))
    with torch.no_grad():
        module(torch.randn(1, 3, 64, 64))
    assert seen[0].is_contiguous(memory_format=torch.channels_last) is channels_last


def _compact_batch(root: Path, crop: int = 64, render_on: str = "worker") -> dict:
    """A collated batch of two augmented block-image crops, as the train loader yields it."""
    dataset = labelled_dataset(root, "train", train_transform(crop, **IMAGENET), render_on)
    return collate_batch([dataset[0], dataset[1]])  # type: ignore[return-value]


@pytest.mark.parametrize("render_on", ["worker", pytest.param("device", marks=pytest.mark.slow)])
def test_training_on_compact_batches_converges(tmp_path: Path, render_on: str) -> None:
    """Overfitting one augmented batch through the decode: the loss falls well below its start."""
    module = _module().train()
    compact = _compact_batch(make_root(tmp_path, num_images=2), render_on=render_on)
    batch = decode_batch(compact)  # the same every time: the rows seed the noise
    optimizer = torch.optim.AdamW(module.parameters(), lr=3e-3)
    losses = []
    for step in range(30):
        loss = module.training_step(batch, step)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert np.mean(losses[-5:]) < 0.7 * losses[0], losses


def test_validation_step_feeds_the_metric() -> None:
    module = _module().eval()
    module.on_validation_epoch_start()
    with torch.no_grad():
        module.validation_step(_batch(), 0)
    add_scores(module.pipeline.finish(), module.val_metric)
    module.teardown("validate")
    scores = module.val_metric.compute()
    assert set(scores) >= {"hmean", "precision", "recall"}
    assert float(scores["recall"]) == 0.0  # untrained: nothing detected, one word missed


def test_warns_when_training_crops_hold_no_trainable_text(caplog: pytest.LogCaptureFixture) -> None:
    module = _module()
    text_free, with_text = _batch(), _batch()
    text_free["prob_map"][:, :, 10:14, 10:30] = 1.0  # text, but all of it masked (too small)
    with_text["prob_mask"].fill_(1.0)
    with_text["prob_map"][0, 0, 10:14, 10:30] = 1.0
    with caplog.at_level(logging.WARNING, logger="ocr.lightning_modules.detection_module"):
        for batch in (text_free, text_free, with_text):
            module._count_text_crops(batch)
        module.on_train_epoch_end()
        assert "only 1 of 6 crops held trainable text" in caplog.text
        assert "data.targets.min_text_size" in caplog.text
        caplog.clear()
        with_text["prob_map"][1, 0, 30:34, 10:30] = 1.0
        module._count_text_crops(with_text)
        module.on_train_epoch_end()
        assert caplog.text == ""


def test_compiled_network_compiles_once_for_training_and_once_for_evaluation(monkeypatch) -> None:
    """A smaller last batch must not recompile; val and test (eval mode, no_grad) share one graph."""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    torch._dynamo.reset()
    counters.clear()
    module = _module(compile=True)
    module.setup("fit")
    module.train()
    for batch_size in (4, 3):
        module(torch.randn(batch_size, 3, 32, 32))
    module.eval()
    with torch.inference_mode():  # Lightning's default for val and test
        for batch_size in (4, 2):
            module(torch.randn(batch_size, 3, 32, 32))
    assert counters["frames"]["ok"] == 2, dict(counters["frames"])
    torch._dynamo.reset()
