"""Experiment loggers; wandb is imported lazily and runs offline without an API key."""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["wandb_logger", "tensorboard_available", "tensorboard_logger"]

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


def tensorboard_available() -> bool:
    """True when TensorBoard (or tensorboardX) is installed."""
    import importlib.util

    return any(importlib.util.find_spec(m) is not None for m in ("tensorboard", "tensorboardX"))


def tensorboard_logger(*, save_dir: str, name: str) -> Any | None:
    """A TensorBoard logger when TensorBoard is installed, else None (skipped by the runner)."""
    if not tensorboard_available():
        log.debug("TensorBoard not installed: skipping its logger")
        return None
    from lightning.pytorch.loggers import TensorBoardLogger

    return TensorBoardLogger(save_dir=save_dir, name=name, version="")
