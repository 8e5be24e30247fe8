"""scripts/debug_cuda.sh on a machine without a GPU: help, doctor, and a CPU run with an injected fault."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from tests.helpers.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "debug_cuda.sh"


def _run(
    args: list[str], tmp_path: Path, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEBUG_OUT": str(tmp_path / "debug"), "WANDB_MODE": "offline", **(extra_env or {})}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_help_explains_every_subcommand(tmp_path: Path) -> None:
    result = _run(["--help"], tmp_path)
    assert result.returncode == 0
    for sub in ("doctor", "cpu", "blocking", "sanitizer", "replay", "oom-probe", "CUDA_LAUNCH_BLOCKING"):
        assert sub in result.stdout
    assert _run(["bogus"], tmp_path).returncode == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
@pytest.mark.slow  # over 20 s on 2 busy cores
def test_doctor_without_gpu_says_so(tmp_path: Path) -> None:
    result = _run(["doctor"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no NVIDIA GPU visible" in result.stderr
    assert "no GPU on this machine: training on the CPU" in result.stdout  # ok, as the run's preflight
    (report,) = (tmp_path / "debug").glob("*-doctor/doctor.json")
    checks = {c["name"]: c for c in json.loads(report.read_text())["checks"]}
    assert checks["smoke_conv"]["status"] == "ok" and "cpu bf16" in checks["smoke_conv"]["detail"]
    assert {"dataloader", "wandb_import", "disk", "wsl"} <= set(checks)


@pytest.mark.slow  # over 20 s on 2 busy cores
def test_cpu_run_with_injected_exception_leaves_bundle(tmp_path: Path, tiny_run: list[str]) -> None:
    # debug_cuda.sh picks the device, precision and workers itself: pass only the data sizes.
    data = [o for o in tiny_run if o.startswith("data.") and "workers" not in o and "pin_memory" not in o]
    args = [
        "cpu",
        *data,
        "logger=csv",
        f"data.root={tmp_path / 'data'}",
        "debug=inject",
        "callbacks.inject.kind=exception",
    ]
    result = _run(args, tmp_path, {"DEBUG_STEPS": "2"})
    assert result.returncode == 1
    assert "short training run on the CPU" in result.stderr and "FAILED (exit 1)" in result.stderr
    (run,) = (tmp_path / "debug").glob("*-cpu")
    assert "InjectedFaultError" in (run / ".FAILURE").read_text()
    assert (run / "crash" / "batch.pt").is_file() and (run / "preflight.json").is_file()


def test_sanitizer_preset_uses_small_sizes_and_no_caching_allocator(tmp_path: Path) -> None:
    """memcheck cannot see overruns inside the caching allocator's blocks; full sizes would take hours."""
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(
        '#!/usr/bin/env bash\necho "cache=$PYTORCH_NO_CUDA_MEMORY_CACHING args=$*"\n'
        'echo "========= ERROR SUMMARY: 0 errors"\n'
    )
    fake.chmod(0o755)
    result = _run(["sanitizer", "memcheck", "data.batch_size=3"], tmp_path, {"COMPUTE_SANITIZER": str(fake)})
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("cache=")]
    assert line.startswith("cache=1 args=--tool memcheck")
    assert "data.train_transform.crop_size=256" in line and "data.eval_transform.long_side=512" in line
    assert line.index("data.batch_size=2") < line.index("data.batch_size=3")  # the user's override wins
