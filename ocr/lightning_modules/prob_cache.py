"""On-disk cache of the network's probability logits per evaluation image, so a post-processing sweep runs
the network once per image instead of once per setting (``runners/test.py -m``, docs/reporting.md).

The key is what decides the network output: the checkpoint file, the split's images, the evaluation
data settings and the numerics; logits keep the network's dtype, so a cached score equals an uncached one.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from ocr.types import Batch
from ocr.utils.io import atomic_write_bytes, atomic_write_json

__all__ = ["ProbCache", "open_prob_cache", "prob_cache_key"]

log = logging.getLogger(__name__)

KEY_FILE = "key.json"


def _file_identity(path: Path) -> dict[str, Any]:
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def prob_cache_key(cfg: DictConfig) -> dict[str, Any]:
    """What the network output of ``cfg.split`` depends on (FileNotFoundError: ``cfg.ckpt`` is not a file)."""
    ckpt = Path(cfg.ckpt)
    if not ckpt.is_file():
        raise FileNotFoundError(f"ckpt={ckpt}: expected a checkpoint file, got none")
    split = str(cfg.data[f"{cfg.split}_split"])
    image_dir = Path(cfg.data.root) / "images" / split
    images = sorted(p for p in image_dir.rglob("*") if p.is_file()) if image_dir.is_dir() else []
    stats = [(p.relative_to(image_dir), p.stat()) for p in images]
    return {
        "ckpt": _file_identity(ckpt),
        "root": str(Path(cfg.data.root).resolve()),
        "split": split,
        "images": [[str(name), stat.st_size, stat.st_mtime_ns] for name, stat in stats],
        "exif_mode": cfg.data.exif_mode,
        "eval_transform": OmegaConf.to_container(cfg.data.eval_transform, resolve=True),
        "precision": str(cfg.trainer.precision),
        "accelerator": str(cfg.trainer.accelerator),
        "channels_last": bool(cfg.module.channels_last),
    }


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ProbCache:
    """Probability logits per image in ``root/<key hash>/``, one file each, written atomically; ``key()`` is
    read at the first batch (a generated dataset exists only once prepared) and kept as ``key.json``."""

    def __init__(self, root: Path, key: Callable[[], Mapping[str, Any]]) -> None:
        self.root = Path(root)
        self._key = key
        self._directory: Path | None = None
        self.hits = 0
        self.computed = 0

    @property
    def directory(self) -> Path:
        """The entry folder of this key, created (with its ``key.json``) on first use."""
        if self._directory is None:
            key = self._key()
            directory = self.root / _digest(json.dumps(key, sort_keys=True))[:16]
            directory.mkdir(parents=True, exist_ok=True)
            if not (directory / KEY_FILE).is_file():
                atomic_write_json(directory / KEY_FILE, key)
            self._directory = directory
        return self._directory

    def _path(self, image_id: str) -> Path:
        return self.directory / f"{_digest(image_id)[:32]}.pt"

    def prob_logits(self, batch: Batch, compute: Callable[[Tensor], Tensor]) -> Tensor:
        """(B, 1, H, W) probability logits of the batch's images, on the device of ``batch["images"]``:
        read from the cache when every image of the batch is there, else ``compute(images)`` and stored."""
        paths = [self._path(image_id) for image_id in batch["image_id"]]
        device = batch["images"].device
        if all(path.is_file() for path in paths):
            stored = [torch.load(path, map_location="cpu", weights_only=True) for path in paths]
            self.hits += len(paths)
            return torch.stack(stored).to(device)
        logits = compute(batch["images"]).detach()
        # clone(): saving a view would save the whole batch's storage.
        for path, image_logits in zip(paths, logits.cpu(), strict=True):
            buffer = io.BytesIO()
            torch.save(image_logits.clone(), buffer)
            atomic_write_bytes(path, buffer.getvalue())
        self.computed += len(paths)
        return logits

    def summary(self) -> str:
        """One line for the log: how many images were read from the cache and how many computed."""
        verdict = "hit" if self.hits and not self.computed else "miss" if not self.hits else "partial hit"
        return (
            f"prob cache {verdict}: {self.hits} images read, {self.computed} computed by the network "
            f"({self.directory})"
        )


def open_prob_cache(cfg: DictConfig, run_directory: Path) -> ProbCache | None:
    """The cache ``cfg.prob_cache`` asks for, or None: ``enabled: null`` means under ``-m`` only,
    ``dir: null`` ``<sweep or run dir>/prob_cache``."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    enabled = multirun if cfg.prob_cache.enabled is None else bool(cfg.prob_cache.enabled)
    if not enabled:
        return None
    if cfg.prob_cache.dir is not None:
        root = Path(cfg.prob_cache.dir)
    else:
        root = (Path(HydraConfig.get().sweep.dir) if multirun else run_directory) / "prob_cache"
    log.info("prob cache in %s <prob_cache.enabled=%s>", root, cfg.prob_cache.enabled)
    return ProbCache(root, lambda: prob_cache_key(cfg))
