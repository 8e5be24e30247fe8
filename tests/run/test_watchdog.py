"""Stall watchdog: dumps all stacks on a stall, stays quiet while fed, interrupts on request."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ocr.debug.inject import FaultInjector
from ocr.run.config import check_config
from ocr.run.faults import EXIT_STALL
from ocr.run.peers import announce_fault
from ocr.run.watchdog import STALL_KEY, StallWatchdog
from ocr.utils.errors import ConfigValueError
from tests.helpers.exits import fake_exits
from tests.helpers.triage_tiny import fit_tiny


def _wait_for(predicate, limit_s: float = 20.0) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class FakeStore:
    """The process group's key-value store, as peer_fault uses it (one per test: shared by "ranks")."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def compare_set(self, key: str, expected: str, value: str) -> None:
        if self.data.get(key, "") == expected:
            self.data[key] = value

    def check(self, keys: list[str]) -> bool:
        return all(key in self.data for key in keys)

    def get(self, key: str) -> bytes:
        return self.data[key].encode()


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
    assert watchdog._poller.stopped  # stopped at teardown


def test_exit_on_stall_interrupts_main_thread_and_tells_the_other_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exits: list[float] = []
    monkeypatch.setattr(StallWatchdog, "_hard_exit", staticmethod(exits.append))
    watchdog = StallWatchdog(timeout_s=0.5, repeat=False, exit_on_stall=True, dirpath=str(tmp_path))
    watchdog._store = store = FakeStore()  # under DDP: the process group's store
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in range(400):
                time.sleep(0.05)
    finally:
        watchdog.stop()
    assert watchdog.dumps
    record = json.loads(store.data[STALL_KEY])
    assert record["rank"] == 0 and record["dump"] == str(tmp_path / "stall-1.txt")
    assert record["last"] == "start-up (no step completed yet)"


def test_exit_on_stall_restores_an_ignored_sigint(tmp_path: Path) -> None:
    # A process started with SIGINT ignored (nohup, `cmd &` in a script) could not be interrupted.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        StallWatchdog(timeout_s=60, repeat=False, exit_on_stall=True, dirpath=str(tmp_path)).stop()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_bad_timeout_is_refused_by_the_config_check() -> None:
    node = {"_target_": "ocr.run.watchdog.StallWatchdog", "timeout_s": 0, "repeat": True}
    cfg = OmegaConf.create(
        {"callbacks": {"stall_watchdog": {**node, "exit_on_stall": False, "dirpath": None}}}
    )
    with pytest.raises(ConfigValueError, match=r"callbacks.stall_watchdog.timeout_s: expected > 0.0, got 0"):
        check_config(cfg)


def test_the_other_ranks_stop_at_once_naming_the_stalled_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Rank 0 waits in a collective for a rank that stopped for a stall: it ends at once, exit 124."""
    exits = fake_exits(monkeypatch)
    store = FakeStore()
    stalled = {
        "rank": 3,
        "node": 1,
        "stalled_s": 600,
        "last": "train step 41",
        "dump": "run/stall-node1-rank3-1.txt",
    }
    announce_fault(store, stalled, key=STALL_KEY)
    watchdog = StallWatchdog(timeout_s=600, repeat=False, exit_on_stall=False, dirpath=str(tmp_path))
    watchdog._store = store
    try:
        assert exits.event.wait(20)
    finally:
        watchdog.stop()
    assert exits.codes == [EXIT_STALL]
    said = caplog.records[-1].getMessage()
    assert said.startswith("Stall on rank 3 (node 1): no step for 600 s, last progress: train step 41")
    assert f"This rank stops too, with exit code {EXIT_STALL}" in said
