"""In-process stand-in for the fault exit's ``os._exit``, so a test can watch the process "end"."""

from __future__ import annotations

import threading

import pytest

from ocr.run import faults


class Exited(BaseException):
    """Raised in the main thread where the process would have ended (BaseException, like SystemExit)."""

    def __init__(self, code: int) -> None:
        super().__init__(f"os._exit({code})")
        self.code = code


class Exits:
    """The codes the process would have exited with, in order; ``event`` is set at the first."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.event = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.event.set()
        if threading.current_thread() is threading.main_thread():
            raise Exited(code)


def fake_exits(monkeypatch: pytest.MonkeyPatch) -> Exits:
    """Replace ``os._exit`` in ``ocr.run.faults`` and forget any fault handled by an earlier test."""
    exits = Exits()
    monkeypatch.setattr(faults, "_hard_exit", exits)
    monkeypatch.setattr(faults, "_active", None)
    return exits
