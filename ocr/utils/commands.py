"""Command lines that paste: the next commands a training run prints, quoted for the shell and Hydra."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "next_commands",
    "override",
    "resume_command",
    "run_next_commands",
    "run_overrides",
]

RUNNERS = Path(__file__).resolve().parents[2] / "runners"

# Characters Hydra reads in an unquoted value and the shell passes through unchanged.
_PLAIN = re.compile(r"[\w/.:+-]*")


def override(key: str, value: object) -> str:
    """``key=value`` as one shell word that Hydra reads back as the string ``value``."""
    text = str(value)
    if _PLAIN.fullmatch(text):
        return f"{key}={text}"
    quoted = text.replace("\\", "\\\\").replace("'", "\\'")  # in Hydra's single-quoted string
    return shlex.quote(f"{key}='{quoted}'")


def run_overrides(run_dir: Path) -> list[str]:
    """The command-line overrides of the invocation that started the run in ``run_dir`` (the oldest
    ``.hydra/<time>/overrides.yaml``; a resumed run adds later ones), or [] when Hydra kept none."""
    records = sorted(run_dir.glob(".hydra/*/overrides.yaml"))
    return [str(o) for o in yaml.safe_load(records[0].read_text()) or []] if records else []


# Data options test and predict do not take from the run's command line: the checkpoint carries the
# evaluation transform (ocr.checkpoints.inference_settings), and these others only shape training batches.
_NOT_FOR_INFERENCE = ("data.eval_transform", "data.train_transform", "data.targets", "data.batch_size")


def _data_overrides(overrides: Sequence[str]) -> list[str]:
    """The run's overrides that choose the data test and predict read (dataset, splits, loader)."""
    keys = [o.lstrip("+~").partition("=")[0] for o in overrides]
    return [
        o
        for o, k in zip(overrides, keys, strict=True)
        if (k == "data" or k.startswith("data."))
        and not any(k == skip or k.startswith(f"{skip}.") for skip in _NOT_FOR_INFERENCE)
    ]


def next_commands(
    *,
    runners: Path,
    checkpoint: Path,
    run_dir: Path,
    overrides: Sequence[str],
    image_dir: Path | None,
    more_training: str,
) -> str:
    """The commands that test, predict with, export and resume this run, one per line under a comment.
    The checkpoint carries the evaluation transform and post-processing, so of the run's ``overrides`` only
    the data options that choose the images are passed on; ``image_dir`` None prints a placeholder, and
    ``more_training`` extends the run's budget (``trainer.max_steps=400``)."""
    launcher = f"uv run {os.path.relpath(runners)}"
    data = " ".join(shlex.quote(o) for o in _data_overrides(overrides))
    ckpt = override("ckpt", checkpoint)
    images = override("image_dir", image_dir) if image_dir else "image_dir=path/to/images"
    lines = [
        "# score the checkpoint on the test split",
        f"{launcher}/test.py {ckpt} {data}".rstrip(),
        "# predict a folder of images: submission.csv, predictions.json, overlays",
        f"{launcher}/predict.py {ckpt} {images} overlays=true {data}".rstrip(),
        "# export to ONNX (parity-checked against PyTorch on the run's test images)",
        f"{launcher}/export.py {ckpt}",
        f"# train longer in this run's directory, to {more_training}",
        resume_command(run_dir, more_training, runners),
    ]
    return "\n".join(lines)


def resume_command(run_dir: Path, more_training: str = "", runners: Path = RUNNERS) -> str:
    """The command that resumes the run in ``run_dir``, with ``more_training`` (overrides) added."""
    return (
        f"uv run {os.path.relpath(runners)}/train.py {override('resume', run_dir)} {more_training}".rstrip()
    )


def run_next_commands(cfg: Any, run_dir: Path, checkpoint: Path) -> str:
    """:func:`next_commands` for a finished training run of config ``cfg`` (a DictConfig): its test or
    val images, its data overrides, and twice its step (or epoch) budget to train on."""
    images = next((p for s in ("test", "val") if (p := Path(cfg.data.root) / "images" / s).is_dir()), None)
    steps, epochs = cfg.trainer.max_steps, cfg.trainer.max_epochs
    more = f"trainer.max_steps={2 * steps}" if steps > 0 else f"trainer.max_epochs={2 * epochs}"
    return next_commands(
        runners=RUNNERS,
        checkpoint=checkpoint,
        run_dir=run_dir,
        overrides=run_overrides(run_dir),
        image_dir=images and images.resolve(),
        more_training=more,
    )
