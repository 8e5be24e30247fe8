"""Machine detection behind the ``hardware=auto`` preset (OmegaConf resolvers ``hw.*``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from ocr.utils.environment import cpu_flags

if TYPE_CHECKING:
    import torch

__all__ = [
    "CudaUnusableError",
    "register_resolvers",
    "has_cuda",
    "cuda_has_native_bf16",
    "cpu_has_native_bf16",
    "auto_precision",
    "autocast_dtype",
    "auto_workers",
    "pick",
    "first_set",
]


class CudaUnusableError(RuntimeError):
    """An NVIDIA driver is present but torch cannot use CUDA (``hardware=auto`` refuses the CPU then)."""


def has_cuda() -> bool:
    """True when a CUDA device is usable; False on a machine without an NVIDIA driver.

    Raises:
        CudaUnusableError: a driver (or nvidia-smi) is present but CUDA is not usable, with the doctor's
            explanation; ``CUDA_VISIBLE_DEVICES=`` (GPUs hidden on purpose) trains on the CPU anyway.
    """
    import torch

    if torch.cuda.is_available():
        return True
    from ocr.utils.doctor_checks import check_cuda_usable

    verdict = check_cuda_usable()
    if verdict.status == "fail":
        raise CudaUnusableError(
            f"hardware=auto: {verdict.detail}. Training would silently run on the CPU. Fix: {verdict.fix}. "
            "Details: scripts/debug_cuda.sh doctor"
        )
    return False


def cuda_has_native_bf16() -> bool:
    """True when the current GPU runs bf16 natively (Ampere and newer).

    ``torch.cuda.is_bf16_supported()`` also counts emulation, which pre-Ampere GPUs (T4, V100) have: there
    bf16 is slow and fp16 with a grad scaler is the right choice.
    """
    import torch

    return torch.cuda.is_bf16_supported(including_emulation=False)


def cpu_has_native_bf16() -> bool:
    """True when the CPU has bf16 instructions (AVX512-BF16 or AMX); emulated bf16 is slower than fp32."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def auto_precision() -> str:
    """bf16 autocast where the GPU (or CPU) supports it natively, fp16 autocast on older GPUs, else fp32.

    Losses always run in float32 (autocast is disabled inside them).
    """
    import torch

    if torch.cuda.is_available():
        return "bf16-mixed" if cuda_has_native_bf16() else "16-mixed"
    return "bf16-mixed" if cpu_has_native_bf16() else "32-true"


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a Lightning ``precision`` string (None: no autocast)."""
    import torch

    return {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)


def auto_workers(cap: int, devices: int = 1) -> int:
    """DataLoader workers per training process: the usable cores shared by ``devices`` processes (DDP), minus
    one for each main process, at most ``cap``. ``devices=-1`` means every visible GPU.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if int(devices) < 0:
        import torch

        devices = max(1, torch.cuda.device_count())
    return max(0, min(int(cap), cores // max(1, int(devices)) - 1))


def pick(cpu_value: Any, cuda_value: Any) -> Any:
    """``cuda_value`` when a GPU is usable, else ``cpu_value``."""
    return cuda_value if has_cuda() else cpu_value


def first_set(value: Any, default: Any) -> Any:
    """``value`` unless it is None, else ``default`` (``oc.select`` returns a null value as is)."""
    return default if value is None else value


def register_resolvers() -> None:
    """Register ``${hw.pick:cpu,cuda}``, ``${hw.precision:}``, ``${hw.workers:cap[,devices]}`` and
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
