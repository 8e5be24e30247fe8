"""Test-wide settings: offline third-party services and small thread pools."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
SROIE_ROOT = REPO_ROOT.parent / "shared" / "datasets" / "sroie-compact"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The project root."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def sroie_root() -> Path:
    """The shared SROIE subset; skips the test when it is absent."""
    if not (SROIE_ROOT / "jsons").is_dir():
        pytest.skip(f"real receipts not found at {SROIE_ROOT}")
    return SROIE_ROOT
