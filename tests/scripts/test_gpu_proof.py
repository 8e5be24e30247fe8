"""scripts/gpu_proof.sh in its CPU mode: the sanitizer steps are skipped with a reason, an injected NaN is
caught by the non-finite guard, and proof.json / proof.md are written. (The full CPU run of every step
takes minutes; this runs the steps that need no training beyond one short run.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT


@pytest.mark.slow  # over 20 s on 2 busy cores
def test_cpu_mode_writes_the_proof(tmp_path: Path) -> None:
    steps = "sanitizer_memcheck,sanitizer_bad_index,nan_loss"
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
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (out,) = tmp_path.glob("*/proof.json")
    report = json.loads(out.read_text())
    assert report["mode"] == "cpu" and report["verdict"] == "pass"
    statuses = {step["name"]: step["status"] for step in report["steps"]}
    assert statuses == {"sanitizer_memcheck": "skipped", "sanitizer_bad_index": "skipped", "nan_loss": "pass"}
    assert "needs a CUDA GPU" in report["steps"][0]["details"]["skipped"]
    nan = report["steps"][2]["details"]
    assert nan["exception"].endswith("NonFiniteLossError") and nan["first_bad_step"] == 1
    assert nan["cuda_fault"] is False
    summary = (out.parent / "proof.md").read_text()
    assert "+debug.inject=nan_loss | pass" in summary and "SKIPPED" in result.stdout
