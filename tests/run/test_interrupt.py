"""Ctrl-C and SIGTERM mid-training: last.ckpt at the current step, .INTERRUPTED with the resume command."""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from ocr.debug.inject import FaultInjector
from ocr.run.folder import interrupted_exit_code
from ocr.run.guard import Guard
from ocr.run.watchdog import StallWatchdog
from tests.helpers.triage_tiny import TinyModule, fit_tiny, quiet_cpu_trainer, run_checkpoint, tiny_loader

STEPS_PER_EPOCH = 4  # 8 images, batch 2


@pytest.fixture(autouse=True)
def ctrl_c_as_on_a_terminal() -> Iterator[None]:
    """Python's Ctrl-C handler, also when pytest runs in the background (SIGINT ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


class _Signalled(TinyModule):
    """Raises ``signals`` in this process during the training step at ``step`` (or, with
    ``in_validation``, in the second validation step after it); records the steps and validation batches."""

    def __init__(self, signals: tuple[int, ...] = (), step: int = -1, in_validation: bool = False) -> None:
        super().__init__()
        self.signals, self.step, self.in_validation = signals, step, in_validation
        self.steps: list[int] = []
        self.val_batches = 0

    def _raise(self) -> None:
        for signum in self.signals:
            signal.raise_signal(signum)
        self.signals = ()

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        self.steps.append(self.global_step)
        if self.global_step == self.step and not self.in_validation:
            self._raise()
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.val_batches += 1
        self.log("val/hmean", float(self.global_step) / 100)
        if self.global_step == self.step and self.in_validation and batch_idx == 1:
            self._raise()


def _fit(run: Path, module: TinyModule, ckpt_path: Path | None = None) -> L.Trainer:
    callbacks = [
        Guard(run_dir=str(run), check_every_n_steps=50, check_grads=False, fail_on_preflight=False),
        run_checkpoint(run / "checkpoints"),
    ]
    trainer = quiet_cpu_trainer(run, callbacks, max_steps=3 * STEPS_PER_EPOCH)
    trainer.fit(module, tiny_loader(), tiny_loader(), ckpt_path=ckpt_path, weights_only=False)
    return trainer


def _saved_step(path: Path) -> int:
    return int(torch.load(path, map_location="cpu", weights_only=False)["global_step"])


@pytest.mark.parametrize(
    ("signum", "cause", "exit_code"), [(signal.SIGTERM, "SIGTERM", 143), (signal.SIGINT, "Ctrl-C", 130)]
)
def test_a_signal_mid_training_saves_the_current_step_and_marks_the_run_interrupted(
    tmp_path: Path, signum: int, cause: str, exit_code: int
) -> None:
    # Signalled during step 6 (the second epoch; validated at step 4): the step ends, then the run stops.
    with pytest.raises(SystemExit):
        _fit(tmp_path, _Signalled((signum,), step=6))
    assert _saved_step(tmp_path / "checkpoints" / "last.ckpt") == 7
    status = (tmp_path / ".INTERRUPTED").read_text()
    assert (
        f"interrupted by {cause} at step 7; {tmp_path / 'checkpoints' / 'last.ckpt'} holds that step"
        in status
    )
    assert f"Resume: uv run runners/train.py resume={tmp_path}" in status
    assert not (tmp_path / ".FAILURE").exists() and interrupted_exit_code(tmp_path) == exit_code
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored after fit
    resumed = _Signalled()
    trainer = _fit(tmp_path, resumed, ckpt_path=tmp_path / "checkpoints" / "last.ckpt")
    assert resumed.steps[0] == 7 and trainer.global_step == 3 * STEPS_PER_EPOCH  # no step trained twice


def test_a_second_ctrl_c_stops_at_once_without_saving(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        _fit(tmp_path, _Signalled((signal.SIGINT, signal.SIGINT), step=6))
    assert _saved_step(tmp_path / "checkpoints" / "last.ckpt") == 4  # the validation's, not a mid-step state
    status = (tmp_path / ".INTERRUPTED").read_text()
    assert "interrupted by Ctrl-C at step 6; no checkpoint written now. Resume from the latest" in status
    assert not (tmp_path / ".FAILURE").exists() and interrupted_exit_code(tmp_path) == 130


def test_a_second_sigterm_stops_at_once_without_saving(tmp_path: Path) -> None:
    """The graceful stop waits for the step to end; a second SIGTERM does not wait (the README's Ctrl-C)."""
    with pytest.raises(SystemExit):
        _fit(tmp_path, _Signalled((signal.SIGTERM, signal.SIGTERM), step=6))
    assert _saved_step(tmp_path / "checkpoints" / "last.ckpt") == 4
    status = (tmp_path / ".INTERRUPTED").read_text()
    assert "interrupted by SIGTERM at step 6; no checkpoint written now" in status
    assert not (tmp_path / ".FAILURE").exists() and interrupted_exit_code(tmp_path) == 143


def test_a_ctrl_c_is_not_logged_as_a_sigterm(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit):
        _fit(tmp_path, _Signalled((signal.SIGINT,), step=6))
    assert "Ctrl-C: stopping after the current step" in caplog.text
    assert "Received SIGTERM" not in caplog.text
    assert "Training curves up to the failure" not in caplog.text


def test_a_validation_cut_by_a_signal_runs_again_in_full_on_resume(tmp_path: Path) -> None:
    """SIGTERM in the second batch of the validation at step 8: the resume validates step 8 again, over the
    whole set (not only the batches that were left)."""
    with pytest.raises(SystemExit):
        _fit(tmp_path, _Signalled((signal.SIGTERM,), step=8, in_validation=True))
    assert "at step 8 during a validation" in (tmp_path / ".INTERRUPTED").read_text()
    assert _saved_step(tmp_path / "checkpoints" / "last.ckpt") == 8
    resumed = _Signalled()
    _fit(tmp_path, resumed, ckpt_path=tmp_path / "checkpoints" / "last.ckpt")
    assert resumed.steps[0] == 8 and resumed.val_batches == 2 * 4  # steps 8 and 12, 4 batches each
    best = [p.name for p in (tmp_path / "checkpoints").glob("best_*.ckpt")]
    assert best == ["best_hmean0.1200_epoch02.ckpt"]


def test_the_stall_watchdogs_interrupt_stays_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """exit_on_stall interrupts the main thread like a Ctrl-C would: that is a failure, reported at once."""
    monkeypatch.setattr(StallWatchdog, "_hard_exit", staticmethod(lambda waited_s: None))
    callbacks = [
        StallWatchdog(timeout_s=1.0, repeat=False, exit_on_stall=True, dirpath=str(tmp_path)),
        Guard(run_dir=str(tmp_path), check_every_n_steps=50, check_grads=False, fail_on_preflight=False),
        FaultInjector(kind="stall", step=1, stall_s=3.0),
    ]
    with pytest.raises(SystemExit):
        fit_tiny(tmp_path, callbacks, max_steps=3)
    assert "KeyboardInterrupt" in (tmp_path / ".FAILURE").read_text()
    assert not (tmp_path / ".INTERRUPTED").exists() and interrupted_exit_code(tmp_path) is None


def test_a_sigint_ignored_on_purpose_stays_ignored(tmp_path: Path) -> None:
    """A background job of a script ignores SIGINT, so that the script's Ctrl-C does not stop it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _fit(tmp_path, _Signalled((signal.SIGINT,), step=6))
    assert (tmp_path / ".SUCCESS").exists() and not (tmp_path / ".INTERRUPTED").exists()
    assert _saved_step(tmp_path / "checkpoints" / "last.ckpt") == 3 * STEPS_PER_EPOCH
