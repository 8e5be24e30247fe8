"""Evidence and verdicts for ``scripts/gpu_proof.sh``: each reader looks at what one step left behind.

Every ``check_*`` function takes the step's exit status and its run directory and returns ``(passed,
details)``; ``details`` holds the figures the summary reports and, on a failure, what was missing. A check
passes only on positive evidence: a missing file, figure or stage fails it. A step its timeout killed
fails whatever it left (the driver decides that before any check), and on a GPU a skipped step fails the
proof (:func:`verdict`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ocr.debug.sanitizer import EXIT_NOT_FOUND, HOW_TO_GET, summarize_report
from ocr.run.faults import EXIT_CUDA_FAULT, closing_line

__all__ = [
    "StepResult",
    "check_bad_index",
    "check_benchmark",
    "check_doctor",
    "check_nan_loss",
    "check_proof_run",
    "check_sanitizer",
    "check_test",
    "check_train",
    "figures",
    "markdown_summary",
    "verdict",
]

FAULT_EXIT_S = 10.0  # a CUDA fault must end the run within this many seconds
PROBE_STAGES = ("train", "val", "test")

Status = Literal["pass", "fail", "skipped"]


@dataclass
class StepResult:
    """One step of the proof: ``status``, wall time, exit code, where it wrote, its console log, what it
    found."""

    name: str
    title: str
    status: Status
    seconds: float = 0.0
    exit_code: int | None = None
    run_dir: str | None = None
    log: str | None = None
    command: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _first_line(path: Path) -> str | None:
    try:
        return path.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def verdict(steps: list[dict[str, Any]], cuda: bool) -> str:
    """``fail`` when a step failed, or on a GPU when one was skipped (the proof is then incomplete)."""
    failed = any(s["status"] == "fail" or (cuda and s["status"] == "skipped") for s in steps)
    return "fail" if failed else "pass"


def check_doctor(exit_code: int, out: Path, cuda: bool) -> tuple[bool, dict[str, Any]]:
    """The doctor exits 0 unless a check failed; the non-ok rows are reported. On a GPU its ``gpu`` and
    ``smoke_conv`` rows must be there and ok (a doctor that saw no GPU proves nothing about it)."""
    report = _json(out / "doctor.json") or {}
    rows = {c.get("name"): c for c in report.get("checks", [])}
    not_ok = [f"{r['name']}: {r['detail']}" for r in rows.values() if r.get("status") != "ok"]
    details: dict[str, Any] = {"verdict": report.get("verdict"), "not_ok": not_ok}
    needed = ("gpu", "smoke_conv") if cuda else ()
    missing = [name for name in needed if rows.get(name, {}).get("status") != "ok"]
    if missing:
        details["problem"] = f"doctor rows not ok or missing on a GPU: {missing}"
    return exit_code == 0 and bool(report) and not missing, details


def check_sanitizer(exit_code: int, out: Path, expect_errors: bool) -> tuple[bool, dict[str, Any]]:
    """memcheck: 0 errors for the clean run; an error naming a kernel for the injected ``bad_index``."""
    if exit_code == EXIT_NOT_FOUND:
        return False, {"problem": HOW_TO_GET}
    reports = sorted(out.glob("*/sanitizer-*.txt"))
    if not reports:
        return False, {"problem": f"no sanitizer report under {out}"}
    summary = summarize_report(reports[-1].read_text(errors="replace"))
    details = {
        "report": str(reports[-1]),
        "errors": summary.errors,
        "first_error": summary.first_error,
        "kernel": summary.kernel,
    }
    if expect_errors:
        # The fault exit ends the program at once; a report that names the error and its kernel is the
        # evidence, with or without the summary line's count.
        found = summary.errors is None or summary.errors > 0
        return (
            exit_code != 0 and found and summary.first_error is not None and summary.kernel is not None,
            details,
        )
    trained = any(path.name == ".SUCCESS" for path in out.glob("*/.SUCCESS"))
    details["run_succeeded"] = trained
    return exit_code == 0 and summary.errors == 0 and trained, details


def check_proof_run(exit_code: int, run: Path, cuda: bool) -> tuple[bool, dict[str, Any]]:
    """``.SUCCESS``, the probe's report and the test's hmean; on CUDA steady-state steps really ran under
    the sync debug mode, train, val and test each have a peak memory, and the network was compiled."""
    probe = _json(run / "gpu_probe.json")
    metrics = (_json(run / "metrics.json") or {}).get("metrics", {})
    details: dict[str, Any] = {
        "success_sentinel": (run / ".SUCCESS").is_file(),
        "failure": _first_line(run / ".FAILURE"),
        "test_hmean": metrics.get("test/hmean"),
    }
    if probe is None:
        return False, {**details, "problem": "no gpu_probe.json"}
    sync = probe["sync_debug"]
    details.update(
        {
            "steps_under_sync_error_mode": sync["steps_under_error_mode"],
            "peak_memory_gib": probe["peak_memory_gib"],
            "compile": probe["compile"],
            "recompile_reasons": probe["recompile_reasons"],
        }
    )
    missing = [] if details["test_hmean"] is not None else ["test/hmean"]
    if cuda:
        peaks = probe["peak_memory_gib"] or {}
        missing += [f"peak memory of {s}" for s in PROBE_STAGES if not peaks.get(s, {}).get("allocated_gib")]
        missing += [] if sync["steps_under_error_mode"] > 0 else ["steps under the sync debug mode"]
        missing += [] if probe["compile"].get("frames_compiled") else ["a compiled frame (performance=max)"]
    if missing:
        details["problem"] = f"missing: {', '.join(missing)}"
    return exit_code == 0 and details["success_sentinel"] and not missing, details


def check_nan_loss(exit_code: int, run: Path, inject_step: int) -> tuple[bool, dict[str, Any]]:
    """Exit 1 with ``.FAILURE``, ``NonFiniteLossError`` naming the injected step, ``nonfinite.json`` and a
    crash bundle, and no CUDA fault."""
    state = _json(run / "crash" / "state.json") or {}
    record = _json(run / "crash" / "nonfinite.json") or {}
    first = (record.get("first_bad") or [{}])[0]
    details = {
        "exception": state.get("exception_type"),
        "first_bad_step": first.get("step"),
        "detected_at_step": record.get("detected_at_step"),
        "cuda_fault": state.get("cuda_fault"),
    }
    passed = (
        exit_code == 1  # an error, not a CUDA fault's exit nor a success
        and (run / ".FAILURE").is_file()
        and str(state.get("exception_type", "")).endswith("NonFiniteLossError")
        and first.get("step") == inject_step
        and not state.get("cuda_fault")
    )
    return passed, details


def check_bad_index(exit_code: int, run: Path, ended_unix_s: float, log: Path) -> tuple[bool, dict[str, Any]]:
    """The run ended by itself with ``EXIT_CUDA_FAULT`` within ``FAULT_EXIT_S`` of the fault, our closing
    line last on its console, ``.FAILURE`` and a crash bundle with the CPU batch and the fault recorded.

    Args:
        exit_code: the step's exit status.
        run: its run directory.
        ended_unix_s: when the process ended (``time.time()``).
        log: its console log.
    """
    state = _json(run / "crash" / "state.json") or {}
    fault = _json(run / "crash" / "fault.json") or {}
    detected = fault.get("detected_unix_s")
    exit_s = None if detected is None else round(ended_unix_s - float(detected), 1)
    details: dict[str, Any] = {
        "exception": state.get("exception_type"),
        "message": (str(state.get("exception_message", "")).splitlines() or [""])[0][:300],
        "cuda_fault": state.get("cuda_fault"),
        "fault": fault.get("kind"),
        "exit_s_after_fault": exit_s,
        "last_line_ours": _last_line(log).endswith(closing_line(EXIT_CUDA_FAULT)),
        "batch_saved": (run / "crash" / "batch.pt").is_file(),
        "image_ids": state.get("image_ids"),
    }
    passed = (
        exit_code == EXIT_CUDA_FAULT
        and exit_s is not None
        and exit_s <= FAULT_EXIT_S
        and details["last_line_ours"]
        and bool(details["cuda_fault"])
        and details["batch_saved"]
        and (run / ".FAILURE").is_file()
    )
    if not passed:
        details["problem"] = (
            f"expected exit {EXIT_CUDA_FAULT} within {FAULT_EXIT_S:g} s of the fault with our closing line "
            f"last, .FAILURE, crash/state.json (cuda_fault), crash/batch.pt and crash/fault.json; got exit "
            f"{exit_code} {exit_s} s after the fault"
        )
    return passed, details


def check_benchmark(exit_code: int, report_path: Path, cuda: bool) -> tuple[bool, dict[str, Any]]:
    """``scripts/benchmark_gpu.py`` measured a positive ceiling, pipeline and ratio for every variant (on
    the CPU a variant may be skipped, with its reason); whether a ratio meets the goal is reported, not
    judged: it measures the data pipeline, not a fault."""
    report = _json(report_path)
    if report is None:
        return False, {"problem": f"no benchmark report at {report_path}"}
    details: dict[str, Any] = {}
    measured = []
    for row in report["variants"]:
        if row["skipped"]:
            details[row["variant"]] = f"skipped: {row['skipped']}"
            continue
        ok = min(row["ceiling_img_s"], row["pipeline_img_s"], row["ratio"]) > 0
        measured.append(ok)
        details[row["variant"]] = (
            f"ceiling {row['ceiling_img_s']:.1f} img/s, pipeline {row['pipeline_img_s']:.1f} img/s, "
            f"ratio {row['ratio']:.2f}"
        )
    below = [
        r["variant"] for r in report["variants"] if not r["skipped"] and r["ratio"] < report["goal_ratio"]
    ]
    details["goal"] = f"ratio >= {report['goal_ratio']}: " + (f"not met by {below}" if below else "met")
    details["report"] = str(report_path)
    complete = all(measured) and (len(measured) == len(report["variants"]) or not cuda)
    return exit_code == 0 and bool(measured) and complete, details


def check_train(exit_code: int, run: Path) -> tuple[bool, dict[str, Any]]:
    """The training run finished (``.SUCCESS``), validated and kept a best checkpoint."""
    report = _json(run / "metrics.json") or {}
    metrics = report.get("metrics", {})
    details = {
        "kept_checkpoint": report.get("kept_checkpoint"),
        "val_hmean": metrics.get("val/hmean"),
        "failure": _first_line(run / ".FAILURE"),
    }
    validated = details["kept_checkpoint"] and details["val_hmean"] is not None
    return exit_code == 0 and (run / ".SUCCESS").is_file() and bool(validated), details


def check_test(exit_code: int, run: Path) -> tuple[bool, dict[str, Any]]:
    """``runners/test.py`` wrote CLEval hmean, precision and recall."""
    metrics = (_json(run / "metrics.json") or {}).get("metrics", {})
    details = {k.split("/")[-1]: metrics.get(k) for k in ("test/hmean", "test/precision", "test/recall")}
    return exit_code == 0 and None not in details.values(), details


def figures(details: dict[str, Any]) -> str:
    """``details`` on one line (a Markdown table cell: no newline, no ``|``)."""
    shown = []
    for key, value in details.items():
        if value in (None, [], {}, "") or key in ("recompile_reasons", "report", "not_ok"):
            continue
        if isinstance(value, float):
            value = f"{value:.4g}"
        shown.append(f"{key}: {value}")
    return " ".join("; ".join(shown).replace("|", "/").split())


def markdown_summary(report: dict[str, Any]) -> str:
    """The proof as Markdown: machine, one row per step, then the details a reader needs."""
    lines = [
        f"# GPU proof {report['started']} ({report['mode']} mode): {report['verdict'].upper()}",
        "",
        f"Machine: {report['machine']}",
        f"Command: `{report['command']}`",
        f"Time: {report['minutes']:g} min"
        + ("" if report["budget_minutes"] is None else f" of a {report['budget_minutes']:g}-minute budget"),
        "",
    ]
    if report["mode"] == "cpu":
        lines += [
            "No CUDA GPU (or `--cpu`): the sanitizer steps were skipped and the others ran at tiny sizes on "
            "synthetic data. This tests the script; it proves nothing about a GPU.",
            "",
        ]
    lines += [
        "| step | status | exit | time (s) | figures | log |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    for step in report["steps"]:
        code = "" if step["exit_code"] is None else step["exit_code"]
        log = f"`{step['log']}`" if step["log"] else ""
        lines.append(
            f"| {step['title']} | {step['status']} | {code} | {step['seconds']:.0f} "
            f"| {figures(step['details'])} | {log} |"
        )
    for step in report["steps"]:
        extra = {k: step["details"][k] for k in ("recompile_reasons", "not_ok") if step["details"].get(k)}
        if step["status"] == "fail" or extra:
            lines += ["", f"## {step['title']}", "", f"`{step['command']}` (exit {step['exit_code']})"]
            lines += [f"- {key}: {value}" for key, value in {**step["details"], **extra}.items()]
    return "\n".join(lines) + "\n"
