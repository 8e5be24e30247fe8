"""Documented host-device syncs: the blocks training marks so that ``debug=gpu_probe``'s sync debug mode
(``torch.cuda.set_sync_debug_mode("error")``, ``ocr.debug.gpu_probe``) lets them through."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["sync_allowed"]


@contextlib.contextmanager
def sync_allowed() -> Iterator[None]:
    """Mark a documented host-device sync: lifted out of torch's sync debug mode while it runs."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        yield
        return
    mode = torch.cuda.get_sync_debug_mode()
    if mode:
        torch.cuda.set_sync_debug_mode(0)
    try:
        yield
    finally:
        if mode:
            torch.cuda.set_sync_debug_mode(mode)
