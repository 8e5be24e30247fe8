"""A folder of small images for the export tests (the tiny checkpoint is tests/conftest.py's)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest


@pytest.fixture(scope="session")
def small_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three receipt-like images (dark text lines on white, portrait and landscape)."""
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for i, (height, width) in enumerate([(160, 90), (120, 140), (100, 100)]):
        image = np.full((height, width, 3), 255, np.uint8)
        for y in range(10, height - 10, 14):
            x0 = int(rng.integers(4, 20))
            cv2.rectangle(image, (x0, y), (int(rng.integers(x0 + 20, width - 4)), y + 6), (20, 20, 20), -1)
        cv2.imwrite(str(folder / f"img{i}.png"), image)
    return folder
