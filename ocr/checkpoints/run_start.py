"""What a training run checks and claims before anything is written into its folder.

:func:`claim_run` refuses a resume that cannot go on (``ocr.checkpoints.resume``: no such folder, another
run's checkpoint, an override that would not take effect), refuses a new run in a folder that holds another
run, takes the folder's lock (``ocr.utils.run_folder``) and gives the run its identity. Hydra creates the run
folder, writes its ``.hydra/`` record and opens the log file before the task function runs, so the
:class:`RunStartGate` Hydra callback (``hydra.callbacks`` in ``configs/train.yaml``) claims the run at
Hydra's ``on_run_start``, before any of that: a refused start writes nothing, not even Hydra's files.
The task claims again (:func:`claim_run` returns the claim this process already holds and replays the
log lines it held back into the run's log), which also covers callers without Hydra's run (tests) and
multirun jobs, whose folders Hydra creates fresh.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from ocr.checkpoints.resume import START_AGAIN, Resume, refuse_file_resume, resume_from_command_line
from ocr.checkpoints.world_size import check_world_size
from ocr.machine.distributed import warn_unlaunched_multi_node
from ocr.utils.config_rules import check_config_values
from ocr.utils.run_folder import (
    RUN_RECORD,
    RunLock,
    RunRefusedError,
    is_launching_process,
    new_run_id,
    read_run_id,
    write_run_record,
)

__all__ = ["RunClaim", "RunStartGate", "claim_run"]

log = logging.getLogger(__name__)

_claims: dict[Path, RunClaim] = {}  # the runs this process has claimed, by folder


@dataclass
class RunClaim:
    """A run this process may write: its folder, identity, the resume it continues (None: a new run) and
    its lock (None in a rank other than 0 of a distributed run)."""

    run_dir: Path
    run_id: str
    resume: Resume | None
    lock: RunLock | None
    held_logs: list[logging.LogRecord] = field(default_factory=list)

    def run_config(self, cfg: DictConfig) -> DictConfig:
        """The config to run: the resumed run's own, or ``cfg``; with ``run_id`` set."""
        config = self.resume.config if self.resume is not None else cfg
        with open_dict(config):
            config.run_id = self.run_id
        return config

    def release(self) -> None:
        """Give the folder up (the lock file is removed)."""
        _claims.pop(self.run_dir, None)
        if self.lock is not None:
            self.lock.release()

    def __enter__(self) -> RunClaim:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _occupant(run_dir: Path) -> str | None:
    """What shows that ``run_dir`` holds a run (Hydra's ``.hydra/`` and log file do not), or None."""
    found = [name for name in (RUN_RECORD, "config.yaml", "metrics.json") if (run_dir / name).is_file()]
    if any((run_dir / "checkpoints").glob("*.ckpt")):
        found.append("checkpoints/*.ckpt")
    if not found:
        return None
    run_id = read_run_id(run_dir)
    return f"run {run_id} ({', '.join(found)})" if run_id else f"a run ({', '.join(found)})"


def _has_checkpoint(run_dir: Path) -> bool:
    return any((run_dir / "checkpoints").glob("*.ckpt")) or any(run_dir.glob("hpc_ckpt_*.ckpt"))


def claim_run(cfg: DictConfig) -> RunClaim:
    """Claim the run folder ``cfg.paths.output_dir`` for this process (again: the claim it holds).

    Raises:
        RunRefusedError: a refused resume (``ResumeRefusedError``), a new run in a folder that holds
            another run, or a folder another live process owns (``RunFolderBusyError``).
        FileNotFoundError: a resume without a checkpoint to resume from.
    """
    run_dir = Path(cfg.paths.output_dir).resolve()
    claimed = _claims.get(run_dir)
    if claimed is not None:
        for record in claimed.held_logs:
            logging.getLogger(record.name).handle(record)
        claimed.held_logs = []
        return claimed
    if cfg.get("run_id") is not None:
        raise RunRefusedError(
            f"run_id={cfg.run_id}: the run's identity is set by the runner, not the command line"
        )
    refuse_file_resume(cfg.get("resume"))  # before the lock, which would look for <file>/.lock
    launching = is_launching_process()
    lock = RunLock(run_dir) if launching else None
    if lock is not None:
        lock.refuse_if_busy()
    resume = resume_from_command_line(cfg)
    if resume is not None:
        allow = bool(resume.config.resume_allow_world_size_change)
        check_world_size(resume.world_size, resume.config, resume.checkpoint, allow)
    if resume is None and launching:
        occupant = _occupant(run_dir)
        if occupant is not None and not _has_checkpoint(run_dir):
            raise RunRefusedError(
                f"{run_dir} holds {occupant}: a new run never writes into another run's folder, and that run "
                "has no checkpoint to resume (killed before its first one?): "
                + START_AGAIN.format(run_dir=run_dir)
            )
        if occupant is not None:
            raise RunRefusedError(
                f"{run_dir} holds {occupant}: a new run never writes into another run's folder. Resume it "
                f"(resume={run_dir}), choose another hydra.run.dir, or delete the folder to start over"
            )
    if lock is not None:
        lock.acquire()
    run_id = read_run_id(run_dir)
    if run_id is None:
        run_id = (resume.run_id if resume is not None else None) or new_run_id()
        if launching:
            write_run_record(run_dir, run_id)
    claim = RunClaim(run_dir, run_id, resume, lock)
    _claims[run_dir] = claim
    return claim


@contextlib.contextmanager
def _holding_logs() -> Iterator[list[logging.LogRecord]]:
    """Keep the records logged inside back from the root logger's handlers (Hydra's console, before the
    run's log file exists) and return them in the list."""

    class Holder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append(record)

    held: list[logging.LogRecord] = []
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers = [Holder()]
    root.setLevel(logging.INFO)
    try:
        yield held
    finally:
        root.handlers = handlers
        root.setLevel(level)


def _task_config(config: DictConfig) -> DictConfig:
    """The task's config (``hydra`` removed) as Hydra's ``run_job`` will build it: ``hydra.runtime
    .output_dir`` set from ``hydra.run.dir``, so that ``paths.output_dir`` resolves."""
    with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
        config.hydra.runtime.output_dir = os.path.abspath(str(OmegaConf.select(config, "hydra.run.dir")))
    HydraConfig.instance().set_config(config)
    task = copy.deepcopy(config)
    with read_write(task), open_dict(task):
        del task["hydra"]
    return task


class RunStartGate(Callback):
    """Hydra callback: :func:`claim_run` before Hydra writes into the run folder. A refused start prints
    its message and exits 1 with the folder as it was (``HYDRA_FULL_ERROR=1``: with the traceback)."""

    def __init__(self) -> None:
        self.claim: RunClaim | None = None

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        task = _task_config(config)
        with _holding_logs() as held:
            try:
                check_config_values(task)  # a value that would stop the run late stops it here, in seconds
                self.claim = claim_run(task)
                warn_unlaunched_multi_node(OmegaConf.select(config, "hydra.runtime.choices.hardware"))
            except (RunRefusedError, FileNotFoundError, ValueError) as exc:
                refused: BaseException | None = exc
            else:
                refused = None
        if refused is None:
            assert self.claim is not None
            self.claim.held_logs = held
            return
        for record in held:
            logging.getLogger(record.name).handle(record)
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise refused
        log.error("%s", refused)
        raise SystemExit(1)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.claim is not None:
            self.claim.release()
