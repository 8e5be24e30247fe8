"""compute-sanitizer report parsing and the batch-size search (no GPU needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ocr.debug import sanitizer
from ocr.debug.oom_probe import failure_reason, find_largest_batch
from ocr.debug.run_flags import run_flags
from tests.helpers.sanitizer_reports import ASSERT, MEMCHECK


def test_summary_names_kernel_of_invalid_read() -> None:
    summary = sanitizer.summarize_report(MEMCHECK)
    assert summary.errors == 1
    assert summary.first_error == "Invalid __global__ read of size 4 bytes"
    assert summary.kernel is not None and summary.kernel.startswith("void gather_kernel<float>")


def test_summary_names_kernel_of_device_assert() -> None:
    summary = sanitizer.summarize_report(ASSERT)
    assert summary.errors == 1 and "cudaErrorAssert" in (summary.first_error or "")
    assert summary.kernel is not None and summary.kernel.startswith("indexSelectSmallIndex")


def test_clean_and_unfinished_reports() -> None:
    assert (
        sanitizer.summarize_report(
            "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
        ).describe()
        == "0 errors"
    )
    assert sanitizer.summarize_report("========= COMPUTE-SANITIZER\nKilled\n").errors is None


def test_missing_sanitizer_explains_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sanitizer, "find_compute_sanitizer", lambda: None)
    assert sanitizer.run_sanitizer("memcheck", ["true"], tmp_path / "r.txt") == sanitizer.EXIT_NOT_FOUND
    assert "CUDA toolkit" in capsys.readouterr().err


def test_batch_search_finds_the_boundary() -> None:
    calls: list[int] = []

    def fits(size: int) -> bool:
        calls.append(size)
        return size <= 37

    assert find_largest_batch(fits, 1, 512) == (37, 38)
    assert find_largest_batch(lambda s: True, 1, 16) == (16, None)
    assert find_largest_batch(lambda s: False, 2, 16) == (None, 2)
    assert len(calls) < 16


@pytest.mark.slow  # over 20 s on 2 busy cores
def test_probe_cli_on_cpu_with_the_real_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hydra.core.global_hydra import GlobalHydra

    from ocr.debug.oom_probe import main

    GlobalHydra.instance().clear()
    assert main(["--device", "cpu", "--max", "2", "--image-size", "64", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "oom_probe.json").read_text())
    assert report["largest_fitting_batch"] == 2 and report["first_failing_batch"] is None
    assert "largest batch that trains: 2" in capsys.readouterr().out


def test_probe_counts_any_cuda_error_as_does_not_fit() -> None:
    """Very large batches can hit cuDNN/cuBLAS limits or 32-bit indexing before memory runs out."""
    assert failure_reason(torch.cuda.OutOfMemoryError("CUDA out of memory"), "cuda") == "out of memory"
    error = RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED\nmore detail")
    assert failure_reason(error, "cuda") == "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"
    assert failure_reason(error, "cpu") is None  # on the CPU a RuntimeError is a bug, not a size limit
    assert failure_reason(ValueError("bad config"), "cuda") is None


def test_run_flags_mirror_memory_format_benchmark_and_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda net: compiled.append(net) or net)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    cfg = OmegaConf.create(
        {"module": {"channels_last": True, "compile": True}, "trainer": {"benchmark": True}}
    )
    flags = run_flags(cfg)
    net = torch.nn.Conv2d(3, 4, 3)
    flags.apply(net, "cuda")
    assert torch.backends.cudnn.benchmark is True and compiled == [net]
    assert net.weight.is_contiguous(memory_format=torch.channels_last)
    assert flags.images(torch.randn(2, 3, 8, 8)).is_contiguous(memory_format=torch.channels_last)
    assert run_flags(OmegaConf.create({})) == type(flags)(False, False, False)
