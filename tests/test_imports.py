"""Importing the package must not import wandb (slow, and it can hang start-up)."""

from __future__ import annotations

import subprocess
import sys

import pytest

MODULES = [
    "ocr.models.dbnet",
    "ocr.lightning_modules.detection_module",
    "ocr.lightning_modules.callbacks.run_status",
    "ocr.data.datamodule",
    "ocr.metrics.cleval.metric",
    "ocr.utils.loggers",
    "ocr.utils.runner",
]


@pytest.fixture(scope="module")
def import_lines() -> list[str]:
    """One fresh interpreter: import the package, report whether wandb came along, then import wandb."""
    code = (
        f"import sys\nfor m in {MODULES!r}: __import__(m)\nprint('wandb' in sys.modules)\n"
        "import wandb\nprint(wandb.__name__)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()


def test_importing_the_package_does_not_import_wandb(import_lines: list[str]) -> None:
    assert import_lines[-2] == "False"


def test_wandb_still_importable_after_timm(import_lines: list[str]) -> None:
    # ocr.models.dbnet (above) imports timm through ocr.models.encoder
    assert import_lines[-1] == "wandb"
