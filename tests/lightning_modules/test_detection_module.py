from __future__ import annotations

import functools
import logging

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from ocr.geometry import letterbox_geometry
from ocr.lightning_modules.detection_module import TENSOR_KEYS, DetectionModule
from ocr.lightning_modules.schedule import build_warmup_scheduler
from tests.helpers.paths import REPO_ROOT

CONFIGS = REPO_ROOT / "configs"


def _module(compile: bool = False) -> DetectionModule:
    model_cfg = OmegaConf.load(CONFIGS / "model" / "dbnet_resnet18_fpn.yaml")
    model_cfg.encoder.name = "resnet10t"
    model_cfg.decoder.channels = 32
    return DetectionModule(
        net=instantiate(model_cfg),
        loss=instantiate(OmegaConf.load(CONFIGS / "loss" / "db.yaml")),
        postprocess=instantiate(OmegaConf.load(CONFIGS / "postprocess" / "db.yaml")),
        metric=instantiate(OmegaConf.load(CONFIGS / "metric" / "cleval.yaml")),
        optimizer=functools.partial(torch.optim.AdamW, lr=1e-3),
        scheduler=functools.partial(
            build_warmup_scheduler, kind="poly", warmup_ratio=0.0, power=1.0, min_lr_ratio=0.0
        ),
        channels_last=False,
        compile=compile,
    )


def _batch(size: int = 64) -> dict:
    geometry, _ = letterbox_geometry(size, size, size)
    box = np.array([[8, 8], [40, 8], [40, 20], [8, 20]], np.float32)
    return {
        "images": torch.randn(2, 3, size, size),
        **{key: torch.zeros(2, 1, size, size) for key in TENSOR_KEYS[1:]},
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


def test_only_tensors_move_and_the_cpu_batch_is_kept() -> None:
    module = _module()
    batch = _batch()
    kept = module.on_before_batch_transfer(batch, 0)
    moved = module.transfer_batch_to_device(kept, torch.device("meta"), 0)
    assert all(moved[k].device.type == "meta" for k in TENSOR_KEYS)
    assert moved["geometry"] is batch["geometry"] and module.last_cpu_batch is batch
    assert batch["images"].device.type == "cpu"


def test_validation_step_feeds_the_metric() -> None:
    module = _module().eval()
    with torch.no_grad():
        module.validation_step(_batch(), 0)
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
