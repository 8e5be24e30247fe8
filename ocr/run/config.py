"""The one config check, and config composition outside a Hydra run.

:func:`check_config` runs once per run, in the entry decorator, before anything is written or loaded:
first the rules that relate values of the composed config (literal values before interpolations, whose
``${hw.pick:...}`` imports torch), then every value bound for a ``_target_`` argument against its
annotation (``ocr.utils.config_types``). A value is checked here or in its constructor, not in both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from ocr.utils.config_types import check_config_types
from ocr.utils.errors import ConfigValueError

__all__ = ["CONFIG_DIR", "check_config", "compose_config"]

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
POOL_KINDS = ("process", "thread", "inline")  # ocr.evaluation.pool.KINDS, without importing it
# Optimizer arguments that torch refuses when negative ("Invalid learning rate: -0.001").
NON_NEGATIVE_OPTIMIZER_KEYS = ("lr", "weight_decay", "eps", "momentum", "dampening")
_MISSING = object()


def _check_values(cfg: DictConfig) -> None:
    """Apply every rule to ``cfg`` (ConfigValueError lists each value out of range); a key the config
    lacks or cannot resolve is left to its reader."""
    # Values given literally first: resolving a preset's ${hw.pick:...} imports torch to look for a GPU,
    # seconds that a refusal of a value typed on the command line need not wait for.
    for literal_only in (True, False):
        problems = [problem for rule in RULES for problem in rule(_Reader(cfg, literal_only))]
        if problems:
            raise ConfigValueError("; ".join(problems))


class _Reader:
    """Reads full keys of a config; ``literal_only`` leaves out values that are interpolations."""

    def __init__(self, cfg: DictConfig, literal_only: bool) -> None:
        self.cfg, self.literal_only = cfg, literal_only

    def __call__(self, key: str) -> Any:
        parent_key, _, leaf = key.rpartition(".")
        try:
            parent = OmegaConf.select(self.cfg, parent_key) if parent_key else self.cfg
            # ``leaf in parent`` would resolve an interpolation (to tell a missing value); keys() does not.
            if not isinstance(parent, DictConfig) or leaf not in parent.keys():
                return _MISSING
            if self.literal_only and OmegaConf.is_interpolation(parent, leaf):
                return _MISSING
            value = parent[leaf]
        except OmegaConfBaseException:
            return _MISSING
        if isinstance(value, DictConfig | ListConfig):
            try:
                return OmegaConf.to_container(value, resolve=not self.literal_only)
            except OmegaConfBaseException:
                return _MISSING
        return value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _crop_fits_the_scaled_image(get: _Reader) -> list[str]:
    """A crop larger than the largest scaled image is mostly fill, and its size is unbounded: a 5000 px
    crop of 128 px images ran out of memory in its first step instead of failing."""
    crop = get("data.train_transform.crop_size")
    long_side = get("data.train_transform.train_long_side")
    scales = get("data.train_transform.scale_range")
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


def _pipeline_settings(get: _Reader) -> list[str]:
    problems = []
    kind = get("pipeline.kind")
    if kind is not _MISSING and kind not in POOL_KINDS:
        problems.append(f"pipeline.kind: expected one of {', '.join(POOL_KINDS)}, got {kind!r}")
    workers = get("pipeline.workers")
    if kind != "inline" and _number(workers) and workers < 1:
        problems.append(
            f"pipeline.workers: expected >= 1 (or pipeline.kind=inline, which needs none), got {workers}"
        )
    pending = get("pipeline.max_pending_batches")
    if _number(pending) and pending < 1:
        problems.append(f"pipeline.max_pending_batches: expected >= 1, got {pending}")
    return problems


def _optimizer_signs(get: _Reader) -> list[str]:
    problems = [
        f"optimizer.{key}: expected >= 0, got {value}"
        for key in NON_NEGATIVE_OPTIMIZER_KEYS
        if _number(value := get(f"optimizer.{key}")) and value < 0
    ]
    betas = get("optimizer.betas")
    if isinstance(betas, list) and any(not _number(b) or not 0 <= b < 1 for b in betas):
        problems.append(f"optimizer.betas: expected values in [0, 1), got {betas}")
    return problems


def _long_side(get: _Reader) -> list[str]:
    """Export's ``long_side`` has no target to carry its type: ``long_side=abc`` failed in a comparison."""
    value = get("long_side")
    if value is _MISSING or value is None:
        return []
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return [f"long_side: expected null (the checkpoint's) or an int >= 1, got {value!r}"]
    return []


RULES: tuple[Callable[[_Reader], list[str]], ...] = (
    _crop_fits_the_scaled_image,
    _pipeline_settings,
    _optimizer_signs,
    _long_side,
)


def compose_config(name: str, overrides: Sequence[str] = (), output_dir: Path | None = None) -> DictConfig:
    """Compose ``configs/<name>.yaml`` with ``overrides`` outside a Hydra run, as the runners see it;
    ``paths.output_dir`` is ``output_dir`` when given."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ocr.machine.hardware import register_resolvers

    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name=name, overrides=list(overrides))
    if output_dir is not None:
        with open_dict(cfg):
            cfg.paths.output_dir = str(output_dir)
    if "command_line" in cfg:  # what Hydra's overrides.task would hold: these overrides were given
        cfg.command_line = list(overrides)
    return cfg


def check_config(cfg: DictConfig) -> None:
    """Apply the value rules, then check every value bound for a ``_target_`` argument against its
    annotation (ConfigValueTypeError) and every key against the target's parameters (ConfigValueError)."""
    _check_values(cfg)
    check_config_types(cfg)
