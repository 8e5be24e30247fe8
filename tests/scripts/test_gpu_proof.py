"""scripts/gpu_proof.sh in its CPU mode: the sanitizer steps are skipped with a reason, an injected NaN is
caught by the non-finite guard, benchmark_gpu.py measures its tiny ceiling and pipeline, and proof.json /
summary.md are written. (The full CPU run of every step takes many minutes; this runs the steps that need no
training beyond short runs.) The time budget is checked in-process: with none left, no step runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ocr.debug import gpu_proof
from tests.helpers.paths import REPO_ROOT


@pytest.mark.slow  # over 20 s on 2 busy cores
def test_cpu_mode_writes_the_proof(tmp_path: Path) -> None:
    steps = "sanitizer_memcheck,sanitizer_bad_index,nan_loss,benchmark"
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(
        [
            "bash",
            str(REPO_ROOT / "scripts" / "gpu_proof.sh"),
            "--cpu",
            "--steps",
            steps,
            "--out",
            str(tmp_path),
        ],
        cwd=tmp_path,  # the script finds the repository itself
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (out,) = tmp_path.glob("*/proof.json")
    report = json.loads(out.read_text())
    assert report["mode"] == "cpu" and report["verdict"] == "pass" and report["budget_minutes"] is None
    statuses = {step["name"]: step["status"] for step in report["steps"]}
    assert statuses == {
        "sanitizer_memcheck": "skipped",
        "sanitizer_bad_index": "skipped",
        "nan_loss": "pass",
        "benchmark": "pass",
    }
    assert "needs a CUDA GPU" in report["steps"][0]["details"]["skipped"]
    nan = report["steps"][2]
    assert (
        nan["details"]["exception"].endswith("NonFiniteLossError") and nan["details"]["first_bad_step"] == 1
    )
    assert nan["details"]["cuda_fault"] is False
    assert nan["exit_code"] != 0 and "NonFiniteLossError" in Path(nan["log"]).read_text()
    bench = report["steps"][3]
    assert bench["exit_code"] == 0 and "| variant | ceiling img/s |" in Path(bench["log"]).read_text()
    assert bench["details"]["fp32"].startswith("ceiling ") and "CUDA only" in bench["details"]["compile"]
    summary = (out.parent / "summary.md").read_text()
    assert "+debug.inject=nan_loss | pass |" in summary and "SKIPPED" in result.stdout
    assert "| benchmark_gpu.py: ceiling vs pipeline (tiny, CPU) | pass | 0 |" in summary


def test_a_spent_budget_fails_the_steps_it_leaves_out(tmp_path: Path) -> None:
    # --cpu: no torch import in this process; a zero budget runs no step, so this takes no time.
    code = gpu_proof.main(
        ["--cpu", "--steps", "doctor,train_fp32", "--budget-minutes", "0", "--out", str(tmp_path)]
    )
    assert code == 1
    (out,) = tmp_path.glob("*/proof.json")
    report = json.loads(out.read_text())
    assert report["verdict"] == "fail" and report["budget_minutes"] == 0 and report["finished"]
    problems = {step["name"]: (step["status"], step["details"].get("problem")) for step in report["steps"]}
    assert problems["doctor"][0] == "fail" and "left of the --budget-minutes budget" in problems["doctor"][1]
    assert problems["train_fp32"][0] == "fail"
    assert not (out.parent / "logs").exists()  # nothing was started
    summary = (out.parent / "summary.md").read_text()
    assert "(tiny, CPU) | fail |" in summary and "it proves nothing about a GPU" in summary


def test_a_training_budget_over_ten_minutes_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        gpu_proof.main(["--cpu", "--train-minutes", "12"])
    assert exit_info.value.code == 2
    assert "--train-minutes: expected 1 to 10 minutes, got 12" in capsys.readouterr().err
