"""The project's own, expected errors: one marker class decides what a runner reports as a message alone.

An error this project raises on purpose about what it was given (a config value, an input file, a
checkpoint, an annotation, a refused resume, a full disk, an output folder it cannot write) derives from
:class:`UsageError`, together with the built-in class callers catch (``ValueError``, ``OSError``, ...).
Its message is the whole report: it names the key or file, what was expected and what came instead.
The runners print it alone on the console and keep the traceback for the run's log file
(:mod:`ocr.run.entry`); any other exception is a bug and keeps its traceback. Standard library only.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigValueError",
    "InputNotFoundError",
    "OutputDirError",
    "RunRefusedError",
    "UsageError",
    "find_usage_error",
]


class UsageError(Exception):
    """Marker base: raised on purpose, with a message that says everything the user needs."""


class ConfigValueError(UsageError, ValueError):
    """A config value outside its range or set of choices; the message names the full key."""


class CheckpointError(UsageError, ValueError):
    """A file given as a checkpoint that cannot be used: empty, truncated, text, or not this project's."""


class InputNotFoundError(UsageError, FileNotFoundError):
    """An input file or folder that is missing or holds nothing to work on; the message names the key."""


class OutputDirError(UsageError, OSError):
    """An output folder that cannot be created or written (read-only, a file in the way, no permission)."""


class RunRefusedError(UsageError):
    """A run refused at start, before it wrote anything into its folder (its status stays as it was)."""


def find_usage_error(exc: BaseException) -> UsageError | None:
    """``exc`` itself, or the first :class:`UsageError` it was raised from (Hydra's ``instantiate`` wraps
    a constructor's error in an ``InstantiationException``); None for any other error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, UsageError):
            return current
        seen.add(id(current))
        current = current.__cause__
    return None
