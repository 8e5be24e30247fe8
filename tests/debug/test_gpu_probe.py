"""GPU probe: which steps run under the sync debug mode, documented syncs, per-stage memory, the report."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ocr.debug.gpu_probe import GpuProbe


def test_steady_state_steps_error_except_warmup_and_logging_steps() -> None:
    probe = GpuProbe(dirpath=".", warmup_steps=3)
    modes = [probe.mode_for_step(step, log_every_n_steps=5) for step in range(12)]
    # warm-up 0-2; Lightning converts logged values after steps 4 and 9 ((step + 1) % 5 == 0)
    assert modes == [0, 0, 0, 2, 0, 2, 2, 2, 2, 0, 2, 2]


class FakeCuda:
    """torch.cuda's sync debug mode and peak-memory counters, recorded on the CPU."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.mode = 0
        self.modes: list[int] = []
        self.peak = 0
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: self.mode)
        monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", self.set_mode)
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: setattr(self, "peak", 0))
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: self.peak)
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 2 * self.peak)

    def set_mode(self, mode: int) -> None:
        self.mode = mode
        self.modes.append(mode)


def test_cuda_branch_windows_and_peaks_per_stage(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cuda = FakeCuda(monkeypatch)
    probe = GpuProbe(dirpath=str(tmp_path), warmup_steps=1)
    trainer = SimpleNamespace(
        global_step=0,
        log_every_n_steps=50,
        global_rank=0,
        strategy=SimpleNamespace(root_device=torch.device("cpu")),
        state=SimpleNamespace(fn="fit"),
    )
    probe.setup(trainer, SimpleNamespace(device=SimpleNamespace(type="cuda")), "fit")
    probe.on_train_start(trainer, None)
    for step in range(3):
        trainer.global_step = step
        probe.on_train_batch_start(trainer, None, None, step)
        cuda.peak = 2**30 * (step + 1)
    assert cuda.mode == 2
    probe.on_validation_start(trainer, None)
    assert cuda.mode == 0  # validation is not in the window
    cuda.peak = 2**29
    probe.on_validation_end(trainer, None)
    probe.on_train_end(trainer, None)
    probe.on_fit_end(trainer, None)
    report = json.loads((tmp_path / "gpu_probe.json").read_text())
    assert report["sync_debug"]["steps_under_error_mode"] == 2
    assert report["peak_memory_gib"]["train"] == {"allocated_gib": 3.0, "reserved_gib": 6.0}
    assert report["peak_memory_gib"]["val"]["allocated_gib"] == 0.5
