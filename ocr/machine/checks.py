"""Preflight checks: each returns :class:`CheckResult` (ok / warn / fail, a detail and a one-line fix).
The fast checks (no subprocess, no GPU work) also run at the start of every training run; the slow ones
(smoke convolutions in a child process, DataLoader workers, the wandb import) run in the doctor."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from ocr.machine.environment import (
    cpu_info,
    cuda_info,
    driver_version,
    free_bytes,
    package_versions,
    required_cpu_flags,
    wsl_info,
)

__all__ = [
    "CheckResult",
    "SquaresDataset",
    "Status",
    "check_cpu_flags",
    "check_cuda_usable",
    "check_disk",
    "check_gpu_arch",
    "check_shared_memory",
    "check_versions",
    "check_wsl",
    "fast_checks",
    "format_table",
    "rate_missing_gpu",
    "worst_status",
]

Status = Literal["ok", "warn", "fail"]
_RANK = {"ok": 0, "warn": 1, "fail": 2}
MIN_FREE_DISK_GIB = (1.0, 10.0)  # fail below the first, warn below the second
MIN_SHM_GIB = 1.0


class SquaresDataset:
    """A picklable toy dataset for the DataLoader worker start-up check."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        return index * index


@dataclass(frozen=True)
class CheckResult:
    """One doctor verdict; ``fix`` is a one-line instruction (empty when ``status == "ok"``)."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def worst_status(results: list[CheckResult]) -> Status:
    """The most severe status among ``results`` (``ok`` when empty)."""
    return max((r.status for r in results), key=_RANK.__getitem__, default="ok")


def check_versions() -> CheckResult:
    """torch, CUDA runtime, cuDNN and driver versions; warns on a CPU-only torch build."""
    versions = package_versions(("torch", "lightning"))
    info = cuda_info(query_devices=False)
    driver = driver_version()
    detail = (
        f"torch {versions['torch']}, lightning {versions['lightning']}, CUDA runtime {info['torch_cuda']}, "
        f"cuDNN {info['cudnn']}, driver {driver or 'none'}"
    )
    if info["torch_cuda"] is None and driver:
        return CheckResult(
            "versions",
            "warn",
            detail + " (CPU-only torch on a machine with an NVIDIA driver)",
            "install a CUDA build of torch (uv sync picks the one in pyproject/uv.lock)",
        )
    return CheckResult("versions", "ok", detail)


def check_gpu_arch() -> CheckResult:
    """Each GPU's compute capability must be compiled into torch (else: 'no kernel image is available')."""
    info = cuda_info(query_devices=True)
    if info.get("error"):
        return CheckResult(
            "gpu",
            "fail",
            f"CUDA query failed: {info['error']}",
            "check the driver with nvidia-smi; under WSL2 update the Windows NVIDIA driver",
        )
    if not info["available"]:
        return CheckResult(
            "gpu",
            "warn",
            "no CUDA GPU visible: training runs on the CPU (slow)",
            "on a GPU machine check nvidia-smi, CUDA_VISIBLE_DEVICES and the torch CUDA build",
        )
    arch = set(info["arch_list"])
    problems, names = [], []
    for device in info["devices"]:
        sm = "sm_" + device["capability"].replace(".", "")
        names.append(f"{device['name']} ({sm}, {device['total_memory_gib']} GiB)")
        # A PTX entry (compute_XY) for an older or equal arch can be JIT-compiled for newer GPUs.
        ptx_ok = any(a.startswith("compute_") and int(a[8:]) <= int(sm[3:]) for a in arch if a[8:].isdigit())
        if sm not in arch and not ptx_ok:
            problems.append(f"{sm} not in torch arch list {sorted(arch)}")
    if problems:
        return CheckResult(
            "gpu",
            "fail",
            "; ".join(names + problems),
            "install a torch build compiled for this GPU (see pytorch.org 'Get started')",
        )
    return CheckResult("gpu", "ok", ", ".join(names) + f"; bf16: {info.get('bf16_supported')}")


def _cuda_init_error() -> str:
    """Why torch cannot initialise CUDA, in torch's own words (first line)."""
    import torch

    try:
        torch.cuda.init()
    except Exception as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return "torch.cuda.is_available() is False"


def check_cuda_usable() -> CheckResult:
    """A driver (or nvidia-smi) is present but torch cannot use CUDA: a run would silently use the CPU. Hiding
    the GPUs on purpose (``CUDA_VISIBLE_DEVICES=`` or ``-1``) is the way to train on the CPU anyway."""
    import torch

    driver = driver_version()
    if torch.cuda.is_available():
        return CheckResult("cuda_usable", "ok", f"CUDA usable (driver {driver or 'unknown'})")
    if not driver:
        return CheckResult("cuda_usable", "ok", "no NVIDIA driver: a CPU machine")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return CheckResult(
            "cuda_usable", "ok", f"driver {driver}; GPUs hidden on purpose (CUDA_VISIBLE_DEVICES={visible!r})"
        )
    cpu_anyway = "to train on the CPU anyway, hide the GPUs: CUDA_VISIBLE_DEVICES= <command>"
    if torch.version.cuda is None:
        return CheckResult(
            "cuda_usable",
            "fail",
            f"NVIDIA driver {driver} present but torch {torch.__version__} is a CPU-only build",
            f"install a CUDA build of torch (uv sync picks the one in pyproject/uv.lock); {cpu_anyway}",
        )
    return CheckResult(
        "cuda_usable",
        "fail",
        f"NVIDIA driver {driver} present but torch {torch.__version__} (built for CUDA {torch.version.cuda}) "
        f"cannot use it: {_cuda_init_error()}",
        f"install an NVIDIA driver that supports CUDA {torch.version.cuda} (CUDA 13.x needs >= 580; check "
        f"nvidia-smi, CUDA_VISIBLE_DEVICES and, under WSL2, the Windows driver) or a torch build for the "
        f"driver's CUDA version; {cpu_anyway}",
    )


