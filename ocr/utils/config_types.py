"""Type check of a composed config against the signatures of its ``_target_`` classes and functions.

Hydra checks keys (struct mode) but not the types of values bound for ``_target_`` arguments, so
``data.batch_size=abc`` used to fail inside the constructor with ``full_key: data``. This pass reads each
target's annotated signature and names the full key of every value of the wrong type, all at once,
before anything is instantiated. Annotations it cannot judge (generic callables and iterables, protocols,
type variables, unresolvable names) are not checked: the constructor still validates those.

Sizes, counts and thresholds declare their range in the signature, ``batch_size: PositiveInt`` or
``thresh: Annotated[float, Bounds(0.0, 1.0)]``, so ``data.batch_size=-2`` is named here, at config read,
not by torch once the data loader starts; :func:`check_arguments` applies the same bounds in a constructor.
"""

from __future__ import annotations

import collections.abc
import difflib
import inspect
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ocr.utils.errors import ConfigValueError, UsageError

__all__ = [
    "Bounds",
    "ConfigValueTypeError",
    "NonNegativeFloat",
    "NonNegativeInt",
    "PositiveFloat",
    "Probability",
    "PositiveInt",
    "check_arguments",
    "check_config_types",
]

_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_SEQUENCES = (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence)
_SCALARS = {bool: "bool", int: "int", float: "float", str: "str", Path: "path (str)"}

# Keys of a ``_target_`` node that the project reads itself and removes before instantiating the node.
READ_BESIDE_TARGET = frozenset({"model.init_from"})  # ocr.lightning_modules.build


class ConfigValueTypeError(UsageError, TypeError):
    """Config values of the wrong type; the message names each full key, expected and found."""


@dataclass(frozen=True)
class Bounds:
    """``Annotated`` metadata: the interval a numeric argument must lie in (None: unbounded on that side).

    Attributes:
        low: smallest allowed value.
        high: largest allowed value.
        low_open: ``low`` itself is not allowed (a ratio that must be > 0).
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` ("expected ..."), or None; values of other types are not judged."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if value != value:  # NaN passes every comparison below
            return f"expected {self.describe()}, got nan"
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and value > self.high
        return f"expected {self.describe()}, got {value}" if too_low or too_high else None

    def describe(self) -> str:
        if self.low is not None and self.high is not None:
            return f"a value in {'(' if self.low_open else '['}{self.low}, {self.high}]"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low}"
        return f"<= {self.high}"


PositiveInt = Annotated[int, Bounds(low=1)]
NonNegativeInt = Annotated[int, Bounds(low=0)]
PositiveFloat = Annotated[float, Bounds(low=0.0, low_open=True)]
NonNegativeFloat = Annotated[float, Bounds(low=0.0)]
Probability = Annotated[float, Bounds(0.0, 1.0)]


def check_config_types(cfg: DictConfig) -> None:
    """Check every value bound for a ``_target_`` argument against that argument's annotation (type,
    and :class:`Bounds` where the annotation carries them).

    Raises:
        ConfigValueTypeError: one or more values have the wrong type (all problems are listed).
        ConfigValueError: the types fit, but values are out of their bounds (all are listed).
    """
    unknown = _unknown_arguments(cfg, "")
    if unknown:
        raise ConfigValueError(f"config: {'; '.join(unknown)} (a key added with '+' reaches the constructor)")
    problems = _check_node(cfg, "")
    if not problems:
        return
    # One problem stays on one line, the console's whole message; more are listed one per line.
    listed = f" {problems[0]}" if len(problems) == 1 else "".join(f"\n  {p}" for p in problems)
    if _all_range(problems):
        raise ConfigValueError(
            f"config: {len(problems)} value(s) out of range (fix them in the YAML or on the command line):"
            f"{listed}"
        )
    raise ConfigValueTypeError(
        f"config: {len(problems)} value(s) of the wrong type{' or out of range' * _any_range(problems)} (fix "
        f"them in the YAML or on the command line):{listed}"
    )


def check_arguments(target: Any, prefix: str, **values: Any) -> None:
    """The :class:`Bounds` of ``target``'s annotated parameters applied to ``values`` (for a constructor
    called without a config; ``prefix`` is its config group, named in the message).

    Raises:
        ConfigValueError: naming every value out of its bounds.
    """
    hints = _parameter_hints(target)
    problems = [
        f"{prefix}.{name}: {problem}"
        for name, value in values.items()
        if (problem := _bounds_problem(value, hints.get(name))) is not None
    ]
    if problems:
        raise ConfigValueError("; ".join(problems))


class _OutOfRange(str):
    """A problem message about a value's bounds (the others are about its type)."""


def _any_range(problems: list[str]) -> bool:
    return any(isinstance(p, _OutOfRange) for p in problems)


def _all_range(problems: list[str]) -> bool:
    return all(isinstance(p, _OutOfRange) for p in problems)


def _bounds_problem(value: Any, hint: Any) -> str | None:
    if typing.get_origin(hint) is not Annotated:
        return None
    found = (b.problem(value) for b in hint.__metadata__ if isinstance(b, Bounds))
    return next((p for p in found if p is not None), None)


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
    return _parameter_hints(target)


def _parameter_hints(target: Any) -> dict[str, Any]:
    """Annotation of each parameter of a class's constructor or a function (postponed ones evaluated)."""
    # A class's own __init__, which mypy flags as read off an instance.
    function = inspect.unwrap(target.__init__ if isinstance(target, type) else target)  # type: ignore[misc]
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return {}
    namespace = getattr(function, "__globals__", {})
    hints = {}
    for name, parameter in parameters.items():
        annotation = parameter.annotation
        if isinstance(annotation, str):  # postponed evaluation (from __future__ import annotations)
            try:
                annotation = eval(annotation, namespace)  # noqa: S307 - what typing.get_type_hints does
            except Exception:  # noqa: BLE001 - e.g. a name imported only under TYPE_CHECKING
                continue
        if annotation is not inspect.Parameter.empty:
            hints[name] = annotation
    return hints


def _check(value: Any, hint: Any, path: str) -> list[str]:
    if isinstance(value, DictConfig) and "_target_" in value:
        return _check_node(value, path)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        problems = _check(value, args[0], path)
        bounds = None if problems else _bounds_problem(value, hint)
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
