"""runners/test.py and runners/predict.py name a checkpoint file that cannot be used, and what it is."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import cv2
import numpy as np
import pytest
import torch
from omegaconf import DictConfig

from tests.helpers.paths import REPO_ROOT

Compose = Callable[[str, list[str], Path], DictConfig]
Runner = Callable[[str], ModuleType]


def _truncated_checkpoint(path: Path) -> Path:
    torch.save({"state_dict": {"w": torch.zeros(4096)}, "ocr_config": {}}, path)
    path.write_bytes(path.read_bytes()[:2000])
    return path


@pytest.mark.parametrize("kind", ["truncated", "text"])
def test_test_runner_names_a_checkpoint_it_cannot_load(
    kind: str, tmp_path: Path, tiny_run: list[str], compose_cfg: Compose, runner_module: Runner
) -> None:
    ckpt = tmp_path / "last.ckpt"
    if kind == "truncated":
        _truncated_checkpoint(ckpt)
    else:
        ckpt.write_text("epoch=3 step=120\n")
    cfg = compose_cfg("test", [*tiny_run, f"ckpt={ckpt}"], tmp_path / "run")
    expected = {
        "truncated": "a truncated checkpoint: a zip archive of 2000 bytes without its end record",
        "text": "a text file, not a PyTorch checkpoint",
    }
    with pytest.raises(ValueError, match=f"ckpt={ckpt}: {expected[kind]}"):
        runner_module("test").evaluate(cfg)
    assert (tmp_path / "run" / ".FAILURE").is_file()


def test_predict_runner_names_a_state_dict_without_run_config(
    tmp_path: Path, tiny_run: list[str], compose_cfg: Compose, runner_module: Runner
) -> None:
    ckpt = tmp_path / "weights.pt"
    torch.save({"conv.weight": torch.zeros(3)}, ckpt)
    (tmp_path / "images").mkdir()
    cv2.imwrite(str(tmp_path / "images" / "x.png"), np.zeros((8, 8, 3), np.uint8))
    cfg = compose_cfg(
        "predict", [*tiny_run, f"ckpt={ckpt}", f"image_dir={tmp_path / 'images'}"], tmp_path / "run"
    )
    with pytest.raises(
        ValueError, match=f"ckpt={ckpt}: expected a checkpoint written by runners/train.py, got a bare"
    ):
        runner_module("predict").predict(cfg)


@pytest.mark.slow  # over 20 s on 2 busy cores
def test_a_text_file_given_as_ckpt_is_refused_in_one_line(tmp_path: Path) -> None:
    ckpt = tmp_path / "best_hmean0.9312_epoch07.ckpt"
    ckpt.write_text("epoch=3 step=120\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}
    cmd = [sys.executable, "runners/test.py", f"ckpt={ckpt}", f"hydra.run.dir={tmp_path / 'run'}"]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    # Hydra read the override: the runner got as far as opening the file, and names it.
    assert result.returncode == 1
    assert f"ckpt={ckpt}: a text file, not a PyTorch checkpoint" in result.stderr + result.stdout
    # Our own error: its message alone on the console; the traceback in the run's log file only.
    console = result.stdout + result.stderr
    assert "Traceback" not in console and "Error executing job" not in console, console
    assert "Traceback (most recent call last)" in (tmp_path / "run" / "test.log").read_text()
