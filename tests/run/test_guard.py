"""The guard in a real Trainer on the CPU: a CUDA fault in training, validation, test or predict ends
the process (here: a stand-in for ``os._exit``) before Lightning's teardown, with our lines first and last."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import Strategy
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from ocr.debug.inject import CUDA_FAULT_MESSAGE
from ocr.run import faults
from ocr.run.entry import instantiate_all
from ocr.run.faults import EXIT_CUDA_FAULT
from ocr.run.guard import Guard
from ocr.run.watchdog import StallWatchdog
from tests.helpers.exits import Exited, fake_exits
from tests.helpers.triage_tiny import TinyData, TinyModule, quiet_cpu_trainer, tiny_loader


class FaultyModule(TinyModule):
    """Raises the error a device-side assert raises in the step of ``stage``, at its second batch."""

    def __init__(self, stage: str) -> None:
        super().__init__()
        self.stage = stage

    def _maybe_fault(self, stage: str, batch_idx: int) -> None:
        if stage == self.stage and batch_idx == 1:
            raise torch.AcceleratorError(CUDA_FAULT_MESSAGE.format(step=self.global_step))

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        self._maybe_fault("train", batch_idx)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._maybe_fault("validate", batch_idx)

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._maybe_fault("test", batch_idx)

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        self._maybe_fault("predict", batch_idx)
        return self.net(batch["images"])


class AllStagesData(TinyData):
    """:func:`tiny_loader` for every stage, the last CPU batch kept as ``ReceiptDataModule`` keeps it."""

    def val_dataloader(self) -> DataLoader:
        return tiny_loader()

    def test_dataloader(self) -> DataLoader:
        return tiny_loader()

    def predict_dataloader(self) -> DataLoader:
        return tiny_loader()


def _run(stage: str, root: Path, callbacks: list[Callback]) -> None:
    trainer = quiet_cpu_trainer(root, callbacks, max_steps=4, limit_val_batches=2, val_check_interval=2)
    module = FaultyModule(stage)
    if stage in ("train", "validate"):
        trainer.fit(module, datamodule=AllStagesData())
    elif stage == "test":
        trainer.test(module, datamodule=AllStagesData())
    else:
        trainer.predict(module, datamodule=AllStagesData())


@pytest.mark.parametrize("stage", ["train", "validate", "test", "predict"])
def test_a_cuda_fault_ends_the_process_before_the_teardown(
    stage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    exits = fake_exits(monkeypatch)
    teardowns: list[str] = []
    monkeypatch.setattr(Strategy, "teardown", lambda self: teardowns.append("teardown"))
    # As configured for training: the fault exit first; test and predict runs get it alone.
    callbacks: list[Callback] = [Guard.for_inference(str(tmp_path))]
    if stage in ("train", "validate"):
        callbacks = [
            Guard(run_dir=str(tmp_path), check_every_n_steps=50, check_grads=True, fail_on_preflight=False)
        ]
    with caplog.at_level("INFO"), pytest.raises(Exited) as exited:
        _run(stage, tmp_path, callbacks)
    assert exited.value.code == exits.codes[0] == EXIT_CUDA_FAULT
    assert teardowns == []  # Lightning's teardown never ran on the "dead context"
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors[0].startswith("CUDA FAULT (device-side assert) in ")
    assert errors[-1] == f"CUDA FAULT: ending the process with exit code {EXIT_CUDA_FAULT}."
    assert "AcceleratorError" in (tmp_path / ".FAILURE").read_text()
    fault = json.loads((tmp_path / "crash" / "fault.json").read_text())
    assert fault["stage"] == stage and fault["batch_idx"] == 1 and fault["kind"] == "device-side assert"
    state = json.loads((tmp_path / "crash" / "state.json").read_text())  # written by us for test/predict
    assert state["cuda_fault"] is True and state["batch_file"] == "batch.pt"
    explanation = errors[-2]
    assert "batch 1" in explanation and "next:" in explanation
    assert ("debug_cuda.sh replay" in explanation) == (stage != "predict")  # not pytest's own argv


class BlocksOnTheDevice(Callback):
    """A callback that reads the device after the fault, which blocks on a dead context."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self.release.wait(30)


def test_a_hook_blocked_on_the_device_cannot_hold_the_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exits = fake_exits(monkeypatch)
    monkeypatch.setattr(faults, "DEADLINE_S", 0.5)
    blocked = BlocksOnTheDevice()
    exits_then_release = exits.event

    def watch() -> None:  # the stand-in exit cannot end the process: release the blocked hook for it
        exits_then_release.wait(30)
        blocked.release.set()

    threading.Thread(target=watch, daemon=True).start()
    with pytest.raises(Exited):  # after the release the teardown exit runs too: the first exit counts
        _run("train", tmp_path, [Guard.for_inference(str(tmp_path)), blocked])
    assert exits.codes[0] == EXIT_CUDA_FAULT and len(exits.codes) == 2
    assert (tmp_path / ".FAILURE").is_file()


def test_the_default_training_run_gets_the_guard_and_the_watchdog_from_the_run_shell(
    compose_cfg: Callable[[str, list[str], Path], DictConfig], tmp_path: Path
) -> None:
    """The seven triage and status callbacks became two; the guard is first: its on_exception runs first."""
    callbacks = instantiate_all(compose_cfg("train", [], tmp_path).callbacks)
    try:
        shell = [type(c).__name__ for c in callbacks if type(c).__module__.startswith("ocr.run.")]
        assert shell == ["Guard", "StallWatchdog"] and isinstance(callbacks[0], Guard)
    finally:
        for callback in callbacks:
            if isinstance(callback, StallWatchdog):
                callback.stop()
