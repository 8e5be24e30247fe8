"""A tiny randomly initialised run checkpoint that post-processing finds polygons in."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.helpers.scripts import load_script


def tiny_checkpoint(directory: Path, tiny_run: list[str]) -> Path:
    """``directory/last.ckpt``: the tiny run's network (96 px letterbox), random weights; the prob head's
    last layer is amplified and biased towards text so post-processing finds polygons."""
    script = load_script("benchmark_predict")
    torch.manual_seed(0)
    path = script.random_checkpoint(directory / "last.ckpt", [*tiny_run, f"data.root={directory / 'data'}"])
    checkpoint = torch.load(path, weights_only=False)
    checkpoint["state_dict"]["net.head.prob_head.6.weight"].mul_(30.0)
    checkpoint["state_dict"]["net.head.prob_head.6.bias"].fill_(0.5)
    torch.save(checkpoint, path)
    return path
