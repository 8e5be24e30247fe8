"""Autocast helpers shared by the model parts that must run in float32."""

from __future__ import annotations

import contextlib

import torch

__all__ = ["autocast_disabled"]


def autocast_disabled(device_type: str) -> contextlib.AbstractContextManager[object]:
    """Autocast off for ``device_type``; a no-op where autocast does not exist (e.g. the meta device)."""
    if torch.amp.is_autocast_available(device_type):
        return torch.autocast(device_type=device_type, enabled=False)
    return contextlib.nullcontext()
