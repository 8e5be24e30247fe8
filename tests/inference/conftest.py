"""A tiny randomly initialised checkpoint and a folder of small images for the export tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from tests.helpers.paths import REPO_ROOT as REPO


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_run: list[str]) -> Path:
    """A run checkpoint of the tiny run's network (96 px letterbox), random weights; the prob head's last
    layer is amplified and biased towards text so post-processing finds polygons to compare."""
    spec = importlib.util.spec_from_file_location(
        "benchmark_predict", REPO / "scripts" / "benchmark_predict.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    tmp = tmp_path_factory.mktemp("tiny_ckpt")
    torch.manual_seed(0)
    path = script.random_checkpoint(tmp / "last.ckpt", [*tiny_run, f"data.root={tmp / 'data'}"])
    checkpoint = torch.load(path, weights_only=False)
    checkpoint["state_dict"]["net.head.prob_head.6.weight"].mul_(30.0)
    checkpoint["state_dict"]["net.head.prob_head.6.bias"].fill_(0.5)
    torch.save(checkpoint, path)
    return path


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
