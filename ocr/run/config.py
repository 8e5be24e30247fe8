"""The one config check, and config composition outside a Hydra run.

:func:`check_config` runs once per run, in the entry decorator, before anything is written or loaded.
First the rules that need only the composed config (a value against another: the training crop against
the largest scaled image; the evaluation pool; the optimizer's signs; the export's input side), values
given literally before those behind an interpolation (resolving ``${hw.pick:...}`` imports torch); then
each value bound for a ``_target_`` argument against that argument's annotation (type, and the
:class:`~ocr.utils.config_types.Bounds` it carries) and each key against the target's parameters. A value
is checked here or in its constructor, not in both. Annotations it cannot judge (generic callables,
protocols, type variables, unresolvable names) are left to the constructor.
"""

from __future__ import annotations

import collections.abc
import difflib
import inspect
import math
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from ocr.utils.config_types import RETIRED_KEYS, ConfigValueTypeError, bounds_problem, parameter_hints
from ocr.utils.errors import ConfigValueError

__all__ = ["CONFIG_DIR", "check_config", "compose_config"]

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
POOL_KINDS = ("process", "thread", "inline")  # ocr.evaluation.pool.KINDS, without importing it
# Optimizer arguments that torch refuses when negative ("Invalid learning rate: -0.001").
NON_NEGATIVE_OPTIMIZER_KEYS = ("lr", "weight_decay", "eps", "momentum", "dampening")
_MISSING = object()


def _check_values(cfg: DictConfig) -> None:
    """Apply every rule to ``cfg``; a key the config lacks or cannot resolve is left to its reader.

    Raises:
        ConfigValueError: one line per value out of range, each naming the key, the value and the range.
    """
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
    """Compose ``configs/<name>.yaml`` with ``overrides`` outside a Hydra run, as the runners see it (defaults
    lists applied, hardware resolvers registered, ``command_line`` = ``overrides`` where the config has
    it); ``paths.output_dir`` is ``output_dir`` when given, else the Hydra run directory."""
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
    """Refuse a retired key, then apply the value rules, then check every value bound for a ``_target_``
    argument against that argument's annotation and every key against the target's parameters.

    Raises:
        ConfigValueError: one line per value out of range (all are listed), naming the key, the value and
            the range; a key no target takes; a retired key, naming what replaced it.
        ConfigValueTypeError: values of the wrong type (all are listed).
    """
    retired = [f"{key}: {replaced}" for key, replaced in RETIRED_KEYS.items() if key in cfg]
    if retired:
        raise ConfigValueError(f"config: no longer read, so refused: {'; '.join(retired)}")
    _check_values(cfg)
    unknown = _unknown_arguments(cfg, "")
    if unknown:
        raise ConfigValueError(f"config: {'; '.join(unknown)} (a key added with '+' reaches the constructor)")
    problems = _check_node(cfg, "")
    if not problems:
        return
    listed = "\n  ".join(problems)
    if _all_range(problems):
        raise ConfigValueError(
            f"config: {len(problems)} value(s) out of range (fix them in the YAML or on the command line):"
            f"\n  {listed}"
        )
    raise ConfigValueTypeError(
        f"config: {len(problems)} value(s) of the wrong type{' or out of range' * _any_range(problems)} (fix "
        f"them in the YAML or on the command line):\n  {listed}"
    )


_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_SEQUENCES = (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence)
_SCALARS = {bool: "bool", int: "int", float: "float", str: "str", Path: "path (str)"}
# Keys of a ``_target_`` node that the project reads itself and removes before instantiating the node.
READ_BESIDE_TARGET = frozenset({"model.init_from"})  # ocr.lightning_modules.build


class _OutOfRange(str):
    """A problem message about a value's bounds (the others are about its type)."""


def _any_range(problems: list[str]) -> bool:
    return any(isinstance(p, _OutOfRange) for p in problems)


def _all_range(problems: list[str]) -> bool:
    return all(isinstance(p, _OutOfRange) for p in problems)


def _check_node(node: DictConfig, path: str) -> list[str]:
    hints = _node_hints(node)
    problems = []
    for key in node:
        key = str(key)
        if key.startswith("_") or OmegaConf.is_missing(node, key):
            continue
        full_key = f"{path}.{key}" if path else key
        try:
            value = node[key]
        except OmegaConfBaseException:
            continue  # an unresolvable interpolation: reported by whatever reads it
        if isinstance(value, DictConfig | ListConfig) and OmegaConf.is_interpolation(node, key):
            continue  # checked where it is defined
        if key in hints:
            problems += _check(value, hints[key], full_key)
        elif isinstance(value, DictConfig):
            problems += _check_node(value, full_key)
    return problems


def _unknown_arguments(node: DictConfig, path: str) -> list[str]:
    """Keys of ``_target_`` nodes (at any depth) that their target does not take: a key added with ``+``
    (Hydra's own hint for a misspelled one, ``+trainer.max_step=4``) would fail inside the constructor."""
    parameters = _parameters(node)
    problems = []
    for key in (str(k) for k in node if not str(k).startswith("_")):
        full_key = f"{path}.{key}" if path else key
        if parameters is not None and key not in parameters and full_key not in READ_BESIDE_TARGET:
            close = difflib.get_close_matches(key, list(parameters), n=1)
            hint = f", did you mean {path + '.' if path else ''}{close[0]}?" if close else ""
            problems.append(f"{full_key}: not an argument of {node._target_}{hint}")
            continue
        try:
            value = node[key]
        except OmegaConfBaseException:
            continue
        if isinstance(value, DictConfig) and not OmegaConf.is_interpolation(node, key):
            problems += _unknown_arguments(value, full_key)
    return problems


