"""The command lines that reproduce what the page shows with runners/predict.py and runners/test.py."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from ocr.serve.models import CONTROL_KEYS, ServedModel

__all__ = ["reproduce_commands"]


def reproduce_commands(
    model: ServedModel,
    settings: Mapping[str, float],
    image_path: Path,
    split: tuple[str, str, str] | None,
) -> dict[str, str]:
    """``predict`` on the image's folder and, for an image of ``split`` (data choice, root, split name),
    ``test`` on the split, each with the page's post-processing ``settings``."""
    tail = [f"postprocess.{k}={float(settings[k]):g}" for k in CONTROL_KEYS if k in settings]
    onnx = model.key == "onnx_model"
    chosen_model = ["backend=onnx", f"onnx_model={model.name}"] if onnx else [f"ckpt={model.name}"]
    predict = ["uv", "run", "runners/predict.py", *chosen_model, f"image_dir={image_path.parent}"]
    commands = {"predict": shlex.join([*predict, *tail])}
    if split is not None and not onnx:
        data, root, name = split
        chosen = f"split={name}" if name in ("val", "test") else f"data.test_split={name}"
        test = ["uv", "run", "runners/test.py", f"ckpt={model.name}", f"data={data}", f"data.root={root}"]
        commands["test"] = shlex.join([*test, chosen, *tail])
    return commands
