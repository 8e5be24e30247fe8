"""Stall watchdog: dumps all stacks on a stall, stays quiet while fed, interrupts on request."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from ocr.debug.inject import FaultInjector
from ocr.lightning_modules.callbacks.watchdog import StallWatchdog
from tests.helpers.triage_tiny import fit_tiny


def _wait_for(predicate, limit_s: float = 20.0) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_dumps_and_repeats_while_stalled(tmp_path: Path) -> None:
    watchdog = StallWatchdog(timeout_s=0.5, repeat=True, exit_on_stall=False, dirpath=str(tmp_path))
    try:
        assert _wait_for(lambda: len(watchdog.dumps) >= 2)
    finally:
        watchdog.stop()
    text = (tmp_path / "stall-1.txt").read_text()
    assert "stall watchdog" in text and "start-up" in text
    assert "_wait_for" in text  # the main thread's stack
    assert (tmp_path / "stall-2.txt").exists()


def test_quiet_while_fed(tmp_path: Path) -> None:
    watchdog = StallWatchdog(timeout_s=2.0, repeat=True, exit_on_stall=False, dirpath=str(tmp_path))
    try:
        for step in range(30):
            watchdog.feed(f"step {step}")
            time.sleep(0.1)
    finally:
        watchdog.stop()
    assert watchdog.dumps == []


def test_fires_on_injected_stall_during_fit(tmp_path: Path) -> None:
    watchdog = StallWatchdog(timeout_s=1.0, repeat=False, exit_on_stall=False, dirpath=None)
    fit_tiny(tmp_path, [watchdog, FaultInjector(kind="stall", step=1, stall_s=3.0)], max_steps=3)
    # A slow start-up may earn its own dump first; the stalled step's dump shows the sleeping frame.
    dumps = [p.read_text() for p in sorted(tmp_path.glob("stall-*.txt"))]
    assert any("last progress: train step 1" in d and "apply_fault" in d for d in dumps), dumps
    assert watchdog._thread is None  # stopped at teardown


def test_exit_on_stall_interrupts_main_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exits: list[float] = []
    monkeypatch.setattr(StallWatchdog, "_hard_exit", staticmethod(exits.append))
    watchdog = StallWatchdog(timeout_s=0.5, repeat=False, exit_on_stall=True, dirpath=str(tmp_path))
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in range(400):
                time.sleep(0.05)
    finally:
        watchdog.stop()
    assert watchdog.dumps


def test_exit_on_stall_restores_an_ignored_sigint(tmp_path: Path) -> None:
    # A process started with SIGINT ignored (nohup, `cmd &` in a script) could not be interrupted.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        StallWatchdog(timeout_s=60, repeat=False, exit_on_stall=True, dirpath=str(tmp_path)).stop()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_rejects_bad_timeout() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        StallWatchdog(timeout_s=0, repeat=True, exit_on_stall=False, dirpath=None)
