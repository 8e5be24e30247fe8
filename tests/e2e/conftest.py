"""The tiny trained run the end-to-end tests share (trained once per session)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT


@pytest.fixture(scope="session")
def trained_run_output(
    tmp_path_factory: pytest.TempPathFactory, tiny_run: list[str]
) -> tuple[Path, Path, str]:
    """(run directory, synthetic data root, stdout) of a 3-step training run on the tiny synthetic set,
    its stdout redirected (not a terminal) and a progress line after every step."""
    tmp = tmp_path_factory.mktemp("e2e")
    data_root = tmp / "synthetic"
    run = tmp / "train"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}
    cmd = [
        sys.executable,
        "runners/train.py",
        *tiny_run,
        f"data.root={data_root}",
        f"hydra.run.dir={run}",
        "trainer.max_steps=3",
        "trainer.max_epochs=3",
        "trainer.log_every_n_steps=1",
        "logger=csv",
        "callbacks.progress_bar.every_n_seconds=0",
    ]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert f"Run directory: {run}" in result.stdout
    return run, data_root, result.stdout


@pytest.fixture(scope="session")
def trained_run(trained_run_output: tuple[Path, Path, str]) -> tuple[Path, Path]:
    """(run directory, synthetic data root) of the shared tiny training run."""
    return trained_run_output[:2]
