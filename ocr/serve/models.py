"""The models the web app serves: a ``.ckpt`` or an exported ONNX model with its own inference settings,
as one function from an upright image to a probability map.

Each model is restored as ``runners/predict.py`` restores it (``ocr.lightning_modules.restore`` for a
checkpoint, ``ocr.inference.onnx_runtime`` for an export): the evaluation transform and the
post-processing come from the checkpoint or the export's sidecar, unless this invocation's command line
set them.
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
    """One model ready to run.

    Attributes:
        name: the file it was loaded from.
        key: the config key that named it (``ckpt``, ``ckpt2`` or ``onnx_model``), for the commands shown.
        postprocess: the model's post-processing settings (``postprocess.*``, the checkpoint's own).
        transform: the evaluation transform (letterbox) the model was validated with.
        network: (1, 3, H, W) float32 normalised images -> (1, 1, H, W) float32 probabilities.
    """

    name: str
    key: str
    postprocess: dict[str, Any]
    transform: EvalTransform
    network: Callable[[torch.Tensor], torch.Tensor]

    def probability_map(self, source: SourceImage) -> tuple[npt.NDArray[np.float32], Geometry]:
        """The (H, W) float32 probability map of ``source`` in input px and the input -> original record."""
        result = self.transform(source, [], [])
        images = normalize_images(result.image[None], self.transform.mean, self.transform.std)
        with torch.inference_mode():
            prob_map = self.network(images)  # (1, 1, H, W)
        return prob_map[0, 0].float().cpu().numpy(), result.geometry


def load_served_model(cfg: DictConfig, key: str, path: str | Path) -> ServedModel:
    """Restore the model at ``path`` (an ``.onnx`` file when ``key`` is ``onnx_model``) with its own
    inference settings taken into a copy of ``cfg``.

    Raises:
        UsageError: a missing file, a file that is no checkpoint of this project (or no export with its
            sidecar), or weights that do not fit the network its run config describes; each names the key
            and the file.
    """
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
