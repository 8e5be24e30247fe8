"""Ranges of config values known when the config is composed, checked before anything heavy runs.

:func:`~ocr.utils.config_types.check_config_types` judges each value against its target's signature, but
it imports every target (torch, Lightning) and runs once the task has started. The rules here need only
the composed config: a value against another value (the training crop against the largest scaled image),
the evaluation pool's settings, the optimizer's signs, the export's input side. The runners apply them
before the task starts (:func:`ocr.utils.cli.report_usage_errors`, and for training the run-start gate,
before Hydra writes into the run folder), so that a value that would hang or kill a run late stops it in
seconds with one line naming the key, the value and the range. Standard library and OmegaConf only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ocr.utils.errors import ConfigValueError

__all__ = ["check_config_values"]

POOL_KINDS = ("process", "thread", "inline")  # ocr.evaluation.pool.KINDS, without importing it
# Optimizer arguments that torch refuses when negative ("Invalid learning rate: -0.001").
NON_NEGATIVE_OPTIMIZER_KEYS = ("lr", "weight_decay", "eps", "momentum", "dampening")
_MISSING = object()


def check_config_values(cfg: DictConfig) -> None:
    """Apply every rule to ``cfg``; a key the config lacks or cannot resolve is left to its reader.

    Raises:
        ConfigValueError: one line per value out of range, each naming the key, the value and the range.
    """
    problems = [problem for rule in RULES for problem in rule(cfg)]
    if problems:
        raise ConfigValueError("; ".join(problems))


def _get(cfg: DictConfig, key: str) -> Any:
    try:
        value = OmegaConf.select(cfg, key, default=_MISSING, throw_on_resolution_failure=True)
    except OmegaConfBaseException:
        return _MISSING
    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _crop_fits_the_scaled_image(cfg: DictConfig) -> list[str]:
    """A crop larger than the largest scaled image is mostly fill, and its size is unbounded: a 5000 px
    crop of 128 px images ran out of memory in its first step instead of failing."""
    crop = _get(cfg, "data.train_transform.crop_size")
    long_side = _get(cfg, "data.train_transform.train_long_side")
    scales = _get(cfg, "data.train_transform.scale_range")
    if not (_number(crop) and _number(long_side) and isinstance(scales, list) and len(scales) == 2):
        return []
    if not all(_number(s) for s in scales) or long_side <= 0 or max(scales) <= 0:
        return []  # the transform's own checks name these
    largest = math.ceil(long_side * max(scales))
    if crop <= largest:
        return []
    return [
        f"data.train_transform.crop_size: expected <= {largest} (the largest scaled training image: "
        f"train_long_side {long_side} x scale_range max {max(scales)}), got {crop} (lower crop_size or raise "
        "data.train_transform.train_long_side)"
    ]


def _pipeline_settings(cfg: DictConfig) -> list[str]:
    problems = []
    kind = _get(cfg, "pipeline.kind")
    if kind is not _MISSING and kind not in POOL_KINDS:
        problems.append(f"pipeline.kind: expected one of {', '.join(POOL_KINDS)}, got {kind!r}")
    workers = _get(cfg, "pipeline.workers")
    if kind != "inline" and _number(workers) and workers < 1:
        problems.append(
            f"pipeline.workers: expected >= 1 (or pipeline.kind=inline, which needs none), got {workers}"
        )
    pending = _get(cfg, "pipeline.max_pending_batches")
    if _number(pending) and pending < 1:
        problems.append(f"pipeline.max_pending_batches: expected >= 1, got {pending}")
    return problems


def _optimizer_signs(cfg: DictConfig) -> list[str]:
    problems = [
        f"optimizer.{key}: expected >= 0, got {value}"
        for key in NON_NEGATIVE_OPTIMIZER_KEYS
        if _number(value := _get(cfg, f"optimizer.{key}")) and value < 0
    ]
    betas = _get(cfg, "optimizer.betas")
    if isinstance(betas, list) and any(not _number(b) or not 0 <= b < 1 for b in betas):
        problems.append(f"optimizer.betas: expected values in [0, 1), got {betas}")
    return problems


def _long_side(cfg: DictConfig) -> list[str]:
    """Export's ``long_side`` has no target to carry its type: ``long_side=abc`` failed in a comparison."""
    value = _get(cfg, "long_side")
    if value is _MISSING or value is None:
        return []
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return [f"long_side: expected null (the checkpoint's) or an int >= 1, got {value!r}"]
    return []


RULES: tuple[Callable[[DictConfig], list[str]], ...] = (
    _crop_fits_the_scaled_image,
    _pipeline_settings,
    _optimizer_signs,
    _long_side,
)
