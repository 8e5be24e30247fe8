"""The guard: one callback that watches a run and owns what happens, in which order, when it raises.

Listed first (``configs/callbacks/triage.yaml``), its ``on_exception`` runs before every other hook: a
peer's CUDA fault stops this rank too; a CUDA fault arms the exit, writes ``fault.json``, tells the other
ranks and writes ``.FAILURE``; then the crash bundle, a non-finite loss seen earlier, a signal's
``last.ckpt`` and ``.INTERRUPTED``, the run status. After a CUDA fault Lightning's teardown would touch the
dead context, so the guard takes the strategy's ``teardown``. The non-finite check folds ``isfinite(loss)``
into a device-side flag (no host sync), read every ``check_every_n_steps`` steps, at epoch end and before
each save (``last.ckpt`` never holds weights from after the first NaN); on CUDA the loss checks feed that
flag rather than a device-side assert, which would kill the context. Signals take Lightning's SIGTERM path
(the first Ctrl-C too, so no half-updated state); a second one, or the stall watchdog, raises
``KeyboardInterrupt`` at once, without a checkpoint.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
import time
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor
from torch.optim import Optimizer

from ocr.checkpoints.saving import RunCheckpoint, estimate_checkpoint_bytes
from ocr.machine.checks import CheckResult, fast_checks, format_table, rate_missing_gpu, worst_status
from ocr.machine.environment import collect_environment, driver_version, free_bytes
from ocr.machine.sync import sync_allowed
from ocr.models.loss.checks import LossInputError
from ocr.run.crash import crash_dir, failed_cpu_batch, write_crash_bundle
from ocr.run.faults import CudaFault, FaultExit, FaultSite, find_cuda_fault, headline, is_cuda_fault
from ocr.run.folder import clear_sentinels, failure_written, record_failure, write_interrupted, write_success
from ocr.run.peers import (
    ACK_WAIT_S,
    announce_fault,
    default_store,
    peer_fault,
    peer_watch,
    stop_for_peer,
    wait_for_acks,
)
from ocr.run.watchdog import StallWatchdog
from ocr.utils.commands import resume_command
from ocr.utils.config_types import PositiveInt
from ocr.utils.errors import NonFiniteLossError, UsageError, find_usage_error
from ocr.utils.io import atomic_write_json, format_mib

__all__ = [
    "EXIT_CODES",
    "Guard",
    "Interrupts",
    "NonFiniteCheck",
    "PreflightError",
    "check_checkpoint_space",
    "is_interruption",
]

log = logging.getLogger(__name__)

SIGNAL_CONNECTOR_LOGGER = "lightning.pytorch.trainer.connectors.signal_connector"
# As a shell reports a process a signal ended: 128 + the signal number.
EXIT_CODES = {"SIGINT": 128 + signal.SIGINT, "SIGTERM": 128 + signal.SIGTERM}


def is_interruption(exception: BaseException, trainer: L.Trainer) -> bool:
    """True for a stop by a signal (Ctrl-C or SIGTERM), which is not a failure; the interrupt of the
    trainer's stall watchdog (``exit_on_stall``) is one."""
    return isinstance(exception, KeyboardInterrupt | SIGTERMException) and not _stalled(trainer)


def _stalled(trainer: L.Trainer) -> bool:
    callbacks = trainer.callbacks  # type: ignore[attr-defined]  # set by Lightning's connector
    return any(isinstance(c, StallWatchdog) and c.interrupted_for_stall for c in callbacks)


