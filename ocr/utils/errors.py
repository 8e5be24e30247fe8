"""The project's own, expected errors: one marker class decides what a runner reports as a message alone.

An error raised on purpose about what the project was given derives from :class:`UsageError` and the
built-in class callers catch (``ValueError``, ``OSError``, ...); its message is the whole report, which
the runners print alone, the traceback going to the run's log (:mod:`ocr.run.entry`). Any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigValueError",
    "InputNotFoundError",
    "NonFiniteLossError",
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


class NonFiniteLossError(UsageError, FloatingPointError):
    """A non-finite loss or gradient; ``step`` is the first bad global step, ``what`` names the tensor."""

    def __init__(self, step: int, what: str, checked_at: int) -> None:
        self.step = step
        self.what = what
        self.checked_at = checked_at
        super().__init__(
            f"non-finite {what} first seen at global step {step} (detected at step {checked_at}); "
            "on a GPU this includes non-finite logits and targets outside [0, 1] (rerun with "
            "loss.strict=true to name the tensor and images). The crash bundle holds the last batch; for "
            "the exact batch of the first bad step rerun with "
            "callbacks.guard.check_every_n_steps=1; replay with "
            "scripts/debug_cuda.sh replay <run dir>/crash"
        )


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
