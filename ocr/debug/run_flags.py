"""The run's speed flags that decide which kernels run, mirrored by replay and the OOM probe.

A fault tied to channels_last kernels, a cuDNN algorithm picked by ``cudnn.benchmark`` (which also needs
workspace memory) or a compiled graph does not reproduce without them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

__all__ = ["RunFlags", "run_flags"]


@dataclass(frozen=True)
class RunFlags:
    """``module.channels_last``, ``trainer.benchmark`` and ``module.compile`` of a run config."""

    channels_last: bool
    cudnn_benchmark: bool
    compile: bool

    def apply(self, net: nn.Module, device: str) -> Callable[[Tensor], Any]:
        """Set cuDNN benchmark, convert ``net`` to the run's memory format; the forward to call (compiled only
        on CUDA: a CPU replay would need a C++ compiler, and its failure would read as "reproduced")."""
        if device == "cuda":
            torch.backends.cudnn.benchmark = self.cudnn_benchmark
        if self.channels_last:
            net.to(memory_format=torch.channels_last)
        return torch.compile(net) if self.compile and device == "cuda" else net

    def images(self, images: Tensor) -> Tensor:
        """(B, 3, H, W) images in the run's memory format."""
        return images.contiguous(memory_format=torch.channels_last) if self.channels_last else images

    def describe(self) -> str:
        return (
            f"channels_last={self.channels_last}, cudnn.benchmark={self.cudnn_benchmark}, "
            f"compile={self.compile}"
        )


def run_flags(cfg: Any) -> RunFlags:
    """The flags of a composed or saved run config (missing keys: off)."""

    def flag(key: str) -> bool:
        return bool(OmegaConf.select(cfg, key, default=False))

    return RunFlags(flag("module.channels_last"), flag("trainer.benchmark"), flag("module.compile"))
