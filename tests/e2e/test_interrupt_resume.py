"""Ctrl-C and a pre-emption (SIGTERM) of a real training run: last.ckpt at the current step, the run marked
interrupted with the resume command printed, and that command (run after the SIGTERM) finishing the run."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ocr.data.synthetic.generate import generate_dataset
from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.slow  # end to end: real runners on tiny runs, a minute or more on 2 cores

ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("interrupt") / "data"
    generate_dataset(root, num_train=6, num_val=3, num_test=3, seed=0, long_side=96)
    return root


@pytest.mark.parametrize(
    ("signum", "cause", "exit_code"), [(signal.SIGINT, "Ctrl-C", 130), (signal.SIGTERM, "SIGTERM", 143)]
)
def test_a_signal_mid_training_keeps_the_work_and_prints_the_resume_command(
    tmp_path: Path, tiny_run: list[str], data_root: Path, signum: int, cause: str, exit_code: int
) -> None:
    run = tmp_path / "run"
    command = [
        sys.executable,
        "runners/train.py",
        *tiny_run,
        f"data.root={data_root}",
        f"hydra.run.dir={run}",
        "model.encoder.name=test_resnet",
        "model.decoder.channels=16",
        "trainer.max_steps=12",
        "trainer.max_epochs=4",
        "test_after_fit=false",
        "time_budget_minutes=null",
        "callbacks.progress_bar.every_n_seconds=0",  # a line after every step
    ]
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # As from a terminal: a test run started in the background would pass SIGINT on ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert process.stdout is not None
    output = []
    for line in process.stdout:  # validated after step 3 (3 steps per epoch); signalled after step 4
        output.append(line)
        if "step 4/12" in line:
            process.send_signal(signum)
    printed = "".join(output)
    assert process.wait(timeout=600) == exit_code, printed[-5000:]

    status = (run / ".INTERRUPTED").read_text()
    step = json.loads((run / "checkpoints" / "last.ckpt.json").read_text())["global_step"]
    assert 4 <= step < 12 and f"interrupted by {cause} at step {step}" in status  # not the validation's 3
    assert (
        not (run / ".FAILURE").exists() and not (run / ".SUCCESS").exists() and not (run / ".lock").exists()
    )
    assert "Run failed" not in printed and not list(run.glob("crash*"))
    resume = f"uv run runners/train.py resume={run}"
    assert f"Resume: {resume}" in printed and f"Resume: {resume}" in status
    if signum == signal.SIGINT:
        return  # the resume takes one path whatever stopped the run: run it once

    if shutil.which("uv") is None:  # the printed command through this interpreter
        resume = resume.replace("uv run", shlex.quote(sys.executable), 1)
    resumed = subprocess.run(
        ["bash", "-c", resume], cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"step {step}) with the run's own config" in (run / "train.log").read_text()
    assert json.loads((run / "checkpoints" / "last.ckpt.json").read_text())["global_step"] == 12
    assert (run / ".SUCCESS").is_file() and not (run / ".INTERRUPTED").exists()
