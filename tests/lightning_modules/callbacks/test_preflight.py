"""Preflight at a training start: a CPU machine training on the CPU is not warned about its missing GPU;
a GPU machine whose CUDA does not work still is."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ocr.lightning_modules.callbacks import preflight
from ocr.lightning_modules.callbacks.preflight import Preflight
from ocr.machine.checks import CheckResult
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
    callback = Preflight(dirpath=str(tmp_path), fail_on_error=False)
    with caplog.at_level(logging.INFO, logger=preflight.__name__):
        fit_tiny(tmp_path, [callback], max_steps=1)
    gpu = next(r for r in callback.results if r.name == "gpu")
    assert (gpu.status == "warn") is warned
    assert ("Preflight checks found problems" in caplog.text) is warned
