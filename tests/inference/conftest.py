"""A tiny randomly initialised checkpoint and a folder of small images for the export tests."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.helpers.tiny_checkpoint import tiny_checkpoint as make_tiny_checkpoint


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_run: list[str]) -> Path:
    """A tiny random run checkpoint (:func:`tests.helpers.tiny_checkpoint.tiny_checkpoint`)."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny_ckpt"), tiny_run)


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
