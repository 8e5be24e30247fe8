"""GPU proof verdicts on hand-made run directories: the CUDA branches, judged on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

from ocr.debug.gpu_proof_checks import (
    check_bad_index,
    check_benchmark,
    check_nan_loss,
    check_proof_run,
    check_sanitizer,
    check_test,
    markdown_summary,
)
from ocr.debug.sanitizer import EXIT_NOT_FOUND
from tests.helpers.sanitizer_reports import ASSERT  # a memcheck report of PyTorch's index bounds assert


def _write(path: Path, payload: dict | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))


def test_sanitizer_verdicts(tmp_path: Path) -> None:
    _write(tmp_path / "clean" / "run" / "sanitizer-memcheck.txt", "========= ERROR SUMMARY: 0 errors\n")
    assert check_sanitizer(0, tmp_path / "clean", expect_errors=False)[0]
    assert not check_sanitizer(1, tmp_path / "clean", expect_errors=False)[0]
    _write(tmp_path / "bad" / "run" / "sanitizer-memcheck.txt", ASSERT)
    passed, details = check_sanitizer(1, tmp_path / "bad", expect_errors=True)
    assert passed and details["errors"] == 1 and "indexSelectSmallIndex" in details["kernel"]
    passed, details = check_sanitizer(EXIT_NOT_FOUND, tmp_path / "none", expect_errors=False)
    assert not passed and "compute-sanitizer was not found" in details["problem"]


def test_proof_run_on_cuda_needs_steps_under_the_sync_debug_mode(tmp_path: Path) -> None:
    probe = {
        "sync_debug": {"steps_under_error_mode": 0},
        "peak_memory_gib": {"train": {"allocated_gib": 9.5, "reserved_gib": 11.0}},
        "compile": {"frames_compiled": 2, "recompiles": 1},
        "recompile_reasons": ["GLOBAL_STATE changed: grad_mode"],
    }
    _write(tmp_path / "gpu_probe.json", probe)
    _write(tmp_path / ".SUCCESS", "ok")
    assert check_proof_run(0, tmp_path, cuda=False)[0]
    assert not check_proof_run(0, tmp_path, cuda=True)[0]  # the window never opened: nothing proven
    probe["sync_debug"]["steps_under_error_mode"] = 38
    _write(tmp_path / "gpu_probe.json", probe)
    passed, details = check_proof_run(0, tmp_path, cuda=True)
    assert passed and details["peak_memory_gib"]["train"]["allocated_gib"] == 9.5


def test_nan_loss_must_not_end_as_a_cuda_fault(tmp_path: Path) -> None:
    _write(tmp_path / "crash" / "nonfinite.json", {"first_bad": [{"step": 3, "what": "loss"}]})
    state = {"exception_type": "ocr.lightning_modules.callbacks.nonfinite_guard.NonFiniteLossError"}
    _write(tmp_path / "crash" / "state.json", {**state, "cuda_fault": False})
    assert check_nan_loss(1, tmp_path, inject_step=3)[0]
    assert not check_nan_loss(1, tmp_path, inject_step=2)[0]
    _write(tmp_path / "crash" / "state.json", {**state, "cuda_fault": True})
    assert not check_nan_loss(1, tmp_path, inject_step=3)[0]


def test_bad_index_on_cuda_is_a_cuda_fault_with_the_batch_saved(tmp_path: Path) -> None:
    _write(
        tmp_path / "crash" / "state.json", {"exception_type": "torch.AcceleratorError", "cuda_fault": True}
    )
    assert not check_bad_index(1, tmp_path, cuda=True)[0]  # no batch.pt
    _write(tmp_path / "crash" / "batch.pt", "x")
    assert check_bad_index(1, tmp_path, cuda=True)[0]
    assert not check_bad_index(1, tmp_path, cuda=False)[0]  # the CPU raises IndexError instead


def test_summary_lists_every_step_and_the_failures(tmp_path: Path) -> None:
    _write(
        tmp_path / "metrics.json",
        {"metrics": {"test/hmean": 0.97, "test/precision": 0.98, "test/recall": 0.96}},
    )
    passed, details = check_test(0, tmp_path)
    assert passed and details == {"hmean": 0.97, "precision": 0.98, "recall": 0.96}
    step = {
        "title": "t",
        "status": "fail",
        "seconds": 3.0,
        "command": "c",
        "exit_code": 1,
        "log": "out/logs/t.log",
        "details": details,
    }
    report = {
        "started": "s",
        "mode": "gpu",
        "verdict": "fail",
        "machine": "m",
        "command": "c",
        "minutes": 18.5,
        "budget_minutes": 19.0,
        "steps": [step],
    }
    text = markdown_summary(report)
    row = "| t | fail | 1 | 3 | hmean: 0.97; precision: 0.98; recall: 0.96 | `out/logs/t.log` |"
    assert row in text and "## t" in text and "Time: 18.5 min of a 19-minute budget" in text


def _benchmark_report(path: Path, pipeline: float, skipped: str | None = None) -> Path:
    rows = [{"variant": "fp32", "skipped": None, "ceiling_img_s": 150.0, "pipeline_img_s": pipeline}]
    rows[0]["ratio"] = pipeline / 150.0
    rows.append({"variant": "compile", "skipped": skipped, "ceiling_img_s": 657.0, "pipeline_img_s": 600.0})
    rows[1]["ratio"] = 600.0 / 657.0
    _write(path, {"goal_ratio": 0.95, "variants": rows})
    return path


def test_benchmark_verdict_needs_every_variant_on_cuda_and_reports_the_goal(tmp_path: Path) -> None:
    report = _benchmark_report(tmp_path / "b.json", pipeline=148.0)
    passed, details = check_benchmark(0, report, cuda=True)
    assert passed and details["fp32"] == "ceiling 150.0 img/s, pipeline 148.0 img/s, ratio 0.99"
    assert details["goal"] == "ratio >= 0.95: not met by ['compile']"  # reported, not a failure
    assert not check_benchmark(1, report, cuda=True)[0]
    skipped = _benchmark_report(tmp_path / "s.json", pipeline=148.0, skipped="no compiler")
    assert not check_benchmark(0, skipped, cuda=True)[0]  # on a GPU every variant must be measured
    passed, details = check_benchmark(0, skipped, cuda=False)
    assert passed and details["compile"] == "skipped: no compiler" and details["goal"].endswith("met")
    assert not check_benchmark(0, _benchmark_report(tmp_path / "z.json", pipeline=0.0), cuda=False)[0]
    passed, details = check_benchmark(0, tmp_path / "missing.json", cuda=False)
    assert not passed and "no benchmark report" in details["problem"]
