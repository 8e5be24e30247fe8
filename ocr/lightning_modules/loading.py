"""Rebuild a DetectionModule from a checkpoint and the run config stored inside it."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from ocr.lightning_modules.detection_module import DetectionModule

__all__ = [
    "load_checkpoint",
    "module_from_checkpoint",
    "restore_for_inference",
    "weights_free_model_config",
    "warn_data_mismatch",
]

# Data settings that change what the network sees at evaluation time.
EVAL_KEYS = ("root", "eval_transform.long_side", "eval_transform.mean", "eval_transform.std")

log = logging.getLogger(__name__)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a Lightning checkpoint on the CPU.

    Raises:
        FileNotFoundError: naming the path when it does not exist.
        ValueError: when the file is not a checkpoint written by this project.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"ckpt: no checkpoint at {path} (pass ckpt=<run dir>/checkpoints/<name>.ckpt)"
        )
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    missing = [k for k in ("state_dict", "ocr_config") if k not in checkpoint]
    if missing:
        raise ValueError(
            f"{path}: expected a checkpoint from runners/train.py with keys {missing}, "
            f"got keys {sorted(checkpoint)}"
        )
    return checkpoint


def weights_free_model_config(model_cfg: DictConfig) -> DictConfig:
    """A copy of the network config that builds random weights: the checkpoint supplies them, so no
    hub download (``pretrained``) or local weights file (``weights_path``) is needed to restore."""
    restored = copy.deepcopy(model_cfg)
    with open_dict(restored):
        restored.encoder.pretrained = False
        restored.encoder.weights_path = None
    return restored


def module_from_checkpoint(
    path: str | Path, *, postprocess: Any, metric: Any | None, channels_last: bool
) -> DetectionModule:
    """The checkpoint's network and weights; post-processing and metric come from the caller."""
    checkpoint = load_checkpoint(path)
    run_cfg = OmegaConf.create(checkpoint["ocr_config"])
    module = instantiate(
        run_cfg.module,
        net=instantiate(weights_free_model_config(run_cfg.model)),
        loss=instantiate(run_cfg.loss),
        postprocess=postprocess,
        metric=metric if metric is not None else instantiate(run_cfg.metric),
        channels_last=channels_last,
        compile=False,
    )
    module.load_state_dict(checkpoint["state_dict"])
    module.run_config = checkpoint["ocr_config"]
    log.info("Loaded %s (epoch %s, step %s)", path, checkpoint.get("epoch"), checkpoint.get("global_step"))
    return module


def restore_for_inference(cfg: DictConfig, metric: Any | None) -> tuple[DetectionModule, L.Trainer]:
    """What test and predict start from: the module of ``cfg.ckpt`` (post-processing from ``cfg``, a
    warning for each data setting that differs from its training run) and a trainer from ``cfg.trainer``
    without loggers, callbacks or checkpointing."""
    module = module_from_checkpoint(
        cfg.ckpt,
        postprocess=instantiate(cfg.postprocess),
        metric=metric,
        channels_last=cfg.module.channels_last,
    )
    warn_data_mismatch(module.run_config, cfg.data)
    trainer = instantiate(cfg.trainer, logger=False, callbacks=[], enable_checkpointing=False)
    return module, trainer


def warn_data_mismatch(run_config: dict[str, Any], data_cfg: DictConfig) -> list[str]:
    """Log (and return) the evaluation-time data settings that differ from the training run's.

    Test and predict take ``data`` from their own command line; evaluating at another size than the
    model was validated at can cost many points (docs/benchmarks.md), so say which keys differ.
    """
    trained = OmegaConf.create(run_config.get("data", {}))
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
