"""A served tiny checkpoint: the app of runners/serve.py in-process, for FastAPI's TestClient."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig


@pytest.fixture
def serve_app(
    tmp_path: Path, compose_cfg: Callable[[str, list[str], Path], DictConfig], tiny_checkpoint: Path
) -> Callable[..., Any]:
    """``serve_app(*overrides)``: a TestClient of the app on the tiny checkpoint with those overrides."""
    from fastapi.testclient import TestClient

    from ocr.serve.server import build_app

    def make(*overrides: str) -> TestClient:
        cfg = compose_cfg("serve", [f"ckpt={tiny_checkpoint}", *overrides], tmp_path / "run")
        return TestClient(build_app(cfg, tmp_path / "uploads", "receipts"))

    return make
