"""The command lines that reproduce what the page shows with runners/predict.py and runners/test.py."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from ocr.serve.models import CONTROL_KEYS, ServedModel

__all__ = ["reproduce_commands"]


def _model_args(model: ServedModel) -> list[str]:
    if model.key == "onnx_model":
        return ["backend=onnx", f"onnx_model={model.name}"]
    return [f"ckpt={model.name}"]


def _controls(settings: Mapping[str, float]) -> list[str]:
    return [f"postprocess.{k}={float(settings[k]):g}" for k in CONTROL_KEYS if k in settings]


def reproduce_commands(
    model: ServedModel,
    settings: Mapping[str, float],
    image_path: Path,
    split: tuple[str, str, str] | None,
) -> dict[str, str]:
    """``predict`` on the image's folder and, for an image of ``split`` (data choice, root, split name),
    ``test`` on the split, each with the page's post-processing ``settings``."""
    tail = _controls(settings)
    predict = ["uv", "run", "runners/predict.py", *_model_args(model), f"image_dir={image_path.parent}"]
    commands = {"predict": shlex.join([*predict, *tail])}
    if split is not None and model.key != "onnx_model":
        data, root, name = split
        chosen = f"split={name}" if name in ("val", "test") else f"data.test_split={name}"
        test = ["uv", "run", "runners/test.py", f"ckpt={model.name}", f"data={data}", f"data.root={root}"]
        commands["test"] = shlex.join([*test, chosen, *tail])
    return commands
