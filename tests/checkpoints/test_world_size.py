"""A resume on another number of processes (nodes x devices) is refused, or allowed with a warning that
says what changes; the checkpoint Lightning writes on a SLURM pre-emption is one to resume from."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ocr.checkpoints.resume import ResumeRefusedError, find_checkpoint, resume_run
from ocr.checkpoints.world_size import check_world_size, planned_world_size

TORCHRUN = {"RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0", "LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "8"}


def _cfg(num_nodes: int = 1, devices: int = 2) -> OmegaConf:
    return OmegaConf.create(
        {
            "trainer": {"num_nodes": num_nodes, "devices": devices, "accumulate_grad_batches": 1},
            "data": {"batch_size": 8},
        }
    )


def _save(path: Path, step: int, run: Path, **extra: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {
        "resume": None,
        "ckpt_path": None,
        "resume_allow_data_change": False,
        "resume_allow_world_size_change": False,
        "paths": {"output_dir": str(run)},
        "trainer": {"num_nodes": 2, "devices": 2},
    }
    torch.save({"state_dict": {}, "ocr_config": config, "global_step": step, "epoch": 0, **extra}, path)
    return path


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [*TORCHRUN, "SLURM_NTASKS", "NODE_RANK"]:
        monkeypatch.delenv(key, raising=False)


def test_the_planned_world_size_is_the_launchers_else_the_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert planned_world_size(_cfg(num_nodes=2, devices=3)) == 6
    for key, value in TORCHRUN.items():
        monkeypatch.setenv(key, value)
    assert planned_world_size(_cfg(num_nodes=2, devices=3)) == 8


def test_another_world_size_is_refused_naming_what_changes(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ResumeRefusedError) as refused:
        check_world_size(4, _cfg(), Path("run/last.ckpt"), allow_change=False)
    message = str(refused.value)
    assert "run/last.ckpt was written by a run of 4 processes, this one has 2" in message
    assert "8 x 4 = 32 -> 8 x 2 = 16 images per optimizer step" in message
    assert "the step count, the learning-rate schedule (in steps) and the learning rate stay" in message
    assert message.endswith("or pass resume_allow_world_size_change=true")
    with caplog.at_level(logging.WARNING, logger="ocr.checkpoints.world_size"):
        check_world_size(4, _cfg(), Path("run/last.ckpt"), allow_change=True)
    assert "going on <resume_allow_world_size_change=true>" in caplog.text and "16 images" in caplog.text


def test_the_same_world_size_passes_and_an_old_checkpoint_is_said_to_be_unchecked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="ocr.checkpoints.world_size"):
        check_world_size(2, _cfg(), Path("last.ckpt"), allow_change=False)
        assert not caplog.text
        check_world_size(None, _cfg(), Path("last.ckpt"), allow_change=False)
    assert "records no world size" in caplog.text


def test_the_resume_reads_the_checkpoints_world_size(tmp_path: Path) -> None:
    _save(tmp_path / "checkpoints" / "last.ckpt", 9, tmp_path, world_size=4)
    composed = OmegaConf.create(
        {
            "resume": str(tmp_path),
            "ckpt_path": None,
            "resume_allow_data_change": False,
            "resume_allow_other_run": False,
            "resume_allow_world_size_change": True,
            "paths": {"output_dir": str(tmp_path)},
        }
    )
    resume = resume_run(composed, [], None)
    assert resume.world_size == 4 and resume.config.resume_allow_world_size_change is True


def test_a_pre_emption_checkpoint_newer_than_last_is_picked(tmp_path: Path) -> None:
    """Lightning's SLURM auto-requeue saves hpc_ckpt_<n>.ckpt in the run directory on SIGUSR1."""
    last = _save(tmp_path / "checkpoints" / "last.ckpt", 100, tmp_path)
    Path(f"{last}.json").write_text(json.dumps({"global_step": 100}))
    _save(tmp_path / "hpc_ckpt_1.ckpt", 130, tmp_path)
    assert find_checkpoint(tmp_path, None) == (tmp_path / "hpc_ckpt_1.ckpt", 130)


def test_a_pre_emption_checkpoint_cut_short_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Lightning copies it from the system's temp folder: the job's end can cut the copy."""
    good = _save(tmp_path / "hpc_ckpt_1.ckpt", 130, tmp_path)
    cut = tmp_path / "hpc_ckpt_2.ckpt"
    cut.write_bytes(good.read_bytes()[:200])
    assert find_checkpoint(tmp_path, None) == (good, 130)
    assert f"skipping {cut}, which cannot be read" in caplog.text
