"""Every runner claims its run folder as training does: a second predict in a busy folder is refused."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT


def _hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow  # two predict processes
def test_a_second_predict_in_the_same_folder_is_refused_and_the_first_runs_on_untouched(
    trained_run: tuple[Path, Path], tiny_run: list[str], tmp_path: Path
) -> None:
    run, data_root = trained_run
    out = tmp_path / "predict"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    command = [
        sys.executable,
        "runners/predict.py",
        *tiny_run,
        f"ckpt={run / 'checkpoints' / 'last.ckpt'}",
        f"image_dir={data_root / 'images' / 'test'}",
        f"hydra.run.dir={out}",
    ]
    first = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 300
        while not (out / ".lock").exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (out / ".lock").exists(), "the first predict never claimed its folder"
        os.kill(first.pid, signal.SIGSTOP)  # the first run holds the folder while the second starts
        try:
            before = _hashes(out)
            second = subprocess.run(
                command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
            )
            after = _hashes(out)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        printed, _ = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
    console = second.stdout + second.stderr
    assert second.returncode == 1, console
    assert "Traceback" not in console
    refusals = [line for line in console.splitlines() if "is in use by" in line]
    assert len(refusals) == 1 and f"is in use by pid {first.pid} on host" in refusals[0], console
    assert after == before  # the second wrote nothing: no .hydra/ record, no log line, no output
    assert first.returncode == 0, printed[-3000:]
    assert (out / "submission.csv").is_file() and not (out / ".lock").exists()
    assert len(list(out.glob(".hydra/*/overrides.yaml"))) == 1  # Hydra's record, written once claimed
