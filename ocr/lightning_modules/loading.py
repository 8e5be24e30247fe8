"""Rebuild a DetectionModule from a checkpoint and the run config stored inside it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from ocr.lightning_modules.build import build_module
from ocr.lightning_modules.detection_module import DetectionModule
from ocr.lightning_modules.legacy import upgrade_run_config

__all__ = [
    "inference_trainer",
    "load_checkpoint",
    "module_from_checkpoint",
    "restore_for_inference",
    "warn_data_mismatch",
]

# Data settings that change what the network sees at evaluation time.
EVAL_KEYS = ("root", "eval_transform.long_side", "eval_transform.mean", "eval_transform.std")

# torch.save writes zip archives (since torch 1.6); how far into a refused file to look.
_ZIP_MAGIC = b"PK\x03\x04"
_HEAD_BYTES = 256

log = logging.getLogger(__name__)


def load_checkpoint(path: str | Path, key: str = "ckpt") -> dict[str, Any]:
    """Load a checkpoint written by ``runners/train.py`` on the CPU (what test, predict, resume and
    ``model.init_from`` start from); a run config stored by an older version is upgraded
    (:func:`upgrade_run_config`). Errors name the path as the value of the config ``key``.

    Raises:
        FileNotFoundError: naming the path when it is not a file.
        ValueError: naming the path and what the file is instead of such a checkpoint: empty,
            a truncated or corrupt zip archive, a text file, other bytes, or an object without the
            weights and run config (a bare state dict, a Lightning checkpoint from elsewhere, ...).
    """
    path = Path(path)
    if not path.is_file():
        what = "a directory" if path.is_dir() else "no such file"
        raise FileNotFoundError(
            f"{key}={path}: expected a checkpoint file, got {what} "
            f"(pass {key}=<run dir>/checkpoints/<name>.ckpt)"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # unpickling raises anything from EOFError to ValueError
        raise ValueError(f"{key}={path}: {_unloadable(path)}; torch.load said: {exc}") from None
    problem = _not_a_run_checkpoint(checkpoint)
    if problem:
        raise ValueError(f"{key}={path}: expected a checkpoint written by runners/train.py, got {problem}")
    checkpoint["ocr_config"] = upgrade_run_config(checkpoint["ocr_config"])
    return checkpoint


def _unloadable(path: Path) -> str:
    """What a file that ``torch.load`` refused is, judged from its first bytes."""
    with path.open("rb") as f:
        head = f.read(_HEAD_BYTES)
    if not head:
        return "an empty file (0 bytes), not a checkpoint"
    if head.startswith(_ZIP_MAGIC):
        return (
            f"a truncated or corrupt zip archive ({path.stat().st_size} bytes; checkpoints are zip "
            "archives: was the save or the copy interrupted?)"
        )
    # Binary data shows control bytes within a few hundred bytes; "ignore" copes with a cut UTF-8 tail.
    text = head.decode("utf-8", errors="ignore")
    if text and all(c.isprintable() or c.isspace() for c in text):
        return f"a text file, not a PyTorch checkpoint (it starts with {text[:40]!r})"
    return f"not a PyTorch checkpoint (it starts with the bytes {head[:16]!r})"


def _not_a_run_checkpoint(checkpoint: object) -> str | None:
    """None for a checkpoint with weights and run config; else what the loaded object is instead."""
    if not isinstance(checkpoint, dict):
        return f"a pickled {type(checkpoint).__name__}, not a checkpoint dict"
    if "state_dict" in checkpoint and "ocr_config" in checkpoint:
        return None
    if checkpoint and all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        return (
            f"a bare state dict ({len(checkpoint)} tensors) without the run config the network is "
            "rebuilt from"
        )
    if "state_dict" in checkpoint:
        return "a checkpoint without the run config ('ocr_config'; not saved by this project's training)"
    return f"a dict without 'state_dict' and 'ocr_config' (keys: {sorted(map(str, checkpoint))[:10]})"


def module_from_checkpoint(path: str | Path, cfg: DictConfig | None = None) -> DetectionModule:
    """The checkpoint's network and weights, with what this test or predict invocation (``cfg``) decides:
    post-processing and its pipeline, the metric (where ``cfg`` has one; else the run's),
    ``module.channels_last``; no compile. Without ``cfg`` (ONNX export), the run's own settings in the
    default memory format."""
    checkpoint = load_checkpoint(path)
    run_cfg = OmegaConf.create(checkpoint["ocr_config"])
    with open_dict(run_cfg):
        if cfg is not None:
            run_cfg.postprocess = OmegaConf.to_container(cfg.postprocess, resolve=True)
            run_cfg.pipeline = OmegaConf.to_container(cfg.pipeline, resolve=True)
            if "metric" in cfg:
                run_cfg.metric = OmegaConf.to_container(cfg.metric, resolve=True)
        run_cfg.module.channels_last = cfg.module.channels_last if cfg is not None else False
        run_cfg.module.compile = False
    module = build_module(run_cfg, weights_free=True)
    module.load_state_dict(checkpoint["state_dict"])
    module.run_config = checkpoint["ocr_config"]
    log.info("Loaded %s (epoch %s, step %s)", path, checkpoint.get("epoch"), checkpoint.get("global_step"))
    return module


def restore_for_inference(cfg: DictConfig) -> tuple[DetectionModule, L.Trainer]:
    """What test and predict start from: the module of ``cfg.ckpt`` (:func:`module_from_checkpoint`, a
    warning for each data setting that differs from its training run) and a trainer from ``cfg.trainer``
    without loggers, callbacks or checkpointing."""
    module = module_from_checkpoint(cfg.ckpt, cfg)
    warn_data_mismatch(module.run_config, cfg.data)
    return module, inference_trainer(cfg.trainer)


def inference_trainer(trainer_cfg: DictConfig, **overrides: Any) -> L.Trainer:
    """A trainer from ``trainer_cfg`` (and ``overrides``) without loggers, callbacks or checkpointing."""
    return instantiate(trainer_cfg, logger=False, callbacks=[], enable_checkpointing=False, **overrides)


def warn_data_mismatch(run_config: dict[str, Any] | None, data_cfg: DictConfig) -> list[str]:
    """Log (and return) the evaluation-time data settings that differ from the training run's.

    Test and predict take ``data`` from their own command line; evaluating at another size than the
    model was validated at can cost many points (docs/benchmarks.md), so say which keys differ.
    """
    trained = OmegaConf.create((run_config or {}).get("data", {}))
    differences = []
    for key in EVAL_KEYS:
        then, now = OmegaConf.select(trained, key), OmegaConf.select(data_cfg, key)
        if then is not None and now is not None and then != now:
            differences.append(f"data.{key}={now} here, {then} in the training run")
    if differences:
        log.warning(
            "Data settings differ from the checkpoint's training run (pass the training values "
            "as overrides if this is not intended): %s",
            "; ".join(differences),
        )
    return differences
