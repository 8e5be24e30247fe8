"""Run a runner on the CPU as if the CUDA context died at the injected fault.

``python -m tests.helpers.dead_context runners/train.py <overrides> debug=inject
callbacks.inject.kind=cuda_fault`` (from the repository root). ``cuda_fault`` raises the error a device-side
assert raises; from then on the calls that would touch the dead context on a GPU block or raise here too:

- Lightning's strategy teardown raises the fault again (what the first GPU proof saw);
- a callback that reads the device in ``on_exception`` blocks (added after the run's own callbacks);
- DataLoader worker shutdown blocks (on a GPU it joins the pin-memory thread, stuck in CUDA);
- an atexit handler blocks (CUDA's and NCCL's own handlers).

When ``DEAD_CONTEXT_FAULT_TIME`` names a file, the fault's wall-clock time (``time.time()``) is written
there, so a test can tell how long the process took to end after it.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import Strategy
from torch.utils.data import dataloader

from ocr.debug import inject

DEAD = threading.Event()


def _block_forever() -> None:
    while True:
        time.sleep(3600)


def _dead_error() -> BaseException:
    return torch.AcceleratorError("CUDA error: device-side assert triggered (a call on the dead context)")


class ReadsTheDevice(Callback):
    """A user's callback that reads a device tensor when the run fails."""

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if DEAD.is_set():
            _block_forever()


def install() -> None:
    """Patch the fault injection and the calls that a dead context breaks (see the module docstring)."""
    apply_fault = inject.apply_fault

    def dying_apply_fault(kind: str, batch: dict[str, Any], step: int, stall_s: float = 0.0) -> None:
        try:
            apply_fault(kind, batch, step, stall_s)
        except torch.AcceleratorError:
            DEAD.set()
            if os.environ.get("DEAD_CONTEXT_FAULT_TIME"):
                Path(os.environ["DEAD_CONTEXT_FAULT_TIME"]).write_text(repr(time.time()))
            raise

    teardown = Strategy.teardown

    def dead_teardown(self: Strategy) -> None:
        if DEAD.is_set():
            raise _dead_error()
        teardown(self)

    shutdown = dataloader._MultiProcessingDataLoaderIter._shutdown_workers

    def dead_shutdown(self: Any) -> None:
        if DEAD.is_set():
            _block_forever()
        shutdown(self)

    init = L.Trainer.__init__

    def init_with_device_reader(self: L.Trainer, *args: Any, callbacks: Any = None, **kwargs: Any) -> None:
        init(self, *args, callbacks=[*(callbacks or []), ReadsTheDevice()], **kwargs)

    inject.apply_fault = dying_apply_fault  # type: ignore[assignment]
    Strategy.teardown = dead_teardown  # type: ignore[method-assign]
    dataloader._MultiProcessingDataLoaderIter._shutdown_workers = dead_shutdown  # type: ignore[method-assign]
    L.Trainer.__init__ = init_with_device_reader  # type: ignore[method-assign]
    atexit.register(lambda: _block_forever() if DEAD.is_set() else None)


def main() -> None:
    """``sys.argv[1]``: the runner script; the rest: its arguments."""
    install()
    script, *arguments = sys.argv[1:]
    sys.argv = [script, *arguments]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
