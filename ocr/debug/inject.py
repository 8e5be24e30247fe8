"""Fault injection for the triage tools: ``debug=inject callbacks.inject.kind=KIND
[callbacks.inject.step=N]``.

Kinds: ``exception`` (a RuntimeError), ``nan_loss`` (the ``loss`` output becomes NaN, for the non-finite
guard; NaN images without a ``loss``), ``stall`` (sleep ``stall_s``, default 2.5x the watchdog's timeout),
``bad_index`` (an out-of-bounds ``index_select``: a device-side assert on CUDA, IndexError on the CPU) and
``cuda_fault`` (``torch.AcceleratorError`` on any device: the CUDA fault path of ``ocr.run.faults`` on a
CPU)."""

from __future__ import annotations

import logging
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf
from torch import nn

from ocr.run.watchdog import StallWatchdog

__all__ = [
    "FAULT_KINDS",
    "FaultInjector",
    "InjectedFaultError",
    "apply_fault",
    "injection",
    "poison_loss",
]

log = logging.getLogger(__name__)

FAULT_KINDS = ("exception", "nan_loss", "stall", "bad_index", "cuda_fault")
DEFAULT_STALL_S = 60.0  # a stall without a stall watchdog in the run
STALL_TIMEOUT_FACTOR = 2.5
# PyTorch's message for cudaErrorAssert; the first line says it was injected.
CUDA_FAULT_MESSAGE = (
    "CUDA error: device-side assert triggered "
    "[injected by callbacks.inject.kind=cuda_fault at global step {step}]\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
    "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"
)


class InjectedFaultError(RuntimeError):
    """The exception raised by ``callbacks.inject.kind=exception``."""


def apply_fault(kind: str, batch: dict[str, Any], step: int, stall_s: float = DEFAULT_STALL_S) -> None:
    """Apply fault ``kind`` to ``batch`` (in place) at global step ``step``: InjectedFaultError,
    IndexError (``bad_index`` on the CPU) or ``torch.AcceleratorError`` (``cuda_fault``)."""
    images = batch["images"]  # (B, 3, H, W)
    if kind == "exception":
        raise InjectedFaultError(f"injected fault at global step {step} <callbacks.inject.kind=exception>")
    if kind == "cuda_fault":
        raise getattr(torch, "AcceleratorError", RuntimeError)(CUDA_FAULT_MESSAGE.format(step=step))
    if kind == "nan_loss":
        images.fill_(float("nan"))
    elif kind == "stall":
        log.warning("Injected stall: sleeping %.0f s at step %d <callbacks.inject.kind=stall>", stall_s, step)
        time.sleep(stall_s)
    elif kind == "bad_index":
        # One past the end plus a margin: index_select's bounds check is a CUDA_KERNEL_ASSERT on the GPU.
        index = torch.tensor([images.shape[0] + 7], device=images.device)
        torch.index_select(images, 0, index)
    else:
        raise ValueError(f"callbacks.inject.kind: expected one of {FAULT_KINDS}, got {kind!r}")


def poison_loss(losses: dict[str, Any]) -> dict[str, Any]:
    """``losses`` with a NaN total ``loss`` (what ``nan_loss`` does to the loss module's output)."""
    return {**losses, "loss": losses["loss"] * float("nan")}


class FaultInjector(Callback):
    """Applies one fault of :data:`FAULT_KINDS` at the start of training step ``step``; ``stall_s`` None:
    2.5x the run's stall watchdog timeout (:data:`DEFAULT_STALL_S` without a watchdog)."""

    def __init__(self, *, kind: str, step: int, stall_s: float | None) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"callbacks.inject.kind: expected one of {FAULT_KINDS}, got {kind!r}")
        self.kind = kind
        self.step = step
        self.stall_s = stall_s
        self.fired = False
        self._remove_after_step: torch.utils.hooks.RemovableHandle | None = None

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.fired or trainer.global_step != self.step:
            return
        self.fired = True
        log.warning(
            "Injecting fault %r at global step %d <callbacks.inject.kind=%s>", self.kind, self.step, self.kind
        )
        loss_module = getattr(pl_module, "loss", None)
        if self.kind == "nan_loss" and isinstance(loss_module, nn.Module):
            handle = loss_module.register_forward_hook(lambda module, args, output: poison_loss(output))
            self._remove_after_step = handle
            return
        if self.kind == "nan_loss":
            # Also poison the CPU reference the crash bundle saves, as a NaN in the data would be.
            cpu_batch = getattr(trainer.datamodule, "last_cpu_batch", None)  # type: ignore[attr-defined]
            if isinstance(cpu_batch, dict) and cpu_batch.get("images") is not batch["images"]:
                apply_fault(self.kind, cpu_batch, self.step)
        apply_fault(self.kind, batch, self.step, self._stall_seconds(trainer))

    def _stall_seconds(self, trainer: L.Trainer) -> float:
        if self.stall_s is not None:
            return self.stall_s
        callbacks = trainer.callbacks  # type: ignore[attr-defined]  # set by Lightning's connector
        timeouts = [c.timeout_s for c in callbacks if isinstance(c, StallWatchdog)]
        return timeouts[0] * STALL_TIMEOUT_FACTOR if timeouts else DEFAULT_STALL_S

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._remove_after_step is not None:
            self._remove_after_step.remove()
            self._remove_after_step = None


def injection(cfg: DictConfig) -> tuple[str | None, int | None]:
    """The fault kind and step ``configs/debug/inject.yaml`` set in a run config (None, None without it)."""
    node = OmegaConf.select(cfg, "callbacks.inject")
    if node is None:
        return None, None
    return str(node.kind), int(node.step)
