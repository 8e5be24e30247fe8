"""The guard: one callback that watches a run and owns what happens, in which order, when it raises.

Listed first (``configs/callbacks/triage.yaml``), its ``on_exception`` runs before every other hook: a
peer's CUDA fault stops this rank too; a CUDA fault arms the exit, writes ``fault.json``, tells the other
ranks and writes ``.FAILURE``; then the crash bundle, a non-finite loss seen earlier, a signal's
``last.ckpt`` and ``.INTERRUPTED``, the run status. After a CUDA fault Lightning's teardown would touch the
dead context, so the guard takes the strategy's ``teardown``. The non-finite check
(``ocr.run.nonfinite``) and the signal handlers (``ocr.run.interrupts``) are its parts.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger
from torch import Tensor
from torch.optim import Optimizer

from ocr.checkpoints.saving import estimate_checkpoint_bytes
from ocr.machine.checks import CheckResult, fast_checks, format_table, rate_missing_gpu, worst_status
from ocr.machine.environment import collect_environment, driver_version, free_bytes
from ocr.models.loss.checks import LossInputError
from ocr.run.crash import crash_dir, failed_cpu_batch, write_crash_bundle
from ocr.run.faults import CudaFault, FaultExit, FaultSite, find_cuda_fault, headline
from ocr.run.folder import clear_sentinels, failure_written, record_failure, write_success
from ocr.run.interrupts import Interrupts, is_interruption
from ocr.run.nonfinite import NonFiniteCheck
from ocr.run.peers import (
    ACK_WAIT_S,
    announce_fault,
    default_store,
    peer_fault,
    peer_watch,
    stop_for_peer,
    wait_for_acks,
)
from ocr.utils.config_types import PositiveInt
from ocr.utils.errors import NonFiniteLossError, UsageError, find_usage_error
from ocr.utils.io import atomic_write_json, format_mib

__all__ = ["Guard", "PreflightError", "check_checkpoint_space"]

log = logging.getLogger(__name__)


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
