"""Checkpoints are loaded weights-only: what a tiny training run writes loads, and a crafted pickle whose
unpickling would run a command runs nothing and is refused in one line naming the file."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ocr.checkpoints.reading import allow_checkpoint_types, load_checkpoint
from ocr.debug.replay import EXIT_UNUSABLE
from ocr.debug.replay import main as replay
from ocr.utils.errors import CheckpointError
from tests.helpers.crafted_pickle import crafted_checkpoint
from tests.helpers.paths import REPO_ROOT

ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}


@pytest.mark.parametrize("bare", [False, True], ids=["torch.save", "bare pickle"])
def test_a_crafted_checkpoint_runs_nothing_and_is_refused_by_name(bare: bool, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = crafted_checkpoint(tmp_path / "evil.ckpt", marker, bare=bare)
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(evil)
    assert not marker.exists()
    message = str(refused.value)
    assert message.startswith(f"ckpt={evil}: ") and "\n" not in message
    assert "not loaded" in message and ("posix.system" in message or bare)
    # The file is what it claims: an unrestricted load runs it (torch.load too, on a bare one).
    pickle.loads(evil.read_bytes()) if bare else torch.load(evil, weights_only=False)
    assert marker.exists()


def test_a_crafted_crash_bundle_batch_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crash = tmp_path / "crash"
    crash.mkdir()
    (crash / "config.yaml").write_text("seed: 0\n")
    (crash / "state.json").write_text(json.dumps({"global_step": 1}))
    marker = tmp_path / "ran"
    crafted_checkpoint(crash / "batch.pt", marker)
    assert replay([str(crash)]) == EXIT_UNUSABLE
    assert not marker.exists()
    assert f"replay: bundle={crash / 'batch.pt'}: refused, not loaded" in capsys.readouterr().err


@pytest.mark.slow  # a subprocess that imports the whole stack: 20 s or more on 2 busy cores
def test_predict_on_a_crafted_checkpoint_runs_nothing_and_says_one_line(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = crafted_checkpoint(tmp_path / "evil.ckpt", marker)
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.full((32, 32, 3), 255, np.uint8)).save(images / "x.png")
    cmd = [
        sys.executable,
        "runners/predict.py",
        f"ckpt={evil}",
        f"image_dir={images}",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    console = result.stdout + result.stderr
    assert result.returncode == 1, console
    assert not marker.exists()
    refusal = [line for line in console.splitlines() if f"ckpt={evil}: refused, not loaded" in line]
    assert len(refusal) == 1 and "posix.system" in refusal[0], console
    assert "Traceback" not in console, console


@pytest.mark.slow  # trains 2 steps in a subprocess: a minute on 2 busy cores
def test_what_a_training_run_saves_loads_weights_only(tmp_path: Path, tiny_run: list[str]) -> None:
    """The run's own test after fit reloads its best checkpoint through Lightning weights-only; each
    checkpoint holds only allowlisted types (Lightning's numpy RNG state among them)."""
    run = tmp_path / "train"
    cmd = [
        sys.executable,
        "runners/train.py",
        *tiny_run,
        f"data.root={tmp_path / 'synthetic'}",
        f"hydra.run.dir={run}",
        "trainer.max_steps=2",
        "logger=csv",
    ]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "test/hmean" in result.stdout
    allow_checkpoint_types()
    checkpoints = sorted((run / "checkpoints").glob("*.ckpt"))
    assert len(checkpoints) == 2, checkpoints
    for path in checkpoints:
        assert torch.serialization.get_unsafe_globals_in_checkpoint(path) == [], path
        checkpoint = load_checkpoint(path)
        assert isinstance(checkpoint["rng_states"]["numpy"][1], np.ndarray)
        assert checkpoint["global_step"] == 2 and checkpoint["state_dict"]
