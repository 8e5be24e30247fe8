"""Loggers: wandb runs offline without an API key; images go to the loggers that take them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ocr.utils import loggers


@pytest.fixture
def no_wandb_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc from `wandb login`


def test_wandb_is_offline_without_a_key(tmp_path: Path, no_wandb_key: None) -> None:
    logger = loggers.wandb_logger(
        project="p", name="run", save_dir=str(tmp_path / "logs"), tags=["t"], offline=None
    )
    assert logger._offline and (tmp_path / "logs").is_dir()


def test_wandb_key_in_netrc_means_online(tmp_path: Path, no_wandb_key: None) -> None:
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")
    netrc.chmod(0o600)
    assert loggers._netrc_has_wandb()
    logger = loggers.wandb_logger(project="p", name=None, save_dir=str(tmp_path), tags=None, offline=None)
    assert not logger._offline


def test_images_go_only_to_loggers_that_take_them(tmp_path: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    image = {"val_overlays/fixed_0": (np.zeros((8, 16, 3), np.uint8), "a.png")}
    assert loggers.log_images([CSVLogger(tmp_path)], image, step=3) == 0
    tensorboard = loggers.tensorboard_logger(save_dir=str(tmp_path), name="tb")
    assert isinstance(tensorboard, TensorBoardLogger)
    assert loggers.log_images([CSVLogger(tmp_path), tensorboard], image, step=3) == 1
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
