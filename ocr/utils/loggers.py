"""Experiment loggers and the images sent to them; wandb is imported lazily and runs offline without an API
key."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ocr.utils.visualize import encode_image

__all__ = ["log_images", "tensorboard_logger", "wandb_logger"]

log = logging.getLogger(__name__)


def wandb_logger(
    *, project: str, name: str | None, save_dir: str, tags: list[str] | None, offline: bool | None
) -> Any:
    """A Lightning ``WandbLogger``; offline unless an API key is configured (or ``offline`` says so)."""
    from lightning.pytorch.loggers import WandbLogger  # imports wandb: only when this logger is chosen

    has_key = bool(os.environ.get("WANDB_API_KEY")) or _netrc_has_wandb()
    if offline is None:
        offline = not has_key or os.environ.get("WANDB_MODE") == "offline"
    if offline:
        os.environ.setdefault("WANDB_MODE", "offline")
        log.info("wandb runs offline (no API key or WANDB_MODE=offline); sync later with `wandb sync`")
    os.makedirs(save_dir, exist_ok=True)
    return WandbLogger(project=project, name=name, save_dir=save_dir, tags=tags, offline=offline)


def _netrc_has_wandb() -> bool:
    """True when ~/.netrc holds credentials for wandb (what ``wandb login`` writes)."""
    import netrc

    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def tensorboard_logger(*, save_dir: str, name: str) -> Any:
    """A Lightning ``TensorBoardLogger`` writing into ``save_dir/name``."""
    from lightning.pytorch.loggers import TensorBoardLogger

    return TensorBoardLogger(save_dir=save_dir, name=name, version="")


def log_images(
    loggers: Sequence[Any], images: Mapping[str, tuple[npt.NDArray[np.uint8], str]], step: int
) -> int:
    """Send (H, W, 3) uint8 RGB images by tag, each with its caption, to every logger that takes images:
    TensorBoard (the image summary ``add_image`` writes, as JPEG, ``step`` as global step) and W&B
    (``wandb.Image``, logged with ``trainer/global_step`` as Lightning logs metrics); returns how many
    loggers took them."""
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger  # neither imports wandb
    from tensorboard.compat.proto.summary_pb2 import Summary  # type: ignore[import-untyped]

    took = 0
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            # add_image's summary, as a JPEG from OpenCV: add_image's float copy and PIL's zlib-6 PNG took
            # 3.4 % of a CPU validation (scripts/benchmark_overlays.py). The writer's thread flushes it.
            writer = logger.experiment._get_file_writer()
            for tag, (image, _) in images.items():
                height, width, channels = image.shape
                encoded = encode_image(image, ".jpg", tag)
                picture = Summary.Image(
                    height=height, width=width, colorspace=channels, encoded_image_string=encoded
                )
                writer.add_summary(Summary(value=[Summary.Value(tag=tag, image=picture)]), step)
        elif isinstance(logger, WandbLogger):
            import wandb

            logged = {tag: wandb.Image(image, caption=caption) for tag, (image, caption) in images.items()}
            logger.experiment.log({**logged, "trainer/global_step": step})
        else:
            continue
        took += 1
    return took
