"""Kill -9 a tiny seeded CPU run after its second validation, resume it, compare with an uninterrupted run."""

from __future__ import annotations

import csv
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from omegaconf import DictConfig

from ocr.data.synthetic.generate import generate_dataset
from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.slow  # end to end: real runners on tiny runs, a minute or more on 2 cores

STEPS_PER_EPOCH = 3  # 6 training images, batch 2


def _overrides(tiny_run: list[str], data_root: Path) -> list[str]:
    # One DataLoader worker, started afresh each epoch and seeded from the (checkpointed) torch RNG, so
    # the augmentations after a resume are the uninterrupted run's.
    return [
        *(o for o in tiny_run if not o.startswith("data.num_workers=")),
        "data.num_workers=1",
        f"data.root={data_root}",
        "model.encoder.name=test_resnet",
        "model.decoder.channels=16",
        "trainer.max_epochs=3",
        "trainer.max_steps=-1",
        "trainer.log_every_n_steps=1",
        "test_after_fit=false",
        "logger=csv",
    ]


def _kill_after_step(process: subprocess.Popen, meta: Path, step: int, killed: list[int]) -> None:
    """SIGKILL ``process`` as soon as ``meta`` (last.ckpt's JSON) reports ``step`` or later."""
    while process.poll() is None:
        try:
            saved = json.loads(meta.read_text())["global_step"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            saved = -1
        if saved >= step:
            process.send_signal(signal.SIGKILL)
            killed.append(saved)
            return
        time.sleep(0.01)


def _config(path: Path) -> dict:
    config = yaml.safe_load(path.read_text())
    config.pop("resume")
    config["logger"]["csv"].pop("version")
    return config


def test_resume_after_kill_matches_an_uninterrupted_run(
    tmp_path: Path,
    tiny_run: list[str],
    compose_cfg: Callable[[str, list[str], Path], DictConfig],
    runner_module: Callable[[str], ModuleType],
    caplog: pytest.LogCaptureFixture,
) -> None:
    overrides = _overrides(tiny_run, tmp_path / "data")
    # Generated once here, so the two concurrent runs do not both write it.
    generate_dataset(tmp_path / "data", num_train=6, num_val=3, num_test=3, seed=0, long_side=96)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}
    killed_run = tmp_path / "killed"
    with open(tmp_path / "killed.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, "runners/train.py", *overrides, f"hydra.run.dir={killed_run}"],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        killed: list[int] = []
        watcher = threading.Thread(
            target=_kill_after_step,
            args=(process, killed_run / "checkpoints" / "last.ckpt.json", 2 * STEPS_PER_EPOCH, killed),
        )
        watcher.start()
        # The uninterrupted reference trains in this process meanwhile.
        reference = tmp_path / "reference"
        train = runner_module("train").train
        train(compose_cfg("train", overrides, reference))
        watcher.join(timeout=600)
        process.wait(timeout=60)
    assert killed, (
        "the run finished before its second validation was seen:\n" + (tmp_path / "killed.log").read_text()
    )
    assert process.returncode == -signal.SIGKILL
    start_step = killed[0]
    assert start_step % STEPS_PER_EPOCH == 0 and start_step < 3 * STEPS_PER_EPOCH

    # Resumed in this process too (the command line's resume=<run dir> is tested in test_train_test_predict).
    with caplog.at_level(logging.INFO):  # the resume's summary is the run shell's, once the folder is claimed
        train(compose_cfg("train", [f"resume={killed_run}"], killed_run))
    assert f"Resume: picked {killed_run / 'checkpoints' / 'last.ckpt'}" in caplog.text
    assert f"(epoch {start_step // STEPS_PER_EPOCH - 1}, step {start_step})" in caplog.text
    assert "command-line overrides applied: none" in caplog.text

    with open(killed_run / "csv" / f"resumed-step{start_step}" / "metrics.csv", newline="") as f:
        steps = [int(row["step"]) for row in csv.DictReader(f) if row["train/loss"]]
    assert steps[0] == start_step and steps[-1] == 3 * STEPS_PER_EPOCH - 1  # logged before the step counts
    assert (killed_run / "csv" / "metrics.csv").is_file()  # the killed run's own metrics are kept
    resumed_config = killed_run / f"config.resumed-step{start_step}.yaml"
    assert _config(resumed_config) == _config(killed_run / "config.yaml")

    final = torch.load(killed_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    expected = torch.load(reference / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert final["global_step"] == expected["global_step"] == 3 * STEPS_PER_EPOCH
    assert final["state_dict"].keys() == expected["state_dict"].keys()
    for key, value in expected["state_dict"].items():
        torch.testing.assert_close(final["state_dict"][key], value, rtol=1e-5, atol=1e-6, msg=key)
