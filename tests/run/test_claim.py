"""A run's start: the folder is claimed once, refusals write nothing into it (nor Hydra's files); one owner
per folder, for every runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from ocr.checkpoints.resume import START_AGAIN, ResumeRefusedError, find_checkpoint
from ocr.run.folder import (
    LOCK_NAME,
    RunClaim,
    RunFolderBusyError,
    claim_run,
    read_run_id,
    run_config,
    write_run_record,
)
from ocr.utils.errors import RunRefusedError
from tests.helpers.paths import REPO_ROOT
from tests.run.test_folder import HOLD, _listing


def _cfg(run: Path, **changes: object) -> DictConfig:
    cfg = OmegaConf.create(
        {"paths": {"output_dir": str(run)}, "resume": None, "ckpt_path": None, "run_id": None, **changes}
    )
    OmegaConf.set_struct(cfg, True)
    return cfg


def _claim(cfg: DictConfig) -> RunClaim:
    return claim_run(cfg, training=True, check=lambda config: None)


def _train_cli(*overrides: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}
    command = [sys.executable, "runners/train.py", *overrides]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_a_new_run_claims_its_folder_once_and_gives_it_up(tmp_path: Path) -> None:
    run = tmp_path / "run"
    checked: list[DictConfig] = []
    claim = claim_run(_cfg(run), training=True, check=checked.append)
    assert len(checked) == 1
    assert read_run_id(run) == claim.run_id and run_config(_cfg(run), claim).run_id == claim.run_id
    assert json.loads((run / LOCK_NAME).read_text())["pid"] == os.getpid()
    claim.release()
    assert not (run / LOCK_NAME).exists()


def test_a_refused_config_check_writes_nothing(tmp_path: Path) -> None:
    def refuse(config: DictConfig) -> None:
        raise ValueError("data.batch_size: expected >= 1, got 0")

    with pytest.raises(ValueError, match="data.batch_size"):
        claim_run(_cfg(tmp_path / "run"), training=True, check=refuse)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("left", "named"),
    [
        ("config.yaml", "a run (config.yaml)"),
        ("metrics.json", "a run (metrics.json)"),
        ("checkpoints/last.ckpt", "a run (checkpoints/*.ckpt)"),
        ("run.json", "run a1b2c3 (run.json)"),
    ],
)
def test_a_new_run_never_writes_into_another_runs_folder(tmp_path: Path, left: str, named: str) -> None:
    (tmp_path / left).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / left).write_text(json.dumps({"run_id": "a1b2c3"}))
    before = _listing(tmp_path)
    with pytest.raises(RunRefusedError) as refused:
        _claim(_cfg(tmp_path))
    assert f"holds {named}: a new run never writes into another run's folder" in str(refused.value)
    if left.endswith(".ckpt"):
        assert f"resume={tmp_path}" in str(refused.value)
    else:  # killed before its first checkpoint: the resume would refuse too; both say the same way out
        assert "has no checkpoint to resume" in str(refused.value)
        assert START_AGAIN.format(run_dir=tmp_path.resolve()) in str(refused.value)
        with pytest.raises(FileNotFoundError) as resumed:
            find_checkpoint(tmp_path.resolve(), None)
        assert START_AGAIN.format(run_dir=tmp_path.resolve()) in str(resumed.value)
    assert _listing(tmp_path) == before


def test_the_ranks_a_distributed_launch_starts_inherit_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning starts ranks 1.. after rank 0 claimed the folder: they neither lock it nor refuse it."""
    write_run_record(tmp_path, "a1b2c3")
    (tmp_path / LOCK_NAME).write_text(json.dumps({}))  # rank 0's lock, whatever it holds
    monkeypatch.setenv("LOCAL_RANK", "1")
    claim = _claim(_cfg(tmp_path))
    assert claim.lock is None and claim.run_id == "a1b2c3"
    assert (tmp_path / LOCK_NAME).read_text() == "{}"


def test_the_identity_is_not_a_command_line_key(tmp_path: Path) -> None:
    with pytest.raises(RunRefusedError, match="run_id=x: the run's identity is set by the runner"):
        _claim(_cfg(tmp_path, run_id="x"))


@pytest.mark.slow  # the training runner's command line: its start-up
def test_a_second_training_process_in_a_busy_folder_writes_nothing(tmp_path: Path) -> None:
    """Two runs started together with the same hydra.run.dir: the second refuses at start, naming the
    owner, before Hydra writes its .hydra/ record and the log file."""
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    owner = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline() == "held\n"
        before = _listing(run)
        result = _train_cli(f"hydra.run.dir={run}")
    finally:
        owner.kill()
        owner.wait()
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"is in use by pid {owner.pid} on host" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert _listing(run) == before  # no .hydra/, no train.log


@pytest.mark.slow  # the training runner's command line: its start-up
def test_a_resume_of_a_folder_that_does_not_exist_creates_nothing(tmp_path: Path) -> None:
    result = _train_cli(f"resume={tmp_path / 'typo'}")
    assert result.returncode == 1 and f"resume={tmp_path / 'typo'}: no such run directory" in result.stdout
    assert not (tmp_path / "typo").exists()


def _fake_run(run: Path, channels: int) -> Path:
    """A run folder with a checkpoint whose config has a model.decoder.channels (no real weights)."""
    write_run_record(run, "a1b2c3")
    config = {
        "run_id": "a1b2c3",
        "paths": {"output_dir": str(run)},
        "model": {"decoder": {"channels": channels}},
        "trainer": {"max_steps": 4},
    }
    path = run / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save({"state_dict": {}, "ocr_config": config, "global_step": 4, "epoch": 1}, path)
    (run / ".SUCCESS").write_text("fit finished\n")
    return path


@pytest.mark.slow  # the training runner's command line: its start-up
def test_a_resume_that_changes_the_model_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    _fake_run(tmp_path / "run", channels=16)
    before = _listing(tmp_path / "run")
    result = _train_cli(f"resume={tmp_path / 'run'}", "model.decoder.channels=64")
    assert result.returncode == 1
    assert (
        "'model.decoder.channels=64' changes model.decoder.channels (16 in the run's config)" in result.stdout
    )
    assert "size mismatch" not in result.stdout + result.stderr
    assert _listing(tmp_path / "run") == before  # .SUCCESS kept; no .hydra/, train.log, lock


def test_a_busy_folder_refusal_comes_before_the_resume_checks(tmp_path: Path) -> None:
    _fake_run(tmp_path, channels=16)
    (tmp_path / LOCK_NAME).write_text(json.dumps({}))
    with pytest.raises(RunFolderBusyError, match="names no owner"):
        _claim(_cfg(tmp_path, resume=str(tmp_path)))


def test_a_checkpoint_given_as_the_run_folder_is_named_as_a_file(tmp_path: Path) -> None:
    """resume=<run>/checkpoints/last.ckpt used to blame "a run-folder lock that names no owner"."""
    checkpoint = tmp_path / "run" / "checkpoints" / "last.ckpt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    with pytest.raises(ResumeRefusedError) as refused:
        _claim(_cfg(checkpoint, resume=str(checkpoint)))
    message = str(refused.value)
    assert (
        f"resume={checkpoint} is a file; resume takes the run's folder: resume={tmp_path / 'run'}" in message
    )
    assert f"ckpt_path={checkpoint}" in message
    with pytest.raises(RunFolderBusyError, match=f"{checkpoint} is a file, not a run folder"):
        _claim(_cfg(checkpoint))  # hydra.run.dir=<a file>
