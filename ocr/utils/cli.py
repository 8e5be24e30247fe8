"""How a runner ends and logs: one message for an error the project raised on purpose, each log line once.

The runners' ``main`` functions sit under ``@hydra.main`` and one of these decorators:
:func:`report_usage_errors` (a run that does not use Lightning: evaluate) or :func:`lightning_runner`
(train, test, predict, export).
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

from omegaconf import DictConfig

from ocr.utils.config_rules import check_config_values
from ocr.utils.errors import UsageError, find_usage_error
from ocr.utils.sentinels import failure_written

__all__ = ["exit_with_message", "lightning_runner", "report_usage_errors", "route_lightning_logs"]

log = logging.getLogger(__name__)

# Lightning messages that advertise products rather than describe the run.
_ADVERTISEMENT = re.compile(r"^\W*Tip: ")
T = TypeVar("T")


def report_usage_errors(main: Callable[[DictConfig], T]) -> Callable[[DictConfig], T]:
    """Decorate a runner's ``@hydra.main`` function: a :class:`~ocr.utils.errors.UsageError` (also one
    that Hydra's ``instantiate`` wrapped) ends a single run with its message alone on the console and exit
    status 1, instead of Hydra's "Error executing job" and the traceback, which goes to the run's log
    file (and ``.FAILURE``). The config's value ranges are checked first
    (:func:`~ocr.utils.config_rules.check_config_values`). Any other exception, every error with
    ``HYDRA_FULL_ERROR=1``, and a multirun job's error (recorded by the sweep) go on to Hydra as before."""

    @functools.wraps(main)
    def wrapped(cfg: DictConfig) -> T:
        try:
            check_config_values(cfg)  # before anything heavy: seconds, not a minute of loading
            return main(cfg)
        except Exception as exc:
            usage = find_usage_error(exc)
            if usage is None or _multirun():
                raise
            # The runner's task logged "Run failed: <type>: <message>" when it wrote .FAILURE.
            logged = usage is exc and failure_written(Path(cfg.paths.output_dir))
            exit_with_message(exc, usage, logged=logged)

    return wrapped


def lightning_runner(main: Callable[[DictConfig], T]) -> Callable[[DictConfig], T]:
    """:func:`report_usage_errors` for a runner that runs Lightning (train, test, predict, export), which
    also routes Lightning's log lines once through Hydra's handlers (:func:`route_lightning_logs`)."""

    @functools.wraps(main)
    def routed(cfg: DictConfig) -> T:
        route_lightning_logs()
        return main(cfg)

    return report_usage_errors(routed)


def exit_with_message(exc: BaseException, usage: UsageError, *, logged: bool = False) -> NoReturn:
    """Log ``usage``'s message (unless ``logged`` already) and exit with status 1; the traceback of
    ``exc`` goes to the log files only. With ``HYDRA_FULL_ERROR=1``, re-raise ``exc`` instead.

    Raises:
        SystemExit: status 1.
    """
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise exc
    record = log.makeRecord(
        log.name,
        logging.ERROR,
        __file__,
        0,
        "Traceback of the error (on the console with HYDRA_FULL_ERROR=1):",
        (),
        (type(exc), exc, exc.__traceback__),
    )
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
    if not logged:
        log.error("%s", usage)
    raise SystemExit(1) from None


def _multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def route_lightning_logs() -> None:
    """Each Lightning message once: through the root logger's handlers (Hydra's console and log file), not
    also through the console handler the ``lightning`` package adds to itself at import (the "INFO: ..."
    copies); its product tips are dropped."""
    import lightning  # noqa: F401  # importing it adds the handler removed here

    package = logging.getLogger("lightning")
    if logging.getLogger().handlers:  # else (no logging configured) its own handler is the only output
        for handler in package.handlers[:]:
            package.removeHandler(handler)
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_not_an_advertisement)


def _not_an_advertisement(record: logging.LogRecord) -> bool:
    return not _ADVERTISEMENT.match(record.getMessage())
