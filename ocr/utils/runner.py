"""Helpers shared by the thin Hydra entry points in ``runners/``."""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import signal
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from ocr.utils.fault_exit import exit_on_cuda_fault
from ocr.utils.io import atomic_write_text
from ocr.utils.output_dir import writable_dir
from ocr.utils.peer_lost import exit_on_lost_peer, lost_peer_reported
from ocr.utils.run_folder import RunRefusedError
from ocr.utils.sentinels import failure_written, interrupted_exit_code, write_failure, write_interrupted

__all__ = [
    "compose_config",
    "instantiate_all",
    "load_runner",
    "save_config",
    "task_wrapper",
    "format_metrics",
    "run_dir",
    "get_metric_value",
    "quiet_third_party",
]

log = logging.getLogger(__name__)

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
RUNNERS_DIR = CONFIG_DIR.parent / "runners"


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


def load_runner(name: str) -> ModuleType:
    """Import ``runners/<name>.py`` (runners are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"runner_{name}", RUNNERS_DIR / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"runners/{name}.py: expected a runner script, found none at {RUNNERS_DIR}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_dir(cfg: DictConfig) -> Path:
    """The run directory (``paths.output_dir``), created if missing.

    Raises:
        OutputDirError: it cannot be created or written, naming the key.
    """
    return writable_dir(cfg.paths.output_dir, "paths.output_dir", create=True)


def instantiate_all(group: DictConfig | None) -> list[Any]:
    """Instantiate each ``_target_`` entry of a group (callbacks, loggers), skipping ``None`` results."""
    objects = []
    for name, node in (group or {}).items():
        if not isinstance(node, DictConfig) or "_target_" not in node:
            raise ValueError(
                f"{str(name)}: expected a config node with _target_, got {OmegaConf.to_yaml(node)!r}"
            )
        log.info("Instantiating %s <%s>", name, node._target_)
        obj = instantiate(node)
        if obj is not None:
            objects.append(obj)
    return objects


def save_config(cfg: DictConfig, directory: Path, name: str = "config.yaml", header: str = "") -> Path:
    """Write the resolved config as ``name`` into the run directory, after ``header`` (comment lines);
    atomic, global rank 0 only."""
    from lightning.pytorch.utilities import rank_zero_only

    path = directory / name
    if rank_zero_only.rank == 0:  # type: ignore[attr-defined]  # Lightning sets it on the function
        atomic_write_text(path, header + OmegaConf.to_yaml(cfg, resolve=True))
    return path


def task_wrapper(task: Callable[[DictConfig], Any]) -> Callable[[DictConfig], Any]:
    """Write ``.FAILURE`` for any exception (also those before the trainer starts), then re-raise."""

    @functools.wraps(task)
    def wrapped(cfg: DictConfig) -> Any:
        try:
            return task(cfg)
        except BaseException as exc:
            directory = Path(cfg.paths.output_dir)
            exit_on_cuda_fault(exc, directory)  # a CUDA fault ends the process here (ocr/utils/fault_exit.py)
            exit_on_lost_peer(exc, directory)  # so does another rank's end (ocr/utils/peer_lost.py)
            # Lightning turns Ctrl-C into SystemExit(1); only a clean exit is not a failure.
            clean_exit = isinstance(exc, SystemExit) and exc.code in (0, None)
            if isinstance(exc, RunRefusedError):
                # Refused before anything ran: the run's own status (.SUCCESS or .FAILURE) stays as it was.
                log.error("Run refused; the run directory is unchanged: %s", directory)
                raise
            exit_code = _interrupted(directory, exc)
            if exit_code is not None:
                raise SystemExit(exit_code) from None
            # A rank that lost its peers may have reported first; this rank's own error is the cause.
            if (not failure_written(directory) or lost_peer_reported(directory)) and not clean_exit:
                try:
                    write_failure(directory, exc)
                except OSError as error:  # e.g. the disk is full: one line, not a chained traceback
                    log.error("Could not write %s: %s", directory / ".FAILURE", error)
            log.error("Run directory: %s", directory)
            raise

    return wrapped


def _interrupted(directory: Path, exc: BaseException) -> int | None:
    """The exit code of a run stopped by a signal (the callbacks recorded it in ``.INTERRUPTED``; a Ctrl-C
    outside fit is recorded here), None for any other exception."""
    exit_code = interrupted_exit_code(directory)
    if exit_code is None and isinstance(exc, KeyboardInterrupt):
        exit_code = 128 + signal.SIGINT
        write_interrupted(
            directory, "interrupted by Ctrl-C outside training (nothing new to save)", exit_code
        )
        log.warning("Run interrupted by Ctrl-C outside training: %s", directory)
    return exit_code


def format_metrics(metrics: Mapping[str, float], title: str) -> str:
    """A plain-text table of metrics for the console."""
    if not metrics:
        return f"{title}: (no metrics)"
    width = max(len(k) for k in metrics)
    lines = [title, "-" * (width + 12)]
    lines += [f"{k:<{width}}  {v:>9.4f}" for k, v in sorted(metrics.items())]
    return "\n".join(lines)


def get_metric_value(metrics: Mapping[str, Any], name: str | None) -> float | None:
    """The value of ``name`` in ``metrics`` for Hydra sweeps (None, with a warning naming the
    available metrics, when the run never produced it, e.g. it stopped before the first validation)."""
    if not name:
        return None
    if name not in metrics:
        log.warning("optimized_metric=%r was not produced by this run; available: %s", name, sorted(metrics))
        return None
    return float(metrics[name])


def quiet_third_party() -> None:
    """Defaults for a clean console (no albumentations update check, no warnings the project handles, no
    ONNX exporter chatter); PROJECT_ROOT for ``paths``."""
    # predict_step returns nothing on purpose: predictions arrive through the module's pipeline.
    warnings.filterwarnings("ignore", message=r"predict returned None if it was on purpose.*")
    # Lightning's own pytree helper on newer torch: not actionable for users.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
    # A resume continues in its own run directory, whose checkpoints folder is not empty on purpose.
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    # A checkpoint written between validations resumes the epoch with its remaining number of batches,
    # drawn afresh (README, "Resume a run"); from one written at a validation the resume is exact.
    warnings.filterwarnings(
        "ignore", message=r".*ended before the epoch ended and your dataloader is not resumable"
    )
    # The ONNX exporter's graph passes log every rewrite at INFO (dozens of lines per export).
    for name in ("onnxscript", "onnx_ir"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    if "PROJECT_ROOT" not in os.environ:
        os.environ["PROJECT_ROOT"] = str(Path(sys.argv[0]).resolve().parents[1])