class Interrupts:
    """The signal handlers of a fit; on a stop by a signal, saves ``last.ckpt`` (through the run's
    ``RunCheckpoint``) and writes and logs ``.INTERRUPTED`` with the resume command."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.ctrl_c = False
        self.second_signal: str | None = None  # the signal that stopped the run at once
        self._previous_handler: Any = None  # SIGINT's handler before fit, restored after it
        self._previous_sigterm: Any = None  # Lightning's SIGTERM handler, called by ours the first time
        self._trainer: L.Trainer | None = None

    def install(self, trainer: L.Trainer) -> None:
        """At train start, after Lightning registered its handlers; main thread only; a SIGINT ignored on
        purpose (a script's background job) stays ignored."""
        self._trainer = trainer
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            self._previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
        if main and callable(signal.getsignal(signal.SIGTERM)):
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)

    def restore(self) -> None:
        """The handlers of before the fit."""
        self._trainer = None
        if self._previous_handler is not None:
            signal.signal(signal.SIGINT, self._previous_handler)
            self._previous_handler = None
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None

    def _stopping(self) -> bool:
        return self.ctrl_c or (self._trainer is not None and self._trainer.received_sigterm)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        sigterm_handler = self._previous_sigterm or signal.getsignal(signal.SIGTERM)  # Lightning's
        stalled = self._trainer is not None and _stalled(self._trainer)
        if self._stopping() or stalled or not callable(sigterm_handler):
            self.second_signal = "Ctrl-C"
            raise KeyboardInterrupt
        self.ctrl_c = True
        log.warning(
            "Ctrl-C: stopping after the current step and saving last.ckpt (Ctrl-C again stops at once, "
            "without saving)"
        )
        # Lightning's handler logs "Received SIGTERM", which is not what the user sent.
        connector_log = logging.getLogger(SIGNAL_CONNECTOR_LOGGER)
        disabled, connector_log.disabled = connector_log.disabled, True
        try:
            sigterm_handler(signal.SIGTERM, frame)
        finally:
            connector_log.disabled = disabled

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """A first SIGTERM is Lightning's graceful stop; a second one stops at once (as Ctrl-C does)."""
        if self._stopping():
            self.second_signal = "SIGTERM"
            log.warning("SIGTERM again: stopping at once, without saving")
            raise KeyboardInterrupt
        log.warning(
            "SIGTERM: stopping after the current step and saving last.ckpt (SIGTERM or Ctrl-C again stops "
            "at once, without saving)"
        )
        self._previous_sigterm(signum, frame)

    def record(self, trainer: L.Trainer, exception: BaseException) -> None:
        """For a stop by a signal: ``last.ckpt`` when the state is whole, ``.INTERRUPTED`` on rank 0."""
        if self.second_signal == "SIGTERM":
            cause = "SIGTERM"
        else:
            cause = "Ctrl-C" if self.ctrl_c or isinstance(exception, KeyboardInterrupt) else "SIGTERM"
        saved = None
        checkpoint = trainer.checkpoint_callback
        # Only a stop Lightning raised between steps leaves a whole state to save.
        if isinstance(exception, SIGTERMException) and isinstance(checkpoint, RunCheckpoint):
            saved = checkpoint.save_on_interrupt(trainer)
        if not trainer.is_global_zero:
            return
        during = " during a validation" if trainer.validating or trainer.sanity_checking else ""
        summary = f"interrupted by {cause} at step {trainer.global_step}{during}; "
        if saved:
            summary += f"{saved} holds that step. Resume: {resume_command(self.run_dir)}"
        elif isinstance(checkpoint, RunCheckpoint) and any(Path(str(checkpoint.dirpath)).glob("*.ckpt")):
            summary += f"no checkpoint written now. Resume from the latest: {resume_command(self.run_dir)}"
        else:
            summary += (
                "no checkpoint yet, nothing to resume: delete the folder to start again there, or start "
                "again in another"
            )
        write_interrupted(self.run_dir, summary, EXIT_CODES["SIGINT" if cause == "Ctrl-C" else "SIGTERM"])
        log.warning("Run %s", summary)


NO_BAD_STEP = torch.iinfo(torch.long).max  # stands for "all finite" in the cross-rank minimum


