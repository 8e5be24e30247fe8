"""A served tiny checkpoint: the app of runners/serve.py in-process, for FastAPI's TestClient."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig

from tests.helpers.tiny_checkpoint import tiny_checkpoint as make_tiny_checkpoint


@pytest.fixture(scope="session")
def serve_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_run: list[str]) -> Path:
    """A tiny random checkpoint whose probability map has polygons (tests/helpers/tiny_checkpoint.py)."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("serve_ckpt"), tiny_run)


@pytest.fixture
def serve_app(
    tmp_path: Path, compose_cfg: Callable[[str, list[str], Path], DictConfig], serve_checkpoint: Path
) -> Callable[..., Any]:
    """``serve_app(*overrides)``: a TestClient of the app on the tiny checkpoint with those overrides."""
    from fastapi.testclient import TestClient

    from ocr.serve.server import build_app

    def make(*overrides: str) -> TestClient:
        cfg = compose_cfg("serve", [f"ckpt={serve_checkpoint}", *overrides], tmp_path / "run")
        return TestClient(build_app(cfg, tmp_path / "uploads", "receipts"))

    return make
