"""``@entry("predict")`` gives a runner's task the run shell: check the config, claim the run folder (every
refusal before the first write, so a refused start writes nothing there: Hydra's log file is detached until
then, its ``.hydra/`` written here after, its empty folder removed), run the task and record how it ended
(CUDA fault: exit 84; lost peer: 87; a signal: 128 + its number; else ``.FAILURE``). A usage error ends the
process with its message alone and exit status 1. Also the small helpers of the thin runners.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import re
import signal
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, NoReturn, TypeVar

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ocr.checkpoints.resume import Resume
from ocr.machine.distributed import rank_zero_only_value, warn_unlaunched_multi_node
from ocr.run.config import CONFIG_DIR, check_config
from ocr.run.faults import error_record, exit_on_cuda_fault, log_file_only
from ocr.run.folder import (
    STARTED,
    claim_run,
    failure_written,
    interrupted_exit_code,
    record_failure,
    run_config,
    write_interrupted,
)
from ocr.run.peers import exit_on_lost_peer, lost_peer_reported
from ocr.utils.commands import run_next_commands
from ocr.utils.errors import RunRefusedError, UsageError, find_usage_error
from ocr.utils.io import atomic_write_json, atomic_write_text

__all__ = [
    "RunEntry",
    "TrainingRun",
    "entry",
    "exit_with_message",
    "format_metrics",
    "instantiate_all",
    "load_runner",
    "quiet_third_party",
    "route_lightning_logs",
    "save_config",
]

log = logging.getLogger(__name__)

RUNNERS_DIR = CONFIG_DIR.parent / "runners"
# Lightning messages that advertise products rather than describe the run.
_ADVERTISEMENT = re.compile(r"^\W*Tip: ")
T = TypeVar("T")


class RunEntry(Generic[T]):
    """A runner's task in the run shell (see the module docstring); made by :func:`entry`."""

    def __init__(self, task: Callable[..., T], config_name: str, training: bool, lightning: bool) -> None:
        self.task, self.config_name, self.training, self.lightning = task, config_name, training, lightning
        self.claimed = False  # whether this process has written into the run folder
        self.process = False  # whether this is the process's run (main), not a call from a test
        functools.update_wrapper(self, task)

    def __call__(self, cfg: DictConfig) -> T:
        """Check, claim, run the task; record how it ended (a signal: SystemExit(128 + its number))."""
        run_dir = Path(cfg.paths.output_dir)
        self.claimed = False
        try:
            with _log_files_detached(self.process):  # a refused start writes no log file
                claim = claim_run(cfg, training=self.training, check=check_config)
        except BaseException:
            # The folder Hydra created for this process, if it stayed empty.
            if self.process and (folder := run_dir.resolve()) == _hydra_run_dir():
                with contextlib.suppress(OSError):
                    if folder.stat().st_ctime >= STARTED - 1 and not any(folder.iterdir()):
                        folder.rmdir()
            raise
        self.claimed = True
        try:
            if self.process:
                if self.lightning:
                    route_lightning_logs()
                _write_hydra_record(claim.run_dir, cfg)
            hydra_cfg = _hydra()
            warn_unlaunched_multi_node(hydra_cfg.runtime.choices.get("hardware") if hydra_cfg else None)
            if claim.resume is not None:
                log.info("%s", claim.resume.summary)
            if self.training:
                run_cfg = run_config(cfg, claim)
                return self.task(run_cfg, TrainingRun.start(run_cfg, claim.resume))
            return self.task(cfg)
        except BaseException as exc:
            _record_end(run_dir, exc)
            raise
        finally:
            claim.release()

    def run_as_process(self, cfg: DictConfig) -> float | None:
        """This entry as the process's run: a usage error ends it with its message and exit status 1;
        returns the value of ``optimized_metric`` for Hydra sweeps."""
        from hydra.types import RunMode

        self.process = True
        try:
            result = self(cfg)
        except Exception as exc:
            usage, hydra_cfg = find_usage_error(exc), _hydra()
            if usage is None or (hydra_cfg is not None and hydra_cfg.mode == RunMode.MULTIRUN):
                raise
            # The task logged "Run failed: <type>: <message>" when it wrote .FAILURE.
            logged = usage is exc and failure_written(Path(cfg.paths.output_dir))
            exit_with_message(exc, usage, logged=logged, to_log_files=self.claimed)
        # None, with a warning naming the available metrics, when the run stopped before its first validation.
        name = cfg.get("optimized_metric")
        if not name or not isinstance(result, Mapping):
            return None
        if name not in result:
            log.warning(
                "optimized_metric=%r was not produced by this run; available: %s", name, sorted(result)
            )
            return None
        return float(result[name])

    def main(self) -> None:
        """The process: Hydra's command line for ``configs/<config_name>.yaml``, then the run."""
        import hydra

        # Hydra names the job (and its log file) after the file of the function it unwraps to: the task's.
        process = functools.wraps(self.task)(lambda cfg: self.run_as_process(cfg))
        hydra.main(config_path=str(CONFIG_DIR), config_name=self.config_name, version_base="1.3")(process)()


