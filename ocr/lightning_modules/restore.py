"""Rebuild a DetectionModule from a checkpoint and the run config stored inside it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf, open_dict

from ocr.checkpoints.inference_settings import apply_stored_settings, stored_setting_keys
from ocr.checkpoints.legacy import upgrade_run_config
from ocr.lightning_modules.build import build_module
from ocr.lightning_modules.callbacks.cuda_fault import CudaFaultExit
from ocr.lightning_modules.detection_module import DetectionModule
from ocr.utils.errors import CheckpointError, InputNotFoundError

__all__ = [
    "CHECKPOINT_SOURCE",
    "checkpoint_settings",
    "inference_trainer",
    "load_checkpoint",
    "load_checkpoint_file",
    "module_from_checkpoint",
    "module_from_loaded",
    "restore_for_inference",
]

CHECKPOINT_SOURCE = "the checkpoint's training run"

# torch.save writes zip archives (since torch 1.6); how far into a refused file to look. A zip ends with
# its end-of-central-directory record (22 bytes plus a comment of at most 64 KiB): a cut file lacks it.
_ZIP_MAGIC = b"PK\x03\x04"
_ZIP_END = b"PK\x05\x06"
_ZIP_TAIL_BYTES = 22 + 2**16
_HEAD_BYTES = 256

log = logging.getLogger(__name__)


def load_checkpoint(path: str | Path, key: str = "ckpt") -> dict[str, Any]:
    """Load a checkpoint written by ``runners/train.py`` on the CPU (what test, predict, resume and
    ``model.init_from`` start from); a run config stored by an older version is upgraded
    (:func:`upgrade_run_config`). Errors name the path as the value of the config ``key``.

    Raises:
        InputNotFoundError: naming the path when it is not a file.
        CheckpointError: naming the path and what the file is instead of such a checkpoint: empty,
            a truncated checkpoint or another broken zip, a text file, other bytes, or an object without the
            weights and run config (a bare state dict, a Lightning checkpoint from elsewhere, ...).
    """
    checkpoint = load_checkpoint_file(path, key)
    problem = _not_a_run_checkpoint(checkpoint)
    if problem:
        raise CheckpointError(
            f"{key}={path}: expected a checkpoint written by runners/train.py, got {problem}"
        )
    checkpoint["ocr_config"] = upgrade_run_config(checkpoint["ocr_config"])
    return checkpoint


def load_checkpoint_file(path: str | Path, key: str = "ckpt", *, mmap: bool = False) -> Any:
    """``torch.load`` of ``path`` on the CPU (not weights-only: our checkpoints hold the run config and RNG
    states), with a file that cannot be loaded named as the value of ``key`` and said what it is.

    Raises:
        InputNotFoundError: the path is not a file.
        CheckpointError: the file is empty, truncated, a text file or other bytes.
    """
    path = Path(path)
    if not path.is_file():
        what = "a directory" if path.is_dir() else "no such file"
        raise InputNotFoundError(
            f"{key}={path}: expected a checkpoint file, got {what} "
            f"(pass {key}=<run dir>/checkpoints/<name>.ckpt)"
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    except Exception as exc:  # unpickling raises anything from EOFError to ValueError
        what = _unloadable(path)
        said = "" if what.startswith("a truncated") else f"; torch.load said: {exc}"
        raise CheckpointError(f"{key}={path}: {what}{said}") from None


def _unloadable(path: Path) -> str:
    """What a file that ``torch.load`` refused is, judged from its first (and for a zip, last) bytes."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(_HEAD_BYTES)
        f.seek(max(0, size - _ZIP_TAIL_BYTES))
        tail = f.read()
    if not head:
        return "an empty file (0 bytes), not a checkpoint"
    if head.startswith(_ZIP_MAGIC) and _ZIP_END not in tail:
        return (
            f"a truncated checkpoint: a zip archive of {size} bytes without its end record (the save "
            "or the copy was interrupted; resume or test from another checkpoint of the run)"
        )
    if head.startswith(_ZIP_MAGIC):
        return f"a corrupt zip archive ({size} bytes; checkpoints are zip archives)"
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
    post-processing, the metric (where ``cfg`` has one; else the run's), ``module.channels_last``; no
    compile. Without ``cfg`` (ONNX export), the run's own settings in the default memory format."""
    return module_from_loaded(load_checkpoint(path), path, cfg)


def module_from_loaded(
    checkpoint: dict[str, Any], path: str | Path, cfg: DictConfig | None
) -> DetectionModule:
    """:func:`module_from_checkpoint` of a checkpoint :func:`load_checkpoint` already read from ``path``."""
    run_cfg = OmegaConf.create(checkpoint["ocr_config"])
    with open_dict(run_cfg):
        if cfg is not None:
            run_cfg.postprocess = OmegaConf.to_container(cfg.postprocess, resolve=True)
            if "metric" in cfg:
                run_cfg.metric = OmegaConf.to_container(cfg.metric, resolve=True)
        run_cfg.module.channels_last = cfg.module.channels_last if cfg is not None else False
        run_cfg.module.compile = False
    module = build_module(run_cfg, weights_free=True)
    module.load_state_dict(checkpoint["state_dict"])
    module.run_config = checkpoint["ocr_config"]
    log.info("Loaded %s (epoch %s, step %s)", path, checkpoint.get("epoch"), checkpoint.get("global_step"))
    return module


def checkpoint_settings(cfg: DictConfig, *, targets: bool) -> dict[str, Any]:
    """Load ``cfg.ckpt`` and take its inference settings into ``cfg`` (in place): the evaluation transform,
    the loss targets (``targets``: test) and the post-processing of its training run, except what the
    command line set (logged, see ``ocr.checkpoints.inference_settings``). Returns the checkpoint, for
    :func:`restore_for_inference`."""
    checkpoint = load_checkpoint(cfg.ckpt)
    keys = stored_setting_keys(cfg, targets=targets)
    apply_stored_settings(cfg, checkpoint["ocr_config"], keys, CHECKPOINT_SOURCE)
    return checkpoint


def restore_for_inference(cfg: DictConfig, checkpoint: dict[str, Any]) -> tuple[DetectionModule, L.Trainer]:
    """What test and predict start from: the module of ``checkpoint`` (read from ``cfg.ckpt`` by
    :func:`checkpoint_settings`) and a trainer from ``cfg.trainer`` without loggers or checkpointing, whose
    one callback ends the process on a CUDA fault as training does (``CudaFaultExit``)."""
    module = module_from_loaded(checkpoint, cfg.ckpt, cfg)
    return module, inference_trainer(cfg.trainer, [CudaFaultExit(run_dir=cfg.paths.output_dir)])


def inference_trainer(
    trainer_cfg: DictConfig, callbacks: Sequence[Callback] = (), **overrides: Any
) -> L.Trainer:
    """A trainer from ``trainer_cfg`` (and ``overrides``) without loggers or checkpointing, with only
    ``callbacks``."""
    return instantiate(
        trainer_cfg, logger=False, callbacks=list(callbacks), enable_checkpointing=False, **overrides
    )
