"""``CudaFaultExit``: a CUDA fault in training, validation, test or predict ends the process within seconds.

Listed first among the callbacks (``configs/callbacks/triage.yaml``; the inference trainer of test and
predict gets it too), so its ``on_exception`` runs before every other hook. On a CUDA fault
(``ocr.utils.cuda_fault``) it logs the headline, arms the exit deadline, writes ``fault.json`` into the
rank's crash folder, tells the other DDP ranks and writes ``.FAILURE`` (on any rank). The other
``on_exception`` hooks then run as usual (crash bundle, run status, curves). Next Lightning would tear
down: move the optimizer and the model to the CPU and shut the DataLoader workers down, which fails or
hangs on the dead context. Instead this callback takes the strategy's ``teardown``: it writes the crash
bundle where no callback did (test and predict runs), waits briefly for the other ranks to acknowledge,
and ends the process (``ocr.utils.fault_exit``) with the first CUDA error's traceback and the explanation
last. Under DDP it also watches for another rank's fault (``ocr.utils.peer_fault``).
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import Any, NoReturn

import lightning as L
from lightning.pytorch.callbacks import Callback

from ocr.lightning_modules.callbacks.crash_bundle import failed_cpu_batch, write_crash_bundle
from ocr.lightning_modules.callbacks.rundir import crash_dir
from ocr.utils.cuda_fault import CudaFault, FaultSite, find_cuda_fault, headline
from ocr.utils.fault_exit import FaultExit
from ocr.utils.io import atomic_write_json
from ocr.utils.peer_fault import (
    ACK_WAIT_S,
    PeerWatch,
    announce_fault,
    default_store,
    peer_fault,
    stop_for_peer,
    wait_for_acks,
)
from ocr.utils.sentinels import failure_written, write_failure

__all__ = ["CudaFaultExit"]

log = logging.getLogger(__name__)


class CudaFaultExit(Callback):
    """Ends the process on a CUDA fault, before Lightning's teardown touches the dead context.

    Args:
        run_dir: the run directory (``.FAILURE``, ``crash/``).
    """

    def __init__(self, *, run_dir: str) -> None:
        self.run_dir = Path(run_dir)
        self._batch_idx: int | None = None
        self._watch: PeerWatch | None = None
        self._ending: FaultExit | None = None
        self._detected_s = 0.0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        store = default_store() if trainer.world_size > 1 else None
        if store is not None:
            self._watch = self._watch or PeerWatch(store, trainer.global_rank)
            self._watch.start()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._watch is not None:
            self._watch.stop()

    def _batch_started(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._batch_idx = batch_idx  # host-side: which batch was in flight, for the explanation

    on_train_batch_start = on_validation_batch_start = _batch_started
    on_test_batch_start = on_predict_batch_start = _batch_started

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if self._ending is not None:
            return
        if self._watch is not None:
            self._watch.stop()
        store = default_store() if trainer.world_size > 1 else None
        peer = peer_fault(store, trainer.global_rank) if store is not None else None
        if peer is not None:  # this rank's error follows from another rank's fault
            stop_for_peer(store, peer, trainer.global_rank)
        fault = find_cuda_fault(exception)
        if fault is None:
            return
        self._detected_s = time.time()
        site = self._site(trainer, pl_module)
        crash = crash_dir(self.run_dir, trainer.global_rank, trainer.node_rank)
        trainer_fn = trainer.state.fn.value if trainer.state.fn is not None else None
        self._ending = FaultExit.for_fault(
            fault, site, run_dir=self.run_dir, crash=crash, trainer_fn=trainer_fn
        ).arm()
        log.error(headline(fault, site, self._ending.code))
        record = self._record(fault, site, crash)
        try:
            atomic_write_json(crash / "fault.json", record)
        except OSError as exc:
            log.error("Could not write %s: %s", crash / "fault.json", exc)
        if store is not None:
            announce_fault(store, record)
        if not failure_written(self.run_dir):
            try:
                write_failure(self.run_dir, fault.exception)
            except OSError as exc:
                log.error("Could not write %s: %s", self.run_dir / ".FAILURE", exc)
        # Lightning calls strategy.teardown() once the remaining on_exception hooks have run: this
        # instance's teardown becomes the exit (the class's, which touches the device, never runs).
        trainer.strategy.teardown = functools.partial(  # type: ignore[method-assign]
            self._finish, trainer, pl_module, exception
        )

    def _finish(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> NoReturn:
        """Instead of Lightning's teardown: the crash bundle if no callback wrote one, then the exit."""
        assert self._ending is not None
        state = crash_dir(self.run_dir, trainer.global_rank, trainer.node_rank) / "state.json"
        if not (state.is_file() and state.stat().st_mtime >= self._detected_s - 1):
            try:
                write_crash_bundle(
                    self.run_dir,
                    trainer,
                    pl_module,
                    exception,
                    environment=None,
                    batch=failed_cpu_batch(trainer, exception),
                    batch_idx=self._batch_idx,
                )
            except Exception:  # the exit matters more than a complete bundle
                log.exception("Could not write the crash bundle into %s", state.parent)
        store = default_store() if trainer.world_size > 1 else None
        if store is not None:
            wait_for_acks(store, trainer.world_size - 1, ACK_WAIT_S)
        self._ending.finish()

    def _site(self, trainer: L.Trainer, pl_module: L.LightningModule) -> FaultSite:
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

    def _record(self, fault: CudaFault, site: FaultSite, crash: Path) -> dict[str, Any]:
        """``fault.json``: what the proof and the other ranks read (host-side facts only)."""
        kind = type(fault.exception)
        return {
            "rank": site.rank,
            "world_size": site.world_size,
            "kind": fault.kind,
            "asynchronous": fault.asynchronous,
            "summary": fault.summary,
            "exception_type": f"{kind.__module__}.{kind.__qualname__}",
            "where": site.describe(),
            "stage": site.stage,
            "global_step": site.global_step,
            "epoch": site.epoch,
            "batch_idx": site.batch_idx,
            "image_ids": list(site.image_ids),
            "detected_unix_s": self._detected_s,
            "exit_code": self._ending.code if self._ending is not None else None,
            "failure": str(self.run_dir / ".FAILURE"),
            "crash": str(crash),
        }
