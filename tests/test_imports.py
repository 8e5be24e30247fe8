"""Importing the package must not import wandb (slow, and it can hang start-up)."""

from __future__ import annotations

import subprocess
import sys

MODULES = [
    "ocr.models.dbnet",
    "ocr.lightning_modules.detection_module",
    "ocr.lightning_modules.callbacks.run_status",
    "ocr.data.datamodule",
    "ocr.metrics.metric",
    "ocr.utils.loggers",
    "ocr.utils.runner",
]


def test_importing_the_package_does_not_import_wandb() -> None:
    code = f"import sys\nfor m in {MODULES!r}: __import__(m)\nprint('wandb' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"


def test_wandb_still_importable_after_timm() -> None:
    code = "import ocr.models.encoder, wandb\nprint(wandb.__name__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "wandb"
