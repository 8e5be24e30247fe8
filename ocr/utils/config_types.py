"""Ranges of constructor parameters, declared in their annotations: ``batch_size: PositiveInt``,
``thresh: Annotated[float, Bounds(0.0, 1.0)]``. The one config check (``ocr.run.config``) reads them when the
config is composed; :func:`check_arguments` applies them to a constructor called without a config.
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from typing import Annotated, Any

from ocr.utils.errors import ConfigValueError, UsageError

__all__ = [
    "Bounds",
    "ConfigValueTypeError",
    "NonNegativeFloat",
    "NonNegativeInt",
    "PositiveFloat",
    "PositiveInt",
    "RETIRED_KEYS",
    "bounds_problem",
    "check_arguments",
    "parameter_hints",
]

# Top-level keys earlier versions read and nothing reads now, with what replaced them: added with ``+`` on a
# command line from older docs, they would be ignored without a word.
RETIRED_KEYS = {
    "debug": "fault injection is a callback now: debug=inject callbacks.inject.kind=KIND "
    "[callbacks.inject.step=N] (was +debug.inject=KIND +debug.inject_step=N)",
}


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


def check_arguments(target: Any, prefix: str, **values: Any) -> None:
    """The :class:`Bounds` of ``target``'s annotated parameters applied to ``values`` (for a constructor
    called without a config; ``prefix`` is its config group, named in the message).

    Raises:
        ConfigValueError: naming every value out of its bounds.
    """
    hints = parameter_hints(target)
    problems = [
        f"{prefix}.{name}: {problem}"
        for name, value in values.items()
        if (problem := bounds_problem(value, hints.get(name))) is not None
    ]
    if problems:
        raise ConfigValueError("; ".join(problems))


def bounds_problem(value: Any, hint: Any) -> str | None:
    """What is out of the :class:`Bounds` of an ``Annotated`` ``hint`` about ``value``, or None."""
    if typing.get_origin(hint) is not Annotated:
        return None
    found = (b.problem(value) for b in hint.__metadata__ if isinstance(b, Bounds))
    return next((p for p in found if p is not None), None)


def parameter_hints(target: Any) -> dict[str, Any]:
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