class NonFiniteCheck:
    """Raises :class:`NonFiniteLossError` when the loss (or, ``check_grads``, the gradient norm; not under
    fp16, whose scaler skips inf steps) is NaN/Inf; ``check_every_n_steps``: 1: exact, a sync each step."""

    def __init__(self, *, check_every_n_steps: int, check_grads: bool, crash: Path) -> None:
        self.check_every_n_steps = check_every_n_steps
        self.check_grads = check_grads
        self._step: Tensor | None = None  # device-side global step of the batch in flight
        self._first_bad: dict[str, Tensor] = {}  # what -> device scalar, -1 while all finite
        self._host_step = 0
        self.crash = crash
        self._trainer: L.Trainer | None = None

    def batch_started(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._trainer = trainer
        self._host_step = trainer.global_step
        if self._step is None:
            # One host->device copy at the first step; afterwards the counter advances on the device.
            self._step = torch.tensor(trainer.global_step, device=pl_module.device, dtype=torch.long)

    def _record(self, what: str, finite: Tensor) -> None:
        assert self._step is not None
        first = self._first_bad.get(what)
        if first is None:
            first = torch.full_like(self._step, -1)
        self._first_bad[what] = torch.where(~finite & (first < 0), self._step, first)

    def before_backward(self, loss: Tensor) -> None:
        if self._step is not None:
            self._record("loss", torch.isfinite(loss.detach()).all())

    def before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._step is None:
            return
        if self.check_grads and not str(trainer.precision).startswith("16"):
            grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
            if grads:
                total = torch.nn.utils.get_total_norm(grads, error_if_nonfinite=False)
                self._record("gradient norm", torch.isfinite(total))
        # Advance once per optimizer step (not per batch), so steps match trainer.global_step under
        # gradient accumulation.
        self._step += 1

    def batch_ended(self) -> None:
        if (self._host_step + 1) % self.check_every_n_steps == 0:
            self.check()

    def fit_ended(self) -> None:
        self._step = None
        self._first_bad = {}

    def check(self) -> None:
        """Read the device flags (one sync); a NaN/Inf since the last check, on any rank, writes
        ``nonfinite.json`` and raises NonFiniteLossError."""
        with sync_allowed():  # the documented sync every check_every_n_steps
            bad = self._first_bad_steps(across_ranks=True)
        if bad:
            step, what = bad[0]
            self._write_record(bad, self._host_step)
            raise NonFiniteLossError(step=step, what=what, checked_at=self._host_step)

    def _first_bad_steps(self, across_ranks: bool) -> list[tuple[int, str]]:
        """``(first bad step, tensor name)`` pairs, earliest first (one sync); ``across_ranks`` takes the
        minimum over DDP ranks: every rank must call it at the same step."""
        if not self._first_bad:
            return []
        names = sorted(self._first_bad)
        firsts = torch.stack([self._first_bad[name] for name in names])
        trainer = self._trainer
        if across_ranks and trainer is not None and trainer.world_size > 1:
            firsts = torch.where(firsts < 0, torch.full_like(firsts, NO_BAD_STEP), firsts)
            # torch's stub types ReduceOp.MIN as RedOpType, which Strategy.reduce's annotation leaves out.
            minimum = torch.distributed.ReduceOp.MIN
            firsts = trainer.strategy.reduce(firsts, reduce_op=minimum)  # type: ignore[arg-type]
            firsts = torch.where(firsts == NO_BAD_STEP, torch.full_like(firsts, -1), firsts)
        pairs = zip(firsts.tolist(), names, strict=True)
        bad = [(int(step), name) for step, name in pairs if step >= 0]
        return sorted(bad, key=lambda pair: (pair[0], pair[1] != "loss"))  # the loss before its gradients

    def _write_record(self, bad: list[tuple[int, str]], checked_at: int | None) -> Path:
        path = self.crash / "nonfinite.json"
        record = {
            "first_bad": [{"step": step, "what": what} for step, what in bad],
            "detected_at_step": checked_at,
            "rank": self._trainer.global_rank if self._trainer is not None else 0,
            "node": self._trainer.node_rank if self._trainer is not None else 0,
        }
        return atomic_write_json(path, record)

    def on_exception(self, exception: BaseException) -> None:
        # Another error (e.g. an injected fault a step later) may hide an earlier NaN: record it beside
        # the crash bundle. Never touch the device after a CUDA fault, and no collective here: the other
        # ranks may not be at this point.
        if isinstance(exception, NonFiniteLossError) or is_cuda_fault(exception):
            return
        try:
            bad = self._first_bad_steps(across_ranks=False)
        except RuntimeError:
            return
        if bad:
            path = self._write_record(bad, None)
            log.error(
                "Non-finite %s first seen at global step %d, before this exception (%s)",
                bad[0][1],
                bad[0][0],
                path,
            )


class PreflightError(UsageError, RuntimeError):
    """A preflight check failed and ``fail_on_preflight`` is set (or there is no space for a checkpoint)."""


def check_checkpoint_space(checkpoint_dir: Path, checkpoint_bytes: int) -> CheckResult:
    """Free space where checkpoints go against one checkpoint of the run's model: fails below one,
    warns below three (the best, ``last.ckpt`` and the one being written)."""
    free, folder = free_bytes(checkpoint_dir)
    detail = (
        f"{format_mib(free)} free in {folder}; one checkpoint of this model needs about "
        f"{format_mib(checkpoint_bytes)}"
    )
    fix = "free some space, or write the run elsewhere with hydra.run.dir=<folder on a larger disk>"
    if free < checkpoint_bytes:
        return CheckResult("disk", "fail", detail, fix)
    if free < 3 * checkpoint_bytes:
        return CheckResult("disk", "warn", detail + " (3 for best, last and one being written)", fix)
    return CheckResult("disk", "ok", detail)


class Guard(Callback):
    """Watches the run (preflight, non-finite loss, signals, CUDA faults) and records how it ended in
    ``run_dir``; ``fail_on_preflight`` refuses to train on a failed preflight check (low disk: always)."""

    def __init__(
        self, *, run_dir: str, check_every_n_steps: PositiveInt, check_grads: bool, fail_on_preflight: bool
    ) -> None:
        self.run_dir = Path(run_dir)
        self.fail_on_preflight = fail_on_preflight
        self.training = True
        self.nonfinite = NonFiniteCheck(
            check_every_n_steps=check_every_n_steps, check_grads=check_grads, crash=self.run_dir / "crash"
        )
        self.interrupts = Interrupts(self.run_dir)
        self.preflight: list[CheckResult] = []
        self._environment: dict[str, Any] | None = None  # taken up front: a CUDA fault ends device queries
        self._batch_idx: int | None = None
        self._watch: Any | None = None
        self._ending: FaultExit | None = None
        self._detected_s = 0.0

    @classmethod
    def for_inference(cls, run_dir: str) -> Guard:
        """Test and predict: a CUDA fault ends the process as in training; the rest is the runner's."""
        guard = cls(run_dir=run_dir, check_every_n_steps=1, check_grads=False, fail_on_preflight=False)
        guard.training = False
        return guard

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        store = default_store() if trainer.world_size > 1 else None
        if store is not None:
            self._watch = self._watch or peer_watch(store, trainer.global_rank)
            self._watch.start()
        if not self.training:
            return
        self.nonfinite.crash = crash_dir(self.run_dir, trainer.global_rank, trainer.node_rank)
        if self._environment is None:
            self._environment = collect_environment(query_cuda=True)
        if stage == "fit" and not self.preflight and trainer.is_global_zero:
            self._run_preflight(trainer, pl_module)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._watch is not None:
            self._watch.stop()
        self.interrupts.restore()

    def _run_preflight(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The fast doctor checks and the space for a checkpoint, logged and saved as ``preflight.json``."""
        checkpoint_dir = Path(getattr(trainer.checkpoint_callback, "dirpath", None) or self.run_dir)
        disk = check_checkpoint_space(checkpoint_dir, estimate_checkpoint_bytes(pl_module))
        checks = [r for r in fast_checks(self.run_dir) if r.name != "disk"] + [disk]
        self.preflight = rate_missing_gpu(checks, driver_version())
        verdict = worst_status(self.preflight)
        table = format_table(self.preflight)
        if verdict == "ok":
            log.info("Preflight checks (full report: python -m ocr.doctor):\n%s", table)
        else:
            log.warning("Preflight checks found problems:\n%s", table)
        if disk.status == "fail":  # whatever fail_on_preflight says: the first checkpoint would fail
            raise PreflightError(f"Not enough disk space for a checkpoint: {disk.detail}. Fix: {disk.fix}")
        report = self.run_dir / "preflight.json"
        atomic_write_json(report, {"verdict": verdict, "checks": [r.to_dict() for r in self.preflight]})
        if verdict == "fail" and self.fail_on_preflight:
            failed = [r.name for r in self.preflight if r.status == "fail"]
            raise PreflightError(
                f"preflight checks failed: {failed}; see {report} <callbacks.guard.fail_on_preflight=true>"
            )

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A resumed run directory holds its earlier attempt's status: from here on it is this attempt's.
        if self.training and trainer.is_global_zero:
            clear_sentinels(self.run_dir)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.training:
            self.interrupts.install(trainer)

    def _batch_started(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._batch_idx = batch_idx  # host-side: which batch was in flight, for the explanation

    on_validation_batch_start = on_test_batch_start = on_predict_batch_start = _batch_started

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch_idx = batch_idx
        if self.training:
            self.nonfinite.batch_started(trainer, pl_module)

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: Tensor) -> None:
        if self.training:
            self.nonfinite.before_backward(loss)

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Optimizer
    ) -> None:
        if self.training:
            self.nonfinite.before_optimizer_step(trainer, pl_module)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.training:
            self.nonfinite.batch_ended()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.training:
            self.nonfinite.check()

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Called on every rank (Lightning requires all ranks to save), so the cross-rank minimum of the
        # check is reached by all of them at the same step; last.ckpt never holds weights after a NaN.
        if self.training:
            self.nonfinite.check()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.training:
            return
        self.nonfinite.fit_ended()
        if trainer.is_global_zero and not trainer.interrupted:
            summary = f"fit finished at epoch {trainer.current_epoch}, step {trainer.global_step}"
            write_success(self.run_dir, summary)
            _tag_wandb(trainer, "succeeded")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.training and trainer.is_global_zero and not (self.run_dir / ".FAILURE").exists():
            write_success(self.run_dir, "test finished")

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if self._ending is not None:
            return
        if self._watch is not None:
            self._watch.stop()
        store = default_store() if trainer.world_size > 1 else None
        peer = peer_fault(store, trainer.global_rank) if store is not None else None
        if peer is not None:
            stop_for_peer(store, peer, trainer.global_rank)
        fault = find_cuda_fault(exception)
        if fault is not None:
            self._end_for_fault(trainer, pl_module, exception, fault, store)
        if not self.training:
            return
        if is_interruption(exception, trainer):
            self.interrupts.record(trainer, exception)
        else:
            # Not for an error about what the run was given (its message names the key or file; nothing to
            # replay), except the loss's: its batch and weights are what replay starts from.
            usage = find_usage_error(exception)
            if usage is None or isinstance(usage, LossInputError | NonFiniteLossError):
                crash = self._write_crash_bundle(trainer, pl_module, exception, self._environment)
                if crash is not None:
                    log.error(
                        "Crash bundle written to %s; replay it with: scripts/debug_cuda.sh replay %s",
                        crash,
                        crash,
                    )
            self.nonfinite.on_exception(exception)
            if trainer.is_global_zero:
                if not failure_written(self.run_dir):
                    record_failure(self.run_dir, exception)
                _tag_wandb(trainer, "failed")
        self.interrupts.restore()  # Lightning calls no callback's teardown after an exception

    def _write_crash_bundle(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        exception: BaseException,
        environment: dict[str, Any] | None,
    ) -> Path | None:
        """The crash bundle, or None when writing it failed (the original exception matters more)."""
        try:
            return write_crash_bundle(
                self.run_dir,
                trainer,
                pl_module,
                exception,
                environment,
                batch=failed_cpu_batch(trainer, exception),
                batch_idx=self._batch_idx,
            )
        except Exception:
            folder = crash_dir(self.run_dir, trainer.global_rank, trainer.node_rank)
            log.exception("Could not write the crash bundle into %s", folder)
            return None

    def _end_for_fault(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        exception: BaseException,
        fault: CudaFault,
        store: Any | None,
    ) -> None:
        self._detected_s = time.time()
        site = self._site(trainer)
        crash = crash_dir(self.run_dir, trainer.global_rank, trainer.node_rank)
        trainer_fn = trainer.state.fn.value if trainer.state.fn is not None else None
        self._ending = FaultExit.for_fault(
            fault, site, run_dir=self.run_dir, crash=crash, trainer_fn=trainer_fn
        ).arm()
        log.error(headline(fault, site, self._ending.code))
        record = self._fault_record(fault, site, crash)
        try:
            atomic_write_json(crash / "fault.json", record)
        except OSError as exc:
            log.error("Could not write %s: %s", crash / "fault.json", exc)
        if store is not None:
            announce_fault(store, record)
        if not failure_written(self.run_dir):
            record_failure(self.run_dir, fault.exception)
        # Lightning calls strategy.teardown() once the remaining on_exception hooks have run: this
        # instance's teardown becomes the exit (the class's, which touches the device, never runs).
        trainer.strategy.teardown = functools.partial(  # type: ignore[method-assign]
            self._finish, trainer, pl_module, exception
        )

    def _finish(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> NoReturn:
        """Instead of Lightning's teardown: the crash bundle if none was written, then the exit."""
        assert self._ending is not None
        state = crash_dir(self.run_dir, trainer.global_rank, trainer.node_rank) / "state.json"
        if not (state.is_file() and state.stat().st_mtime >= self._detected_s - 1):
            self._write_crash_bundle(trainer, pl_module, exception, environment=None)
        store = default_store() if trainer.world_size > 1 else None
        if store is not None:
            wait_for_acks(store, trainer.world_size - 1, ACK_WAIT_S)
        self._ending.finish()

    def _site(self, trainer: L.Trainer) -> FaultSite:
        batch = getattr(trainer.datamodule, "last_cpu_batch", None)  # type: ignore[attr-defined]
        ids = batch.get("image_id") if isinstance(batch, dict) else None
        return FaultSite(
            stage=trainer.state.stage.value if trainer.state.stage is not None else None,
            global_step=trainer.global_step,
            epoch=trainer.current_epoch,
            batch_idx=self._batch_idx,
            rank=trainer.global_rank,
            world_size=trainer.world_size,
            image_ids=tuple(str(i) for i in ids or ()),
        )

    def _fault_record(self, fault: CudaFault, site: FaultSite, crash: Path) -> dict[str, Any]:
        """``fault.json``: what the proof and the other ranks read (host-side facts only)."""
        kind = type(fault.exception)
        return {
            **asdict(site),
            "kind": fault.kind,
            "asynchronous": fault.asynchronous,
            "summary": fault.summary,
            "exception_type": f"{kind.__module__}.{kind.__qualname__}",
            "where": site.describe(),
            "image_ids": list(site.image_ids),
            "detected_unix_s": self._detected_s,
            "exit_code": self._ending.code if self._ending is not None else None,
            "failure": str(self.run_dir / ".FAILURE"),
            "crash": str(crash),
        }


def _tag_wandb(trainer: L.Trainer, tag: str) -> None:
    for logger in trainer.loggers:
        run = logger.experiment if isinstance(logger, WandbLogger) else None
        if run is not None and hasattr(run, "tags"):
            run.tags = tuple(run.tags or ()) + (tag,)
