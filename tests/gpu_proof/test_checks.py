"""GPU proof verdicts on hand-made run directories: the CUDA branches judged on the CPU, and the failing
side of every check (a missing file, figure or stage fails it)."""

from __future__ import annotations

import json
from pathlib import Path

from ocr.debug.sanitizer import EXIT_NOT_FOUND
from ocr.run.faults import EXIT_CUDA_FAULT, closing_line
from tests.gpu_proof.checks import (
    check_bad_index,
    check_benchmark,
    check_doctor,
    check_nan_loss,
    check_proof_run,
    check_sanitizer,
    check_test,
    check_train,
    figures,
    markdown_summary,
    verdict,
)
from tests.helpers.sanitizer_reports import ASSERT  # a memcheck report of PyTorch's index bounds assert


def _write(path: Path, payload: dict | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))


def test_doctor_on_a_gpu_needs_its_gpu_and_smoke_rows_ok(tmp_path: Path) -> None:
    rows = [
        {"name": "gpu", "status": "ok", "detail": "H200"},
        {"name": "smoke_conv", "status": "ok", "detail": ""},
    ]
    _write(tmp_path / "doctor.json", {"verdict": "ok", "checks": rows})
    assert check_doctor(0, tmp_path, cuda=True)[0]
    assert not check_doctor(1, tmp_path, cuda=True)[0]
    rows[0] = {"name": "gpu", "status": "warn", "detail": "no CUDA GPU visible"}
    _write(tmp_path / "doctor.json", {"verdict": "warn", "checks": rows})
    passed, details = check_doctor(0, tmp_path, cuda=True)
    assert not passed and "['gpu']" in details["problem"]
    assert check_doctor(0, tmp_path, cuda=False)[0]  # the CPU variant: a warning is not a failure
    _write(tmp_path / "doctor.json", {"verdict": "ok", "checks": rows[:1]})
    assert not check_doctor(0, tmp_path, cuda=True)[0]  # the smoke convolutions did not run
    assert not check_doctor(0, tmp_path / "none", cuda=False)[0]


def test_sanitizer_verdicts(tmp_path: Path) -> None:
    _write(tmp_path / "clean" / "run" / "sanitizer-memcheck.txt", "========= ERROR SUMMARY: 0 errors\n")
    assert not check_sanitizer(0, tmp_path / "clean", expect_errors=False)[0]  # the run did not finish
    _write(tmp_path / "clean" / "run" / ".SUCCESS", "ok")
    assert check_sanitizer(0, tmp_path / "clean", expect_errors=False)[0]
    assert not check_sanitizer(1, tmp_path / "clean", expect_errors=False)[0]
    _write(tmp_path / "bad" / "run" / "sanitizer-memcheck.txt", ASSERT)
    passed, details = check_sanitizer(1, tmp_path / "bad", expect_errors=True)
    assert passed and details["errors"] == 1 and "indexSelectSmallIndex" in details["kernel"]
    assert not check_sanitizer(0, tmp_path / "bad", expect_errors=True)[0]  # the program did not fail
    assert not check_sanitizer(1, tmp_path / "bad", expect_errors=False)[0]
    # The fault exit may end the program before the summary line: the named error and kernel suffice.
    no_summary = "\n".join(line for line in ASSERT.splitlines() if "ERROR SUMMARY" not in line)
    _write(tmp_path / "cut" / "run" / "sanitizer-memcheck.txt", no_summary)
    assert check_sanitizer(1, tmp_path / "cut", expect_errors=True)[0]
    _write(tmp_path / "nothing" / "run" / "sanitizer-memcheck.txt", "========= ERROR SUMMARY: 0 errors\n")
    assert not check_sanitizer(1, tmp_path / "nothing", expect_errors=True)[0]
    passed, details = check_sanitizer(EXIT_NOT_FOUND, tmp_path / "none", expect_errors=False)
    assert not passed and "compute-sanitizer was not found" in details["problem"]


def _probe(tmp_path: Path, **changes: object) -> None:
    probe = {
        "sync_debug": {"steps_under_error_mode": 38},
        "peak_memory_gib": {
            stage: {"allocated_gib": 9.5, "reserved_gib": 11.0} for stage in ("train", "val", "test")
        },
        "compile": {"frames_compiled": 2, "recompiles": 1},
        "recompile_reasons": ["GLOBAL_STATE changed: grad_mode"],
    }
    _write(tmp_path / "gpu_probe.json", {**probe, **changes})


def test_proof_run_on_cuda_needs_every_part(tmp_path: Path) -> None:
    _write(tmp_path / ".SUCCESS", "ok")
    _write(tmp_path / "metrics.json", {"metrics": {"test/hmean": 0.9}})
    _probe(tmp_path)
    passed, details = check_proof_run(0, tmp_path, cuda=True)
    assert passed and details["peak_memory_gib"]["train"]["allocated_gib"] == 9.5
    assert not check_proof_run(1, tmp_path, cuda=True)[0]
    _probe(tmp_path, sync_debug={"steps_under_error_mode": 0})
    assert check_proof_run(0, tmp_path, cuda=False)[0]
    assert not check_proof_run(0, tmp_path, cuda=True)[0]  # the sync debug window never opened
    _probe(tmp_path, peak_memory_gib={"train": {"allocated_gib": 9.5}, "val": {"allocated_gib": 0.0}})
    passed, details = check_proof_run(0, tmp_path, cuda=True)
    assert (
        not passed
        and "peak memory of val" in details["problem"]
        and "peak memory of test" in details["problem"]
    )
    _probe(tmp_path, compile={"frames_compiled": 0, "recompiles": 0})
    assert not check_proof_run(0, tmp_path, cuda=True)[0]  # performance=max did not compile
    _probe(tmp_path)
    _write(tmp_path / "metrics.json", {"metrics": {}})
    assert not check_proof_run(0, tmp_path, cuda=False)[0]  # the test after fit did not run
    (tmp_path / "gpu_probe.json").unlink()
    assert not check_proof_run(0, tmp_path, cuda=False)[0]


