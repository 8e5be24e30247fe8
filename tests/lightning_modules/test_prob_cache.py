"""The probability-logit cache: computed once per image, read back bit for bit, keyed by what decides it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from ocr.lightning_modules.prob_cache import ProbCache, prob_cache_key


def _batch(ids: list[str]) -> Any:
    return {"image_id": ids, "images": torch.zeros(len(ids), 3, 8, 8)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logits_are_computed_once_and_read_back_unchanged(tmp_path: Path, dtype: torch.dtype) -> None:
    calls: list[int] = []

    def compute(images: torch.Tensor) -> torch.Tensor:
        calls.append(images.shape[0])
        return torch.randn(images.shape[0], 1, 8, 8).to(dtype)

    first = ProbCache(tmp_path, lambda: {"k": 1})
    computed = first.prob_logits(_batch(["a.jpg", "sub/b.jpg"]), compute)
    again = ProbCache(tmp_path, lambda: {"k": 1})
    read = again.prob_logits(_batch(["a.jpg", "sub/b.jpg"]), compute)
    assert calls == [2] and read.dtype == dtype and torch.equal(read, computed)
    assert (first.summary().split(":")[0], again.summary().split(":")[0]) == (
        "prob cache miss",
        "prob cache hit",
    )
    # A batch with one image not cached yet runs the network for the batch.
    again.prob_logits(_batch(["a.jpg", "c.jpg"]), compute)
    assert calls == [2, 2] and again.summary().startswith("prob cache partial hit: 2 images read, 2 computed")
    # Another key is another entry.
    ProbCache(tmp_path, lambda: {"k": 2}).prob_logits(_batch(["a.jpg"]), compute)
    assert calls == [2, 2, 1] and len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2


def test_the_key_follows_the_checkpoint_file_the_images_and_the_numerics(tmp_path: Path) -> None:
    ckpt = tmp_path / "last.ckpt"
    ckpt.write_bytes(b"weights")
    (tmp_path / "data" / "images" / "val").mkdir(parents=True)
    image = tmp_path / "data" / "images" / "val" / "x.jpg"
    image.write_bytes(b"jpeg")
    cfg = OmegaConf.create(
        {
            "ckpt": str(ckpt),
            "split": "val",
            "data": {"root": str(tmp_path / "data"), "val_split": "val", "exif_mode": "rotated"},
            "trainer": {"precision": "32-true", "accelerator": "cpu"},
            "module": {"channels_last": False},
        }
    )
    cfg.data.eval_transform = {"long_side": 1024}
    base = prob_cache_key(cfg)
    assert base["images"][0][0] == "x.jpg"
    changed = []
    ckpt.write_bytes(b"other weights")
    changed.append(prob_cache_key(cfg))
    image.write_bytes(b"another jpeg")
    changed.append(prob_cache_key(cfg))
    cfg.data.eval_transform.long_side = 640
    changed.append(prob_cache_key(cfg))
    cfg.trainer.precision = "bf16-mixed"
    changed.append(prob_cache_key(cfg))
    keys = [base, *changed]
    assert all(a != b for i, a in enumerate(keys) for b in keys[i + 1 :])
