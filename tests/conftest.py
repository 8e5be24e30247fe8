"""Test-wide settings: offline third-party services and small thread pools."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
from omegaconf import DictConfig

from ocr.run.config import compose_config
from ocr.run.entry import load_runner
from tests.gpu_proof.steps import TINY_CPU_RUN
from tests.helpers.paths import REPO_ROOT

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Every test starts from the same global RNG state, whatever ran before it; set TEST_SEED to another
# integer to check that no test passes only by luck of the draw.
TEST_SEED = int(os.environ.get("TEST_SEED", "0"))
SROIE_ROOT = REPO_ROOT.parent / "shared" / "datasets" / "sroie-compact"


@pytest.fixture(autouse=True)
def _seed_global_rngs() -> None:
    random.seed(TEST_SEED)
    np.random.seed(TEST_SEED)
    torch.manual_seed(TEST_SEED)


@pytest.fixture(scope="session")
def sroie_root() -> Path:
    """The shared SROIE subset; skips the test when it is absent."""
    if not (SROIE_ROOT / "jsons").is_dir():
        pytest.skip(f"real receipts not found at {SROIE_ROOT}")
    return SROIE_ROOT


# Tiny synthetic runs for end-to-end tests (images <= 128 px, no workers, CPU); scripts/gpu_proof.sh --cpu
# runs the same sizes.
TINY_RUN = list(TINY_CPU_RUN)


@pytest.fixture(scope="session")
def tiny_run() -> list[str]:
    """Overrides for a tiny synthetic CPU run (add ``data.root=`` and the trainer budget)."""
    return list(TINY_RUN)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_run: list[str]) -> Path:
    """A tiny random run checkpoint whose map has text (``tests.helpers.tiny_checkpoint``), made once per
    session for the export, inference and web app tests."""
    from tests.helpers.tiny_checkpoint import tiny_checkpoint as make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny_ckpt"), tiny_run)


@pytest.fixture(scope="session")
def runner_module() -> Callable[[str], ModuleType]:
    """``runner_module("train")`` imports ``runners/train.py``."""
    return load_runner


@pytest.fixture(scope="session")
def compose_cfg() -> Callable[[str, list[str], Path], DictConfig]:
    """``compose_cfg(name, overrides, output_dir)`` composes a runner config with that output directory."""
    return compose_config