def test_nan_loss_must_be_an_error_at_the_step_not_a_cuda_fault(tmp_path: Path) -> None:
    _write(tmp_path / "crash" / "nonfinite.json", {"first_bad": [{"step": 3, "what": "loss"}]})
    state = {"exception_type": "ocr.utils.errors.NonFiniteLossError"}
    _write(tmp_path / "crash" / "state.json", {**state, "cuda_fault": False})
    assert not check_nan_loss(1, tmp_path, inject_step=3)[0]  # no .FAILURE
    _write(tmp_path / ".FAILURE", "NonFiniteLossError")
    assert check_nan_loss(1, tmp_path, inject_step=3)[0]
    assert not check_nan_loss(1, tmp_path, inject_step=2)[0]
    assert not check_nan_loss(EXIT_CUDA_FAULT, tmp_path, inject_step=3)[0]
    assert not check_nan_loss(0, tmp_path, inject_step=3)[0]
    _write(tmp_path / "crash" / "state.json", {**state, "cuda_fault": True})
    assert not check_nan_loss(1, tmp_path, inject_step=3)[0]


def _fault_run(tmp_path: Path, last_line: str) -> Path:
    _write(
        tmp_path / "crash" / "state.json", {"exception_type": "torch.AcceleratorError", "cuda_fault": True}
    )
    _write(tmp_path / "crash" / "fault.json", {"kind": "device-side assert", "detected_unix_s": 1000.0})
    _write(tmp_path / "crash" / "batch.pt", "x")
    _write(tmp_path / ".FAILURE", "AcceleratorError")
    _write(tmp_path / "console.log", f"[gpu] earlier lines\n[x][ERROR] - {last_line}\n\n")
    return tmp_path / "console.log"


def test_bad_index_passes_only_when_the_run_ended_itself_within_ten_seconds(tmp_path: Path) -> None:
    log = _fault_run(tmp_path, closing_line(EXIT_CUDA_FAULT))
    passed, details = check_bad_index(EXIT_CUDA_FAULT, tmp_path, ended_unix_s=1004.0, log=log)
    assert passed and details["exit_s_after_fault"] == 4.0 and details["last_line_ours"]
    assert not check_bad_index(EXIT_CUDA_FAULT, tmp_path, ended_unix_s=1012.0, log=log)[0]  # too late
    assert not check_bad_index(1, tmp_path, ended_unix_s=1004.0, log=log)[0]  # a traceback's exit, not ours
    assert not check_bad_index(124, tmp_path, ended_unix_s=1004.0, log=log)[0]
    teardown = _fault_run(tmp_path, "torch.AcceleratorError: CUDA error: device-side assert triggered")
    passed, details = check_bad_index(EXIT_CUDA_FAULT, tmp_path, ended_unix_s=1004.0, log=teardown)
    assert not passed and "our closing line last" in details["problem"]
    log = _fault_run(tmp_path, closing_line(EXIT_CUDA_FAULT))
    (tmp_path / "crash" / "batch.pt").unlink()
    assert not check_bad_index(EXIT_CUDA_FAULT, tmp_path, ended_unix_s=1004.0, log=log)[0]
    _fault_run(tmp_path, closing_line(EXIT_CUDA_FAULT))
    (tmp_path / "crash" / "fault.json").unlink()
    assert not check_bad_index(EXIT_CUDA_FAULT, tmp_path, ended_unix_s=1004.0, log=log)[0]


def test_training_and_test_need_their_figures(tmp_path: Path) -> None:
    _write(tmp_path / "metrics.json", {"metrics": {"val/hmean": 0.9}, "kept_checkpoint": "best.ckpt"})
    assert not check_train(0, tmp_path)[0]  # no .SUCCESS
    _write(tmp_path / ".SUCCESS", "ok")
    assert check_train(0, tmp_path)[0]
    assert not check_train(1, tmp_path)[0]
    _write(tmp_path / "metrics.json", {"metrics": {}, "kept_checkpoint": "best.ckpt"})
    assert not check_train(0, tmp_path)[0]  # no validation figure
    _write(tmp_path / "t" / "metrics.json", {"metrics": {"test/hmean": 0.97, "test/precision": 0.98}})
    passed, details = check_test(0, tmp_path / "t")
    assert not passed and details["recall"] is None
    _write(
        tmp_path / "t" / "metrics.json",
        {"metrics": {"test/hmean": 0.97, "test/precision": 0.98, "test/recall": 0.96}},
    )
    assert check_test(0, tmp_path / "t")[0] and not check_test(1, tmp_path / "t")[0]


def test_a_skipped_step_fails_the_proof_on_a_gpu_only() -> None:
    steps = [{"status": "pass"}, {"status": "skipped"}]
    assert verdict(steps, cuda=False) == "pass" and verdict(steps, cuda=True) == "fail"
    assert verdict([{"status": "fail"}], cuda=False) == "fail"


def test_figures_stay_on_one_table_row() -> None:
    assert figures({"message": "CUDA error: x\nCUDA kernel errors | later", "n": 0.12345}) == (
        "message: CUDA error: x CUDA kernel errors / later; n: 0.1235"
    )


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
        "minutes": 8.5,
        "budget_minutes": 9.0,
        "steps": [step],
    }
    text = markdown_summary(report)
    row = "| t | fail | 1 | 3 | hmean: 0.97; precision: 0.98; recall: 0.96 | `out/logs/t.log` |"
    assert row in text and "## t" in text and "Time: 8.5 min of a 9-minute budget" in text


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
