"""The guard's preflight at a training start: a CPU machine training on the CPU is not warned about its
missing GPU; a GPU machine whose CUDA does not work still is."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ocr.machine.checks import CheckResult
from ocr.run import guard as preflight
from ocr.run.guard import Guard
from tests.helpers.triage_tiny import fit_tiny

NO_GPU = CheckResult(
    "gpu", "warn", "no CUDA GPU visible: training runs on the CPU (slow)", "check nvidia-smi"
)


@pytest.mark.parametrize(
    ("driver", "row", "warned"),
    [
        (None, CheckResult("cuda_usable", "ok", "no NVIDIA driver: a CPU machine"), False),
        (
            "550.54",
            CheckResult("cuda_usable", "fail", "driver 550.54, but torch sees no GPU", "reinstall"),
            True,
        ),
    ],
)
def test_the_missing_gpu_is_a_warning_only_where_a_gpu_should_be(
    driver: str | None,
    row: CheckResult,
    warned: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(preflight, "fast_checks", lambda run_dir: [NO_GPU, row])
    monkeypatch.setattr(preflight, "driver_version", lambda: driver)
    callback = Guard(
        run_dir=str(tmp_path), check_every_n_steps=50, check_grads=False, fail_on_preflight=False
    )
    with caplog.at_level(logging.INFO, logger=preflight.__name__):
        fit_tiny(tmp_path, [callback], max_steps=1)
    gpu = next(r for r in callback.preflight if r.name == "gpu")
    assert (gpu.status == "warn") is warned
    assert ("Preflight checks found problems" in caplog.text) is warned