def _parameters(node: DictConfig) -> set[str] | None:
    """The keyword arguments of the node's ``_target_``; None when any is taken (no target, ``**kwargs``,
    or a target that cannot load: instantiate's error to report)."""
    if "_target_" not in node:
        return None
    try:
        parameters = inspect.signature(get_object(str(node._target_))).parameters
    except Exception:  # noqa: BLE001 - see above
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    return set(parameters)


def _node_hints(node: DictConfig) -> dict[str, Any]:
    """Annotation of each parameter of the node's ``_target_`` (empty when it has none or cannot load)."""
    if "_target_" not in node:
        return {}
    try:
        target = get_object(str(node._target_))
    except Exception:  # noqa: BLE001 - a target that cannot load is instantiate's error to report
        return {}
    return parameter_hints(target)


def _check(value: Any, hint: Any, path: str) -> list[str]:
    if isinstance(value, DictConfig) and "_target_" in value:
        return _check_node(value, path)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        problems = _check(value, args[0], path)
        bounds = None if problems else bounds_problem(value, hint)
        return problems + ([_OutOfRange(f"{path}: {bounds}")] if bounds else [])
    if origin in (typing.Union, types.UnionType):
        results = [(arg, _check(value, arg, path)) for arg in args]
        if any(not problems for _, problems in results):
            return []
        # The value has the type of one alternative, but not its bounds: say that, not "expected int or null".
        out_of_range = [p for _, problems in results if problems and _all_range(problems) for p in problems]
        if out_of_range:
            return out_of_range
        # A list or mapping with one list or mapping alternative: report that one's item problems.
        kind = _value_kind(value)
        same_kind = [problems for arg, problems in results if kind != "scalar" and _kind(arg) == kind]
        return same_kind[0] if len(same_kind) == 1 else [_mismatch(path, hint, value)]
    if hint is type(None):
        return [] if value is None else [_mismatch(path, hint, value)]
    if origin is typing.Literal:
        fits = value in args or type(value) in {type(arg) for arg in args}  # the target checks the value
        return [] if fits else [_mismatch(path, hint, value)]
    if hint in _SCALARS:
        return [] if _scalar_fits(value, hint) else [_mismatch(path, hint, value)]
    if (origin or hint) in _MAPPINGS:
        if not isinstance(value, DictConfig):
            return [_mismatch(path, hint, value)]
        value_hint = args[1] if len(args) == 2 else Any
        return [
            p for key in value if not str(key).startswith("_") for p in _item(value, key, value_hint, path)
        ]
    if (origin or hint) in _SEQUENCES:
        if not isinstance(value, ListConfig):
            return [_mismatch(path, hint, value)]
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                return [f"{path}: expected {len(args)} items ({_describe(hint)}), got {len(value)}"]
            return [p for i, arg in enumerate(args) for p in _check(value[i], arg, f"{path}[{i}]")]
        item_hint = args[0] if args else Any
        return [p for i, item in enumerate(value) for p in _check(item, item_hint, f"{path}[{i}]")]
    if isinstance(hint, type) and hint is not object and not isinstance(value, DictConfig | ListConfig):
        # A text or number cannot become a Tensor or a Module; None passes (Optional is often left out).
        try:
            return [] if value is None or isinstance(value, hint) else [_mismatch(path, hint, value)]
        except TypeError:  # a Protocol that is not runtime-checkable
            return []
    return []


def _item(node: DictConfig, key: Any, hint: Any, path: str) -> list[str]:
    try:
        value = node[key]
    except OmegaConfBaseException:
        return []
    return _check(value, hint, f"{path}.{key}")


def _scalar_fits(value: Any, hint: type) -> bool:
    if hint is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False  # a bool is an int to Python, never to a config reader
    if hint is float:
        return isinstance(value, int | float)
    if hint is Path:
        return isinstance(value, str | Path)
    return isinstance(value, hint)


def _kind(hint: Any) -> str:
    if typing.get_origin(hint) is Annotated:
        return _kind(typing.get_args(hint)[0])
    base = typing.get_origin(hint) or hint
    return "mapping" if base in _MAPPINGS else "sequence" if base in _SEQUENCES else "scalar"


def _value_kind(value: Any) -> str:
    if isinstance(value, DictConfig):
        return "mapping"
    return "sequence" if isinstance(value, ListConfig) else "scalar"


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return _describe(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in args)
    if hint is type(None):
        return "null"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(arg) for arg in args)
    if hint in _SCALARS:
        return _SCALARS[hint]
    if (origin or hint) in _MAPPINGS:
        return "a mapping"
    if (origin or hint) in _SEQUENCES:
        return "a list"
    return getattr(hint, "__name__", str(hint))


def _mismatch(path: str, hint: Any, value: Any) -> str:
    shown = OmegaConf.to_container(value) if isinstance(value, DictConfig | ListConfig) else value
    message = f"{path}: expected {_describe(hint)}, got {shown!r} ({type(shown).__name__})"
    if isinstance(value, int | float) and not isinstance(value, bool) and "str" in _describe(hint):
        message += f"; a text that looks like a number needs quotes on the command line: {path}=\"'{value}'\""
    return message
