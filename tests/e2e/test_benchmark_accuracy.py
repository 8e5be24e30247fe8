"""scripts/benchmark_accuracy.py end to end: two seeds of a tiny protocol through the real runners."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.slow  # two tiny fine-tunings and their scoring as processes: minutes on 2 cores


def test_two_seeds_of_a_tiny_protocol_end_to_end(
    trained_run: tuple[Path, Path], tiny_run: list[str], tmp_path: Path
) -> None:
    run, data_root = trained_run
    # The tiny run's sizes (its data.* keys fit data=receipts too), minus the synthetic generator's.
    tiny = [o for o in tiny_run if not o.startswith(("data.synthetic.", "hardware="))]
    command = [
        sys.executable,
        "scripts/benchmark_accuracy.py",
        "--init-from",
        str(run / "checkpoints" / "last.ckpt"),
        "--data-root",
        str(data_root),
        "--seeds",
        "0",
        "1",
        "--steps",
        "2",
        "--label-subset",
        "4",
        "--hardware",
        "cpu",
        "--splits",
        "test",
        "--candidates",
        "kept",
        "raw",
        "--jobs",
        "2",
        "--out",
        str(tmp_path / "bench"),
        "--variant",
        "tiny",
        *[f"--override={o}" for o in [*tiny, "trainer.log_every_n_steps=1"]],
        "--eval-override=data.num_workers=0",
        "--eval-override=data.persistent_workers=false",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = tmp_path / "bench" / "tiny"
    payload = json.loads((out / "results.json").read_text())
    assert [s["seed"] for s in payload["seeds"]] == [0, 1]
    # The recipe keeps last.ckpt, the weight average; "raw" holds that step's trained weights.
    assert {f"{c} test/{m}" for c in ("kept", "raw") for m in ("upstream", "competition")} <= set(
        payload["summary"]
    )
    for key in ("kept test/upstream", "kept test/competition", "raw test/upstream"):
        stats = payload["summary"][key]
        assert stats["n"] == 2 and 0.0 <= stats["mean"] <= 1.0 and stats["se"] is not None, key
    subset = json.loads((out / "data_subset4" / "jsons" / "train.json").read_text())
    assert len(subset["images"]) == 4
    assert "| kept | test | upstream |" in (out / "results.md").read_text()
    # Another invocation takes the seeds' saved figures instead of training again.
    again = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "seed 0: figures from" in again.stdout
