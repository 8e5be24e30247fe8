"""The models the web app serves: a ``.ckpt`` or an ONNX export, restored as ``runners/predict.py``
restores them, with the transform and post-processing of the checkpoint or sidecar unless the command
line set them.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from ocr.data.coding import normalize_images
from ocr.data.transforms import EvalTransform, SourceImage
from ocr.types import Geometry
from ocr.utils.errors import CheckpointError, UsageError

__all__ = ["CONTROL_KEYS", "ServedModel", "load_served_model"]

# The post-processing values the page's controls change; the rest stay the model's.
CONTROL_KEYS = ("thresh", "box_thresh", "unclip_ratio")

log = logging.getLogger(__name__)


@dataclass
class ServedModel:
    """One model ready to run."""

    name: str  # the file it was loaded from
    key: str  # the config key that named it: ckpt, ckpt2 or onnx_model
    postprocess: dict[str, Any]  # postprocess.*
    transform: EvalTransform
    network: Callable[[torch.Tensor], torch.Tensor]  # (1, 3, H, W) normalised -> (1, 1, H, W) probabilities

    def probability_map(self, source: SourceImage) -> tuple[npt.NDArray[np.float32], Geometry]:
        """The (H, W) float32 probability map of ``source`` in input px and the input -> original record."""
        result = self.transform(source, [], [])
        images = normalize_images(result.image[None], self.transform.mean, self.transform.std)
        with torch.inference_mode():
            prob_map = self.network(images)  # (1, 1, H, W)
        return prob_map[0, 0].float().cpu().numpy(), result.geometry


def load_served_model(cfg: DictConfig, key: str, path: str | Path) -> ServedModel:
    """Restore the model at ``path`` (``.onnx`` when ``key`` is ``onnx_model``) with its own inference
    settings in a copy of ``cfg``; UsageError, naming key and file, for a file it cannot serve."""
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        cfg.ckpt = str(path)
        cfg.onnx_model = str(path) if key == "onnx_model" else None
    if key == "onnx_model":
        network, postprocess = _onnx_network(cfg)
    else:
        network, postprocess = _torch_network(cfg, key, path)
    transform = instantiate(cfg.data.eval_transform)
    if not isinstance(transform, EvalTransform):
        raise CheckpointError(f"{key}={path}: expected an EvalTransform, got {type(transform).__name__}")
    log.info("Serving %s=%s (input long side %d)", key, path, transform.long_side)
    return ServedModel(str(path), key, postprocess, transform, network)


def _torch_network(
    cfg: DictConfig, key: str, path: str | Path
) -> tuple[Callable[[torch.Tensor], torch.Tensor], dict[str, Any]]:
    from ocr.checkpoints.inference_settings import apply_stored_settings, stored_setting_keys
    from ocr.checkpoints.reading import load_checkpoint
    from ocr.lightning_modules.restore import CHECKPOINT_SOURCE, module_from_loaded
    from ocr.machine.hardware import cpu_has_native_bf16

    checkpoint = load_checkpoint(path, key)
    apply_stored_settings(cfg, checkpoint["ocr_config"], stored_setting_keys(cfg), CHECKPOINT_SOURCE)
    try:
        module = module_from_loaded(checkpoint, path, cfg)
    except UsageError:
        raise
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:
        # Weights of another network under a run config of this project's layout.
        raise CheckpointError(
            f"{key}={path}: its weights do not fit the network its run config describes ({exc})"
        ) from None
    module.eval()
    # As predict runs it on this CPU: bf16 autocast where the trainer config picks it and the CPU has it.
    bf16 = str(cfg.trainer.precision).startswith("bf16") and cpu_has_native_bf16()

    def network(images: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            prob_logits = module(images).prob_logits
        return torch.sigmoid(prob_logits.float())

    return network, _postprocess_settings(cfg)


def _onnx_network(cfg: DictConfig) -> tuple[Callable[[torch.Tensor], torch.Tensor], dict[str, Any]]:
    from ocr.inference.onnx_runtime import OnnxProbabilityMap, onnx_settings

    onnx_settings(cfg)
    try:
        network = OnnxProbabilityMap(cfg.onnx_model)
    except Exception as exc:  # ONNX Runtime raises its own exception types for a file it cannot load
        raise CheckpointError(f"onnx_model={cfg.onnx_model}: ONNX Runtime cannot load it ({exc})") from None
    return network, _postprocess_settings(cfg)


def _postprocess_settings(cfg: DictConfig) -> dict[str, Any]:
    settings = OmegaConf.to_container(cfg.postprocess, resolve=True)
    assert isinstance(settings, dict)
    return {str(k): v for k, v in settings.items()}