def check_cpu_flags() -> CheckResult:
    """The SIMD level torch dispatches to must be supported by this CPU (else: 'illegal instruction')."""
    info = cpu_info()
    capability = info["torch_capability"]
    if not info["flags_known"]:
        return CheckResult("cpu", "ok", f"{info['model']}; torch CPU capability {capability} (flags unknown)")
    missing = [f for f in required_cpu_flags(capability) if not info["flags"].get(f)]
    present = ",".join(f for f, on in info["flags"].items() if on)
    detail = f"{info['model']}; torch dispatches {capability}; CPU flags: {present}"
    if missing:
        return CheckResult(
            "cpu",
            "fail",
            f"{detail}; missing {missing}",
            "export ATEN_CPU_CAPABILITY=default (or avx2) before running",
        )
    if not info["flags"].get("avx2"):
        return CheckResult(
            "cpu",
            "warn",
            detail + "; no AVX2 (a VM may hide it): slow, and some wheels need it",
            "enable CPU flag pass-through in the VM/hypervisor, or use ATEN_CPU_CAPABILITY=default",
        )
    return CheckResult("cpu", "ok", detail)


def check_wsl(output_dir: Path) -> CheckResult:
    """WSL2 detection; warns when outputs live on the slow /mnt/<drive> bridge."""
    info = wsl_info()
    if not info["is_wsl"]:
        return CheckResult("wsl", "ok", f"not WSL (kernel {info['kernel_release']})")
    detail = f"WSL{info['wsl_version'] or ''} (kernel {info['kernel_release']}). Caveats: " + "; ".join(
        info["caveats"]
    )
    if str(output_dir.resolve()).startswith("/mnt/"):
        return CheckResult(
            "wsl", "warn", detail, "move the project and outputs/ into the Linux filesystem (~/)"
        )
    return CheckResult("wsl", "ok", detail)


def check_disk(output_dir: Path) -> CheckResult:
    """Free disk space where checkpoints and logs are written."""
    free_gib = free_bytes(output_dir)[0] / 2**30
    detail = f"{free_gib:.1f} GiB free under {output_dir}"
    fail_below, warn_below = MIN_FREE_DISK_GIB
    if free_gib < fail_below:
        return CheckResult(
            "disk", "fail", detail, "free space or point paths.output_dir / hydra.run.dir elsewhere"
        )
    if free_gib < warn_below:
        return CheckResult("disk", "warn", detail, "checkpoints need ~100 MB each; free some space")
    return CheckResult("disk", "ok", detail)


def check_shared_memory() -> CheckResult:
    """``/dev/shm`` size: DataLoader workers pass batches through it (Docker's default is 64 MB)."""
    shm = Path("/dev/shm")
    if not shm.exists():
        return CheckResult("shm", "ok", "/dev/shm absent (not Linux): workers use file descriptors")
    total_gib = shutil.disk_usage(shm).total / 2**30
    detail = f"/dev/shm {total_gib:.2f} GiB"
    if total_gib < MIN_SHM_GIB:
        return CheckResult(
            "shm",
            "warn",
            detail + ": DataLoader workers may die with 'bus error'",
            "docker run --shm-size=8g (or --ipc=host), or set data.num_workers=0",
        )
    return CheckResult("shm", "ok", detail)


def format_table(results: list[CheckResult]) -> str:
    """A plain-text verdict table: one row per check, fixes for the non-ok ones."""
    width = max((len(r.name) for r in results), default=5)
    lines = [f"{'check':<{width}}  status  detail", "-" * (width + 60)]
    for r in results:
        lines.append(f"{r.name:<{width}}  {r.status:<6}  {r.detail}")
        if r.fix:
            lines.append(f"{'':<{width}}  {'':<6}  fix: {r.fix}")
    lines.append(f"verdict: {worst_status(results)}")
    return "\n".join(lines)


def run_checks(checks: Iterable[tuple[str, Callable[[], CheckResult]]]) -> list[CheckResult]:
    """Run each named check; a check that crashes becomes a ``warn`` row instead of stopping the rest."""
    results = []
    for name, check in checks:
        try:
            results.append(check())
        except Exception as exc:
            results.append(
                CheckResult(
                    name,
                    "warn",
                    f"check crashed: {type(exc).__name__}: {exc}",
                    f"report this as a bug in the doctor's '{name}' check",
                )
            )
    return results


def rate_missing_gpu(results: list[CheckResult], driver: str | None) -> list[CheckResult]:
    """On a machine without an NVIDIA driver (``driver`` None) a run trains on the CPU as its hardware
    preset plans: the "no CUDA GPU visible" warning becomes ok there (the doctor and a run's preflight
    agree). A GPU machine whose CUDA does not work keeps the warning (its ``cuda_usable`` row says why)."""
    if driver is not None:
        return results
    return [
        CheckResult("gpu", "ok", "no GPU on this machine: training on the CPU")
        if r.name == "gpu" and r.status == "warn"
        else r
        for r in results
    ]


def fast_checks(output_dir: Path) -> list[CheckResult]:
    """The checks cheap enough for every training run (well under a second once torch is imported)."""
    return run_checks(
        [
            ("versions", check_versions),
            ("gpu", check_gpu_arch),
            ("cuda_usable", check_cuda_usable),
            ("cpu", check_cpu_flags),
            ("wsl", lambda: check_wsl(output_dir)),
            ("disk", lambda: check_disk(output_dir)),
            ("shm", check_shared_memory),
        ]
    )
