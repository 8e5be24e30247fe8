"""A CUDA fault ends the training runner within seconds, with our explanation first and last (CPU).

The real runner runs in a subprocess under ``tests/helpers/dead_context.py``: ``debug=inject
callbacks.inject.kind=cuda_fault`` raises the error of a device-side assert, and from then on Lightning's
teardown raises, a callback's device read blocks, DataLoader worker shutdown blocks and an atexit handler
blocks, as on a dead CUDA context.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ocr.run.faults import EXIT_CUDA_FAULT
from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.slow  # a real runner in a subprocess: a minute on 2 busy cores

START_TIMEOUT_S = 600  # imports, data generation and the first steps on a loaded machine
AFTER_FAULT_S = 30  # a process still alive this long after the fault is a hang
EXCEPTION_LINE = re.compile(r"^[\w.]+(Error|Exception)\b")


def _run(command: list[str], console: Path, fault_time: Path) -> tuple[int | None, float]:
    """Run until the process ends or hangs after the fault; (exit status or None, end time)."""
    env = {**os.environ, "DEAD_CONTEXT_FAULT_TIME": str(fault_time), "PYTHONPATH": str(REPO_ROOT)}
    with console.open("w") as out:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        started = time.monotonic()
        while process.poll() is None:
            hung = fault_time.exists() and time.time() - float(fault_time.read_text()) > AFTER_FAULT_S
            if hung or time.monotonic() - started > START_TIMEOUT_S:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return None, time.time()
            time.sleep(0.1)
        return process.returncode, time.time()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_cuda_fault_ends_the_run_within_seconds_with_our_explanation(
    tmp_path: Path, tiny_run: list[str]
) -> None:
    run, console, fault_time = tmp_path / "run", tmp_path / "console.txt", tmp_path / "fault_time"
    overrides = [
        *tiny_run,
        f"data.root={tmp_path / 'synthetic'}",
        f"hydra.run.dir={run}",
        "logger=csv",
        "data.num_workers=1",  # a DataLoader worker that must not outlive the run
        "trainer.max_steps=6",
        "trainer.max_epochs=-1",
        "trainer.limit_val_batches=0",
        "test_after_fit=false",
        "debug=inject",
        "callbacks.inject.kind=cuda_fault",
    ]
    command = [sys.executable, "-m", "tests.helpers.dead_context", "runners/train.py", *overrides]
    code, ended = _run(command, console, fault_time)
    text = console.read_text()
    assert fault_time.exists(), f"the fault was never injected:\n{text[-4000:]}"
    waited = ended - float(fault_time.read_text())
    assert code == EXIT_CUDA_FAULT and waited < 10, (
        f"exit status {code} {waited:.1f} s after the fault (None: killed, hung)\n{text[-4000:]}"
    )
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [
        line
        for line in lines
        if "[ERROR]" in line or line.startswith("Traceback") or EXCEPTION_LINE.match(line)
    ]
    assert "[ocr.run.guard][ERROR] - CUDA FAULT (device-side assert)" in errors[0]
    assert errors[-1] == lines[-1] and lines[-1].endswith(
        f"[ocr.run.faults][ERROR] - CUDA FAULT: ending the process with exit code {EXIT_CUDA_FAULT}."
    )
    # The traceback shown is the first CUDA error's (raised in the injection), not the teardown's.
    assert "in apply_fault" in text and "dead_teardown" not in text and "HYDRA_FULL_ERROR" not in text
    assert "did not return within" in text  # the blocked callback was cut short by the deadline
    assert "AcceleratorError" in (run / ".FAILURE").read_text()
    crash = run / "crash"
    assert json.loads((crash / "state.json").read_text())["cuda_fault"] is True
    assert (crash / "batch.pt").is_file()
    fault = json.loads((crash / "fault.json").read_text())
    assert fault["stage"] == "train" and fault["global_step"] == 1 and fault["image_ids"]
    assert lines[-1].split(" - ", 1)[1] in (run / "train.log").read_text()  # the log file has it too
    (pids,) = re.findall(r"killed the child processes: pids \[([\d, ]*)\]", text)
    worker_pids = [int(pid) for pid in pids.split(",") if pid.strip()]
    assert worker_pids and not any(_alive(pid) for pid in worker_pids)
