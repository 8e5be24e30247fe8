"""One owner per run folder: the lock file, its stale-lock takeover and the rank rule; the run identity."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from ocr.run.folder import (
    LOCK_NAME,
    LockOwner,
    RunFolderBusyError,
    RunLock,
    is_launching_process,
    read_run_id,
    write_run_record,
)
from tests.helpers.paths import REPO_ROOT

# A process that owns the folder given as its argument until it is killed.
HOLD = (
    "import sys, time; from ocr.run.folder import RunLock; RunLock(sys.argv[1]).acquire(); "
    "print('held', flush=True); time.sleep(600)"
)


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture
def owner_process(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process that owns ``tmp_path / "run"``."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "run")],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "held\n"
    yield process
    process.kill()
    process.wait()


def test_a_second_process_is_refused_naming_the_owner_and_writes_nothing(
    tmp_path: Path, owner_process: subprocess.Popen[str]
) -> None:
    run = tmp_path / "run"
    before = _listing(run)
    with pytest.raises(RunFolderBusyError) as refused:
        RunLock(run).acquire()
    assert f"is in use by pid {owner_process.pid} on host {os.uname().nodename}" in str(refused.value)
    assert "delete" in str(refused.value) and str(run / LOCK_NAME) in str(refused.value)
    assert _listing(run) == before


def test_the_lock_of_a_killed_process_is_taken_over_with_a_warning(
    tmp_path: Path, owner_process: subprocess.Popen[str], caplog: pytest.LogCaptureFixture
) -> None:
    owner_process.send_signal(signal.SIGKILL)
    owner_process.wait()
    lock = RunLock(tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="ocr.run.folder"):
        lock.acquire()
    assert f"taking over the lock of pid {owner_process.pid}" in caplog.text
    assert f"process {owner_process.pid} is not running" in caplog.text
    assert json.loads((tmp_path / "run" / LOCK_NAME).read_text())["pid"] == os.getpid()
    lock.release()


def test_the_owner_takes_its_lock_again_and_removes_it_at_release(tmp_path: Path) -> None:
    lock = RunLock(tmp_path / "new" / "run")
    lock.acquire()
    lock.acquire()  # the Hydra callback and then the task, in one process
    assert json.loads((tmp_path / "new" / "run" / LOCK_NAME).read_text())["pid"] == os.getpid()
    lock.release()
    assert not (tmp_path / "new" / "run" / LOCK_NAME).exists()


def _write_lock(run: Path, owner: LockOwner) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / LOCK_NAME).write_text(json.dumps(asdict(owner)))


def test_a_pid_that_now_belongs_to_another_process_is_stale(tmp_path: Path) -> None:
    me = LockOwner.this_process()
    _write_lock(tmp_path, replace(me, process_start="1"))  # this pid, started at another time
    RunLock(tmp_path).acquire()


@pytest.mark.parametrize(("restart", "taken"), [(1, True), (0, False)])
def test_a_requeued_slurm_job_takes_over_its_own_lock_from_another_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restart: int, taken: bool
) -> None:
    """SLURM requeues a pre-empted job, maybe on another node: the earlier run of that job has ended."""
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_RESTART_COUNT", str(restart))
    earlier = replace(LockOwner.this_process(), host="node-a", slurm_restart=0)
    _write_lock(tmp_path, earlier)
    if taken:
        RunLock(tmp_path).acquire()
    else:  # the same run of the job on another node: may be alive
        with pytest.raises(RunFolderBusyError, match="on host node-a .*SLURM job 4242"):
            RunLock(tmp_path).acquire()


def test_a_live_process_on_another_host_is_never_taken_over(tmp_path: Path) -> None:
    _write_lock(tmp_path, replace(LockOwner.this_process(), host="elsewhere", pid=1))
    with pytest.raises(RunFolderBusyError, match="in use by pid 1 on host elsewhere"):
        RunLock(tmp_path).refuse_if_busy()


def test_a_lock_that_names_no_owner_is_refused(tmp_path: Path) -> None:
    (tmp_path / LOCK_NAME).write_text("{not json")
    with pytest.raises(RunFolderBusyError, match="names no owner"):
        RunLock(tmp_path).acquire()


@pytest.mark.parametrize(
    ("env", "launching"),
    [
        ({}, True),
        ({"LOCAL_RANK": "1"}, False),
        ({"SLURM_PROCID": "0", "LOCAL_RANK": "0"}, True),
        ({"RANK": "3"}, False),
    ],
)
def test_only_the_launching_process_of_a_distributed_run_owns_the_folder(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], launching: bool
) -> None:
    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert is_launching_process() is launching


def test_the_run_record_holds_the_identity(tmp_path: Path) -> None:
    assert read_run_id(tmp_path) is None
    run_id = "a1b2c3d4e5f6"
    write_run_record(tmp_path, run_id)
    assert read_run_id(tmp_path) == run_id
    (tmp_path / "run.json").write_text("[]")
    with pytest.raises(ValueError, match="run.json: expected a run record"):
        read_run_id(tmp_path)
