"""Rebuild a DetectionModule from a checkpoint (read by ``ocr.checkpoints.reading``) and the run config
stored inside it; the bare trainer test and predict run it with."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf, open_dict

from ocr.checkpoints.inference_settings import apply_stored_settings, stored_setting_keys
from ocr.checkpoints.reading import load_checkpoint
from ocr.lightning_modules.build import build_module
from ocr.lightning_modules.detection_module import DetectionModule
from ocr.run.guard import Guard

__all__ = [
    "CHECKPOINT_SOURCE",
    "checkpoint_settings",
    "inference_trainer",
    "module_from_loaded",
    "restore_for_inference",
]

CHECKPOINT_SOURCE = "the checkpoint's training run"

log = logging.getLogger(__name__)


def module_from_loaded(
    checkpoint: dict[str, Any], path: str | Path, cfg: DictConfig | None
) -> DetectionModule:
    """The network and weights of ``checkpoint`` (read from ``path``), with what this test or predict
    invocation (``cfg``) decides: post-processing and its pipeline, the metric (where ``cfg`` has one; else
    the run's), ``module.channels_last``; no compile. Without ``cfg`` (ONNX export), the run's own settings
    in the default memory format."""
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
    one callback ends the process on a CUDA fault as training does (``Guard.for_inference``)."""
    module = module_from_loaded(checkpoint, cfg.ckpt, cfg)
    return module, inference_trainer(cfg.trainer, [Guard.for_inference(cfg.paths.output_dir)])


def inference_trainer(
    trainer_cfg: DictConfig, callbacks: Sequence[Callback] = (), **overrides: Any
) -> L.Trainer:
    """A trainer from ``trainer_cfg`` (and ``overrides``) without loggers or checkpointing, with only
    ``callbacks``."""
    return instantiate(
        trainer_cfg, logger=False, callbacks=list(callbacks), enable_checkpointing=False, **overrides
    )
