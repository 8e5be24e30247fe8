"""Machine detection behind the ``hardware=auto`` preset (OmegaConf resolvers ``hw.*``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from ocr.machine import distributed
from ocr.machine.checks import check_cuda_usable
from ocr.machine.environment import cpu_flags

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
    "node_workers",
    "device_processes",
    "usable_cores",
    "pick",
    "first_set",
]


class CudaUnusableError(RuntimeError):
    """An NVIDIA driver is present but torch cannot use CUDA (``hardware=auto`` refuses the CPU then)."""


def has_cuda() -> bool:
    """True when a CUDA device is usable, False without an NVIDIA driver; CudaUnusableError (explained by
    :func:`check_cuda_usable`) when a driver is present but CUDA is not, unless ``CUDA_VISIBLE_DEVICES=``."""
    import torch

    if torch.cuda.is_available():
        return True
    verdict = check_cuda_usable()
    if verdict.status == "fail":
        raise CudaUnusableError(
            f"hardware=auto: {verdict.detail}. Training would silently run on the CPU. Fix: {verdict.fix}. "
            "Details: scripts/debug_cuda.sh doctor"
        )
    return False


def cuda_has_native_bf16() -> bool:
    """True when the current GPU runs bf16 natively (Ampere and newer): ``torch.cuda.is_bf16_supported()``
    also counts the slow emulation of T4 and V100, where fp16 with a grad scaler is the right choice."""
    import torch

    return torch.cuda.is_bf16_supported(including_emulation=False)


def cpu_has_native_bf16() -> bool:
    """True when the CPU has bf16 instructions (AVX512-BF16 or AMX); emulated bf16 is slower than fp32."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def auto_precision(device: str = "auto") -> str:
    """bf16 autocast where the GPU (or CPU) supports it natively, fp16 on older GPUs, else fp32; ``device``
    ``auto`` (the GPU when usable) or ``cpu``. Losses always run in float32."""
    import torch

    if device not in ("auto", "cpu"):
        raise ValueError(f"hw.precision: expected 'auto' or 'cpu', got {device!r}")
    if device == "auto" and torch.cuda.is_available():
        return "bf16-mixed" if cuda_has_native_bf16() else "16-mixed"
    return "bf16-mixed" if cpu_has_native_bf16() else "32-true"


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a Lightning ``precision`` string (None: no autocast)."""
    import torch

    return {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)


def device_processes(devices: Any) -> int:
    """How many training processes Lightning starts for a ``trainer.devices`` value (any form Lightning
    accepts: -1 or ``'auto'`` for every visible GPU, ids as a list or ``'0,1'``, a number), at least 1."""
    if isinstance(devices, str):
        text = devices.strip()
        if text in ("auto", "-1"):
            return _visible_gpus()
        if "," in text:
            return max(1, len([part for part in text.split(",") if part.strip()]))
        try:
            devices = int(text)
        except ValueError:
            raise ValueError(
                f"trainer.devices={devices!r}: expected an int, a list of device ids, a comma string of ids "
                "such as '0,1', or 'auto'"
            ) from None
    if isinstance(devices, Sequence):
        return max(1, len(devices))
    count = int(devices)
    return _visible_gpus() if count < 0 else max(1, count)


def _visible_gpus() -> int:
    import torch

    return max(1, torch.cuda.device_count())


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a container's or taskset's share)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def auto_workers(cap: int, devices: Any = 1) -> int:
    """DataLoader workers per training process: the usable cores shared by the training processes (DDP),
    minus one for each main process, at most ``cap``. ``devices`` is any ``trainer.devices`` value
    (see :func:`device_processes`)."""
    return max(0, min(int(cap), usable_cores() // device_processes(devices) - 1))


def node_workers(cap: int, devices: Any = 1) -> int:
    """DataLoader workers per training process of a multi-node run: SLURM's ``--cpus-per-task`` minus one
    for the process itself (srun gives each task its own cores, so the usable cores are one task's, not the
    node's), else :func:`auto_workers` (torchrun: the node's cores shared by its processes); at most ``cap``.
    """
    cpus = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if distributed.launch_info().launcher == "slurm" and cpus.isdigit():
        return max(0, min(int(cap), int(cpus) - 1))
    return auto_workers(cap, devices)


def pick(cpu_value: Any, cuda_value: Any) -> Any:
    """``cuda_value`` when a GPU is usable, else ``cpu_value``."""
    return cuda_value if has_cuda() else cpu_value


def first_set(value: Any, default: Any) -> Any:
    """``value`` unless it is None, else ``default`` (``oc.select`` returns a null value as is)."""
    return default if value is None else value


def register_resolvers() -> None:
    """Register the ``hw.*`` resolvers (``pick``, ``precision``, ``workers``, ``node_workers``, ``num_nodes``,
    ``devices_per_node``), ``first_set`` and the ``dist.*`` names of the run directory and each rank's log
    and config record (``ocr.machine.distributed``), once."""
    resolvers: dict[str, Callable[..., Any]] = {
        "hw.pick": pick,
        "hw.precision": auto_precision,
        "hw.workers": auto_workers,
        "hw.node_workers": node_workers,
        "hw.num_nodes": distributed.num_nodes,
        "hw.devices_per_node": distributed.devices_per_node,
        "first_set": first_set,
        "dist.run_name": distributed.run_name,
        "dist.log_name": distributed.log_name,
        "dist.rank_zero_only": distributed.rank_zero_only_value,
    }
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
