"""The benchmark scripts under ``scripts/`` as modules, and the small receipt-like images their tests read."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import cv2
import numpy as np

from tests.helpers.paths import REPO_ROOT


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` imported as a module (scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # what dataclasses look their module up in
    spec.loader.exec_module(module)
    return module


def receipt_images(folder: Path, count: int, height: int, width_step: int) -> Path:
    """``folder`` with ``count`` white images ``r<i>.png`` of ``height`` x (60 + ``width_step`` x i) px,
    each with one black text line."""
    folder.mkdir(parents=True)
    for i in range(count):
        image = np.full((height, 60 + width_step * i, 3), 255, np.uint8)
        cv2.rectangle(image, (5, 10), (50, 18), (0, 0, 0), -1)
        cv2.imwrite(str(folder / f"r{i}.png"), image)
    return folder
