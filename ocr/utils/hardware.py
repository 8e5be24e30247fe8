"""Machine detection behind the ``hardware=auto`` preset (OmegaConf resolvers ``hw.*``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from ocr.utils.environment import cpu_flags

if TYPE_CHECKING:
    import torch

__all__ = [
    "register_resolvers",
    "has_cuda",
    "cpu_has_native_bf16",
    "auto_precision",
    "autocast_dtype",
    "auto_workers",
    "pick",
    "first_set",
]


def has_cuda() -> bool:
    """True when a CUDA device is usable."""
    import torch

    return torch.cuda.is_available()


def cpu_has_native_bf16() -> bool:
    """True when the CPU has bf16 instructions (AVX512-BF16 or AMX); emulated bf16 is slower than fp32."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def auto_precision() -> str:
    """bf16 autocast where the GPU (or CPU) supports it natively, fp16 autocast on older GPUs, else fp32.

    Losses always run in float32 (autocast is disabled inside them).
    """
    import torch

    if torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    return "bf16-mixed" if cpu_has_native_bf16() else "32-true"


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a Lightning ``precision`` string (None: no autocast)."""
    import torch

    return {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)


def auto_workers(cap: int) -> int:
    """DataLoader workers: the usable cores minus one for the main process, at most ``cap``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(int(cap), cores - 1))


def pick(cpu_value: Any, cuda_value: Any) -> Any:
    """``cuda_value`` when a GPU is usable, else ``cpu_value``."""
    return cuda_value if has_cuda() else cpu_value


def first_set(value: Any, default: Any) -> Any:
    """``value`` unless it is None, else ``default`` (``oc.select`` returns a null value as is)."""
    return default if value is None else value


def register_resolvers() -> None:
    """Register ``${hw.pick:cpu,cuda}``, ``${hw.precision:}``, ``${hw.workers:cap}`` and
    ``${first_set:value,default}`` (used by the Hydra run directory) once."""
    resolvers = {
        "hw.pick": pick,
        "hw.precision": auto_precision,
        "hw.workers": auto_workers,
        "first_set": first_set,
    }
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