def entry(
    config_name: str, *, training: bool = False, lightning: bool = True
) -> Callable[[Callable[..., T]], RunEntry[T]]:
    """Give a runner's task the run shell for ``configs/<config_name>.yaml``. A ``training`` task is
    called with the config to run and its :class:`TrainingRun`, any other with the config; a
    ``lightning`` one has Lightning's log lines routed once (:func:`route_lightning_logs`)."""
    return lambda task: RunEntry(task, config_name, training, lightning)


@dataclass(frozen=True)
class TrainingRun:
    """What the run shell hands a training task: the resume it continues (None: a new run), its callbacks
    and loggers; it writes the run's files (the config, ``metrics.json``) and the final summary."""

    cfg: DictConfig
    resume: Resume | None
    callbacks: list[Any]
    loggers: list[Any]

    @classmethod
    def start(cls, cfg: DictConfig, resume: Resume | None) -> TrainingRun:
        """Seed (``seed``), make the callbacks (first: the stall watchdog covers start-up), the loggers."""
        import lightning as L
        from lightning.pytorch.callbacks import LearningRateMonitor

        if cfg.seed is not None:
            L.seed_everything(cfg.seed, workers=True)
        callbacks = instantiate_all(cfg.callbacks)
        loggers = instantiate_all(cfg.logger)
        if not loggers:  # logger=none: Lightning's LR monitor refuses to run without a logger
            callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
        return cls(cfg, resume, callbacks, loggers)

    @property
    def directory(self) -> Path:
        return Path(self.cfg.paths.output_dir)

    def record_config(self, datamodule: Any) -> None:
        """Write ``config.yaml``, or a resume's ``config.resumed-step<n>.yaml`` once its data is checked."""
        if self.resume is None:
            save_config(self.cfg, self.directory)
            return
        self.resume.check_data(datamodule, allow_change=self.cfg.resume_allow_data_change)
        save_config(self.cfg, self.directory, self.resume.config_name, self.resume.header)

    def finish(self, trainer: Any, metrics: dict[str, float], *notes: str | None) -> None:
        """Global rank 0: ``metrics.json``, then the final summary on the console (with ``notes``)."""
        if not trainer.is_global_zero:
            return
        checkpointing = trainer.checkpoint_callback
        kept = getattr(checkpointing, "kept_path", "")
        keep = getattr(checkpointing, "keep", "best")
        directory = self.directory
        atomic_write_json(directory / "metrics.json", {"metrics": metrics, "kept_checkpoint": kept or None})
        print(format_metrics(metrics, "Final metrics"))
        print(
            f"{keep.capitalize()} checkpoint: {kept or '(none: no validation ran, or checkpointing is off)'}"
        )
        for note in notes:
            if note:  # said at the end too: e.g. the time budget's warning is minutes up the log
                print(note)
        print(f"Run directory: {directory}")
        checkpoint = kept or (checkpointing.last_model_path if checkpointing else "")
        if checkpoint:
            print(f"Next commands:\n{run_next_commands(self.cfg, directory, Path(checkpoint))}")


