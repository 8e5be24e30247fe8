"""sync_allowed: a documented sync lifts torch's sync debug mode for its block, and only when it is on."""

from __future__ import annotations

import pytest
import torch

from ocr.machine.sync import sync_allowed


def test_sync_allowed_lifts_the_error_mode_and_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    modes: list[int] = []
    current = {"mode": 2}

    def set_mode(mode: int) -> None:
        current["mode"] = mode
        modes.append(mode)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: current["mode"])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", set_mode)
    with sync_allowed():
        assert current["mode"] == 0
    assert current["mode"] == 2
    current["mode"] = 0
    with sync_allowed():
        pass
    assert modes == [0, 2]  # nothing touched when the mode was off
