"""timm ``features_only`` encoder with an optional local weights file."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from timm.models import FeatureInfo

__all__ = [
    "EXPECTED_REDUCTIONS",
    "TOLERATED_UNEXPECTED_PREFIXES",
    "TimmEncoder",
    "load_weights",
    "read_state_dict",
]

log = logging.getLogger(__name__)


def _import_timm_without_wandb() -> ModuleType:
    """Import timm without running its optional ``import wandb`` (in ``timm.utils.summary``).

    Importing this package must never import wandb: that costs seconds and can hang start-up. wandb is
    imported only when the wandb logger is chosen (``ocr.utils.loggers``).
    """
    if "wandb" in sys.modules:
        import timm

        return timm
    sys.modules["wandb"] = None  # type: ignore[assignment]  # `import wandb` raises ImportError; timm allows it
    try:
        import timm
    finally:
        del sys.modules["wandb"]
    return timm


timm = _import_timm_without_wandb()

EXPECTED_REDUCTIONS = [4, 8, 16, 32]
# Classification checkpoints carry a classifier that a features_only model does not have.
TOLERATED_UNEXPECTED_PREFIXES = ("fc.", "classifier.", "head.", "conv_head.", "global_pool.", "head_hidden.")


class TimmEncoder(nn.Module):
    """Any timm model that supports ``features_only``, returning the strides 4, 8, 16, 32 feature maps.

    Args:
        name: timm model name (e.g. ``resnet18``, ``mobilenetv3_large_100``).
        pretrained: download timm's pretrained weights (needs the model hub).
        weights_path: local ``.pth``/``.pt``/``.safetensors`` state dict to load instead (offline use).
        out_indices: timm feature indices; their reductions must be ``[4, 8, 16, 32]``.

    Raises:
        RuntimeError: the pretrained download failed (the message says how to pass a local file).
        ValueError: bad combination of options or reductions that are not 4, 8, 16, 32.
    """

    def __init__(
        self,
        *,
        name: str,
        pretrained: bool,
        weights_path: str | None,
        out_indices: list[int] | tuple[int, ...],
    ) -> None:
        super().__init__()
        if pretrained and weights_path is not None:
            raise ValueError(
                f"model.encoder: pretrained=true and weights_path={weights_path!r} both set; "
                "use one: pretrained=false with weights_path for local weights"
            )
        self.body = _create(name, pretrained, tuple(out_indices))
        # timm's features_only models carry it; nn.Module's stub types attributes as Tensor | Module.
        info: FeatureInfo = self.body.feature_info  # type: ignore[assignment]
        reductions = list(info.reduction())
        if reductions != EXPECTED_REDUCTIONS:
            raise ValueError(
                f"model.encoder: {name} out_indices={list(out_indices)} gives reductions {reductions}, "
                f"expected {EXPECTED_REDUCTIONS}"
            )
        self.channels: list[int] = list(info.channels())
        if weights_path is not None:
            load_weights(self.body, weights_path)

    def forward(self, images: Tensor) -> list[Tensor]:
        """(B, 3, H, W) -> [(B, C_i, H/s, W/s) for s in 4, 8, 16, 32], C_i = ``self.channels[i]``."""
        return self.body(images)


def _create(name: str, pretrained: bool, out_indices: tuple[int, ...]) -> nn.Module:
    try:
        return timm.create_model(name, pretrained=pretrained, features_only=True, out_indices=out_indices)
    except (OSError, RuntimeError, ValueError) as exc:
        if not pretrained:
            raise
        raise RuntimeError(
            f"model.encoder: downloading pretrained weights for {name!r} failed ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); pass model.encoder.pretrained=false "
            "model.encoder.weights_path=/path/to/weights.pth (or .safetensors)"
        ) from exc


def read_state_dict(path: Path) -> Mapping[str, Tensor]:
    """The tensors of a ``.safetensors`` file or a ``torch.save``d state dict (read weights-only; one
    ``state_dict`` or ``model`` wrapper is unwrapped).

    Raises:
        ValueError: the file holds something else than a mapping of tensors.
    """
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    state = torch.load(path, map_location="cpu", weights_only=True)
    for wrapper in ("state_dict", "model"):
        if isinstance(state, Mapping) and wrapper in state and isinstance(state[wrapper], Mapping):
            state = state[wrapper]
    if not isinstance(state, Mapping):
        raise ValueError(f"{path}: expected a state dict (mapping of tensors), got {type(state).__name__}")
    return state


def load_weights(module: nn.Module, weights_path: str | Path) -> None:
    """Load a local state dict into ``module``; every parameter must be present, classifier keys may be extra.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: keys are missing, shapes differ, or there are unexpected keys other than a classifier's.
    """
    path = Path(weights_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"model.encoder.weights_path: no such file {str(path)!r}")
    state = read_state_dict(path)
    try:
        result = module.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise ValueError(f"model.encoder.weights_path {str(path)!r} does not fit the encoder: {exc}") from exc
    unexpected = [k for k in result.unexpected_keys if not k.startswith(TOLERATED_UNEXPECTED_PREFIXES)]
    if result.missing_keys or unexpected:
        raise ValueError(
            f"model.encoder.weights_path {str(path)!r} does not fit the encoder: "
            f"{len(result.missing_keys)} missing keys (e.g. {result.missing_keys[:3]}), "
            f"{len(unexpected)} unexpected keys (e.g. {unexpected[:3]})"
        )
    log.info("Loaded encoder weights from %s (%d tensors)", path, len(state))
