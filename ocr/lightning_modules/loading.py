"""Rebuild a DetectionModule from a checkpoint and the run config stored inside it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from ocr.lightning_modules.detection_module import DetectionModule

__all__ = ["load_checkpoint", "module_from_checkpoint"]

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


def module_from_checkpoint(
    path: str | Path, *, postprocess: Any, metric: Any | None, channels_last: bool
) -> DetectionModule:
    """The checkpoint's network and weights; post-processing and metric come from the caller."""
    checkpoint = load_checkpoint(path)
    run_cfg = OmegaConf.create(checkpoint["ocr_config"])
    module = instantiate(
        run_cfg.module,
        net=instantiate(run_cfg.model),
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