def _hydra() -> Any | None:
    """Hydra's config of this run, None outside a Hydra run."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get() if HydraConfig.initialized() else None


def _hydra_run_dir() -> Path | None:
    hydra_cfg = _hydra()
    return Path(hydra_cfg.runtime.output_dir).resolve() if hydra_cfg is not None else None


def _detach_log_files() -> list[logging.FileHandler]:
    """Remove the root logger's file handlers (Hydra's log file opens at its first record); returns them."""
    root = logging.getLogger()
    files = [handler for handler in root.handlers if isinstance(handler, logging.FileHandler)]
    for handler in files:
        root.removeHandler(handler)
    return files


@contextlib.contextmanager
def _log_files_detached(detach: bool) -> Iterator[None]:
    """While the run folder is not claimed, log records go to the console only."""
    files = _detach_log_files() if detach else []
    try:
        yield
    finally:
        for handler in files:
            logging.getLogger().addHandler(handler)


def _write_hydra_record(run_dir: Path, cfg: DictConfig) -> None:
    """What Hydra would have written before the task: ``.hydra/<time>/{config,hydra,overrides}.yaml``
    (global rank 0; a resumed run adds its own)."""
    hydra_cfg = _hydra()
    if hydra_cfg is None or run_dir != _hydra_run_dir():
        return
    subdir = rank_zero_only_value(f".hydra/{datetime.now():%Y-%m-%d_%H-%M-%S}")
    if subdir is None:
        return
    record = run_dir / subdir
    atomic_write_text(record / "config.yaml", OmegaConf.to_yaml(cfg))
    atomic_write_text(record / "hydra.yaml", OmegaConf.to_yaml(OmegaConf.create({"hydra": hydra_cfg})))
    atomic_write_text(record / "overrides.yaml", OmegaConf.to_yaml(hydra_cfg.overrides.task))


def _record_end(run_dir: Path, exc: BaseException) -> None:
    """How a claimed run that raised ``exc`` ends: a CUDA fault or a lost peer ends the process here; a
    stop by a signal raises SystemExit with its code; anything else but a clean exit writes ``.FAILURE``."""
    exit_on_cuda_fault(exc, run_dir)
    exit_on_lost_peer(exc, run_dir)
    if isinstance(exc, RunRefusedError):  # e.g. a resume whose data changed: its status stays as it was
        log.error("Run refused; the run directory is unchanged: %s", run_dir)
        return
    exit_code = interrupted_exit_code(run_dir)  # the guard recorded it in .INTERRUPTED
    if exit_code is None and isinstance(exc, KeyboardInterrupt):
        exit_code = 128 + signal.SIGINT
        write_interrupted(run_dir, "interrupted by Ctrl-C outside training (nothing new to save)", exit_code)
        log.warning("Run interrupted by Ctrl-C outside training: %s", run_dir)
    if exit_code is not None:
        raise SystemExit(exit_code) from None
    # Lightning turns Ctrl-C into SystemExit(1); only a clean exit is not a failure. A rank that lost its
    # peers may have reported first; this rank's own error is the cause.
    clean_exit = isinstance(exc, SystemExit) and exc.code in (0, None)
    if (not failure_written(run_dir) or lost_peer_reported(run_dir)) and not clean_exit:
        record_failure(run_dir, exc)
    log.error("Run directory: %s", run_dir)


def exit_with_message(
    exc: BaseException, usage: UsageError, *, logged: bool = False, to_log_files: bool = True
) -> NoReturn:
    """Log ``usage``'s message (unless ``logged`` already) and SystemExit(1); the traceback of ``exc`` goes
    to the log files only, and nothing does when not ``to_log_files`` (a refused start writes nothing into
    its folder). With ``HYDRA_FULL_ERROR=1``, re-raise ``exc`` instead."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise exc
    if to_log_files:
        trace = "Traceback of the error (on the console with HYDRA_FULL_ERROR=1):"
        log_file_only(error_record(trace, exc))
    else:
        _detach_log_files()
    if not logged:
        log.error("%s", usage)
    raise SystemExit(1) from None


def route_lightning_logs() -> None:
    """Each Lightning message once: through the root logger's handlers (Hydra's console and log file), not
    also through the console handler the ``lightning`` package adds to itself at import; its product tips
    are dropped."""
    import lightning  # noqa: F401  # importing it adds the handler removed here

    package = logging.getLogger("lightning")
    if logging.getLogger().handlers:  # else (no logging configured) its own handler is the only output
        for handler in package.handlers[:]:
            package.removeHandler(handler)
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(lambda record: not _ADVERTISEMENT.match(record.getMessage()))


def load_runner(name: str) -> ModuleType:
    """Import ``runners/<name>.py`` (runners are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"runner_{name}", RUNNERS_DIR / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"runners/{name}.py: expected a runner script, found none at {RUNNERS_DIR}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def instantiate_all(group: DictConfig | None) -> list[Any]:
    """Instantiate each ``_target_`` entry of a group (callbacks, loggers), skipping ``None`` results."""
    objects = []
    for name, node in (group or {}).items():
        if not isinstance(node, DictConfig) or "_target_" not in node:
            shown = OmegaConf.to_yaml(node)
            raise ValueError(f"{str(name)}: expected a config node with _target_, got {shown!r}")
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


def format_metrics(metrics: Mapping[str, float], title: str) -> str:
    """A plain-text table of metrics for the console."""
    if not metrics:
        return f"{title}: (no metrics)"
    width = max(len(k) for k in metrics)
    lines = [title, "-" * (width + 12)]
    lines += [f"{k:<{width}}  {v:>9.4f}" for k, v in sorted(metrics.items())]
    return "\n".join(lines)


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
