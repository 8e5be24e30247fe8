"""Environment report for the doctor and crash bundles: versions, GPU, CPU flags, WSL2. Every probe is
guarded: a missing package, a driver that does not answer or a CUDA context that an earlier fault has
poisoned gives an ``"error: ..."`` string, never an exception."""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "collect_environment",
    "cpu_info",
    "cuda_info",
    "free_bytes",
    "driver_version",
    "package_versions",
    "required_cpu_flags",
    "wsl_info",
]

PACKAGES = tuple(
    "torch torchvision lightning torchmetrics hydra-core omegaconf timm albumentations "
    "opencv-python-headless numpy shapely pyclipper wandb".split()
)
ENV_VARS = tuple(
    "CUDA_VISIBLE_DEVICES CUDA_LAUNCH_BLOCKING TORCH_USE_CUDA_DSA PYTORCH_CUDA_ALLOC_CONF "
    "CUBLAS_WORKSPACE_CONFIG ATEN_CPU_CAPABILITY OMP_NUM_THREADS WANDB_MODE NCCL_P2P_DISABLE "
    "LD_LIBRARY_PATH".split()
)
# The SIMD flags the CPU report shows.
CPU_FLAGS = tuple("sse4_2 avx avx2 fma f16c avx512f avx512bw avx512vl avx512dq avx512_bf16 amx_tile".split())
# CPU flags each ATen dispatch level needs (aten/src/ATen/native/DispatchStub.cpp).
CAPABILITY_FLAGS = {
    "AVX512": ("avx512f", "avx512bw", "avx512vl", "avx512dq"),
    "AVX2": ("avx2", "fma"),
}
WSL_CAVEATS = (
    "the GPU driver is the Windows one: never install a Linux NVIDIA driver inside WSL2 "
    "(libcuda.so lives in /usr/lib/wsl/lib)",
    "pinned (page-locked) memory is limited: if transfers fail or stall, set data.pin_memory=false",
    "files under /mnt/<drive> go through a slow 9P bridge: keep datasets and outputs/ in the Linux "
    "filesystem",
    "WSL2 gets at most part of the host RAM (.wslconfig memory=): DataLoader workers can be OOM-killed",
    "CUDA developer tools (compute-sanitizer, Nsight) have limited WSL2 support on older toolkits",
)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed distribution versions (``None`` when not installed); never imports the packages."""
    versions: dict[str, str | None] = dict.fromkeys(names)
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[name] = importlib.metadata.version(name)
    return versions


def wsl_info() -> dict[str, Any]:
    """Whether this is WSL (1 or 2), from the kernel release string, with the known caveats."""
    release = (_read_text("/proc/sys/kernel/osrelease") or platform.release()).strip()
    is_wsl = "microsoft" in release.lower() or "WSL_DISTRO_NAME" in os.environ
    version = 0 if not is_wsl else 2 if "wsl2" in release.lower() or Path("/run/WSL").exists() else 1
    return {
        "is_wsl": is_wsl,
        "wsl_version": version,
        "kernel_release": release,
        "caveats": list(WSL_CAVEATS) if is_wsl else [],
    }


def cpu_flags() -> set[str]:
    """The CPU feature flags of ``/proc/cpuinfo`` (empty where it cannot be read)."""
    flags_line = re.search(r"^flags\s*:\s*(.*)$", _read_text("/proc/cpuinfo") or "", re.MULTILINE)
    return set(flags_line.group(1).split()) if flags_line else set()


def cpu_info() -> dict[str, Any]:
    """CPU model, the SIMD flags that matter, and the capability level torch dispatches to."""
    model = re.search(r"^model name\s*:\s*(.*)$", _read_text("/proc/cpuinfo") or "", re.MULTILINE)
    flags = cpu_flags()
    info: dict[str, Any] = {
        "model": model.group(1).strip() if model else platform.processor(),
        "machine": platform.machine(),
        "logical_cpus": os.cpu_count(),
        "flags_known": bool(flags),
        "flags": {flag: flag in flags for flag in CPU_FLAGS},
    }
    try:
        import torch

        info["torch_capability"] = torch.backends.cpu.get_cpu_capability()
    except Exception as exc:
        info["torch_capability"] = f"error: {exc}"
    return info


def required_cpu_flags(capability: str | None) -> tuple[str, ...]:
    """The CPU flags an ATen capability level (``AVX512``, ``AVX2``, ``DEFAULT``) needs."""
    return CAPABILITY_FLAGS.get((capability or "").upper(), ())


@functools.cache  # the driver cannot change under a running process; nvidia-smi can take seconds
def driver_version(timeout_s: float = 10.0) -> str | None:
    """NVIDIA driver version from ``/proc`` or ``nvidia-smi`` (``None`` without a driver)."""
    proc = _read_text("/proc/driver/nvidia/version")
    if proc:
        match = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([\d.]+)", proc)
        if match:
            return match.group(1)
    smi = shutil.which("nvidia-smi") or (
        "/usr/lib/wsl/lib/nvidia-smi" if Path("/usr/lib/wsl/lib/nvidia-smi").exists() else None
    )
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"error: {exc}"
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def cuda_info(query_devices: bool = True) -> dict[str, Any]:
    """torch's CUDA/cuDNN build, arch list and (when ``query_devices``) every visible GPU. Pass
    ``query_devices=False`` after a CUDA fault: the context may be poisoned and any call can fail."""
    import torch

    info: dict[str, Any] = {
        "torch_cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn": None,
        "arch_list": [],
        "available": None,
        "devices": [],
    }
    try:
        info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        info["arch_list"] = torch.cuda.get_arch_list()
    except Exception as exc:
        info["cudnn"] = f"error: {exc}"
    if not query_devices:
        return info
    try:
        info["available"] = torch.cuda.is_available()
        for index in range(torch.cuda.device_count() if info["available"] else 0):
            props = torch.cuda.get_device_properties(index)
            info["devices"].append(
                {
                    "index": index,
                    "name": props.name,
                    "capability": f"{props.major}.{props.minor}",
                    "total_memory_gib": round(props.total_memory / 2**30, 2),
                    "multiprocessors": props.multi_processor_count,
                }
            )
        if info["available"]:
            info["bf16_supported"] = torch.cuda.is_bf16_supported(including_emulation=False)
    except Exception as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
    return info


def collect_environment(query_cuda: bool = True) -> dict[str, Any]:
    """The full report: Python, platform, packages, CPU, WSL, CUDA, driver and relevant env vars."""
    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "packages": package_versions(),
        "cpu": cpu_info(),
        "wsl": wsl_info(),
        "driver": driver_version() if query_cuda else None,
        "env": {name: os.environ.get(name) for name in ENV_VARS if name in os.environ},
    }
    try:
        report["cuda"] = cuda_info(query_devices=query_cuda)
    except Exception as exc:
        report["cuda"] = {"error": f"{type(exc).__name__}: {exc}"}
    return report


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def free_bytes(path: str | os.PathLike[str]) -> tuple[int, Path]:
    """Free bytes on the file system of ``path`` and the folder measured (its nearest existing parent)."""
    folder = Path(path).resolve()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free, folder
