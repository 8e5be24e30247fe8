"""Fault injection for testing the triage tools: ``+debug.inject=KIND +debug.inject_step=N``.

Kinds: ``exception`` (a RuntimeError at the step), ``nan_loss`` (the output of the module's ``loss``
becomes NaN at the step: a NaN the loss's own input checks cannot see, so the non-finite guard must
catch it; a module without a ``loss`` submodule gets NaN images instead, on the device and in the CPU
reference the crash bundle saves),
``stall`` (sleep ``debug.stall_s`` seconds, default 2.5x the watchdog timeout) and ``bad_index`` (an
out-of-bounds ``index_select`` on the batch's device: on CUDA a device-side assert that
compute-sanitizer reports with the kernel name; on the CPU an IndexError from the same op).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf
from torch import nn

__all__ = [
    "FAULT_KINDS",
    "FaultInjector",
    "InjectedFaultError",
    "apply_fault",
    "fault_callbacks",
    "poison_loss",
]

log = logging.getLogger(__name__)

FAULT_KINDS = ("exception", "nan_loss", "stall", "bad_index")
DEFAULT_INJECT_STEP = 1
DEFAULT_STALL_S = 60.0
STALL_TIMEOUT_FACTOR = 2.5


class InjectedFaultError(RuntimeError):
    """The exception raised by ``+debug.inject=exception``."""


def apply_fault(kind: str, batch: dict[str, Any], step: int, stall_s: float = DEFAULT_STALL_S) -> None:
    """Apply fault ``kind`` to ``batch`` (in place) at global step ``step``.

    Raises:
        InjectedFaultError: for ``exception``.
        IndexError: for ``bad_index`` on the CPU (on CUDA the error is asynchronous).
    """
    images = batch["images"]  # (B, 3, H, W)
    if kind == "exception":
        raise InjectedFaultError(f"injected fault at global step {step} <debug.inject=exception>")
    if kind == "nan_loss":
        images.fill_(float("nan"))
    elif kind == "stall":
        log.warning("Injected stall: sleeping %.0f s at step %d <debug.inject=stall>", stall_s, step)
        time.sleep(stall_s)
    elif kind == "bad_index":
        # One past the end plus a margin: index_select's bounds check is a CUDA_KERNEL_ASSERT on the GPU.
        index = torch.tensor([images.shape[0] + 7], device=images.device)
        torch.index_select(images, 0, index)
    else:
        raise ValueError(f"debug.inject: expected one of {FAULT_KINDS}, got {kind!r}")


def poison_loss(losses: dict[str, Any]) -> dict[str, Any]:
    """``losses`` with a NaN total ``loss`` (what ``nan_loss`` does to the loss module's output)."""
    return {**losses, "loss": losses["loss"] * float("nan")}


class FaultInjector(Callback):
    """Applies one fault at the start of training step ``step``.

    Args:
        kind: one of :data:`FAULT_KINDS`.
        step: the global step to fault at.
        stall_s: sleep length for ``stall``.
    """

    def __init__(self, *, kind: str, step: int, stall_s: float) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"debug.inject: expected one of {FAULT_KINDS}, got {kind!r}")
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
        log.warning("Injecting fault %r at global step %d <debug.inject=%s>", self.kind, self.step, self.kind)
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
        apply_fault(self.kind, batch, self.step, self.stall_s)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._remove_after_step is not None:
            self._remove_after_step.remove()
            self._remove_after_step = None


def _stall_seconds(cfg: DictConfig) -> float:
    explicit = OmegaConf.select(cfg, "debug.stall_s", default=None)
    if explicit is not None:
        return float(explicit)
    timeout = OmegaConf.select(cfg, "callbacks.stall_watchdog.timeout_s", default=None)
    return float(timeout) * STALL_TIMEOUT_FACTOR if timeout is not None else DEFAULT_STALL_S


def injection(cfg: DictConfig) -> tuple[str | None, int]:
    """``debug.inject`` (None when unset) and ``debug.inject_step`` (default 1) of a run config."""
    kind = OmegaConf.select(cfg, "debug.inject", default=None)
    step = OmegaConf.select(cfg, "debug.inject_step", default=None)
    return (None if kind is None else str(kind)), (DEFAULT_INJECT_STEP if step is None else int(step))


def fault_callbacks(cfg: DictConfig) -> list[Callback]:
    """The injector for ``debug.inject`` (empty list when unset).

    Reads ``debug.inject``, ``debug.inject_step`` (default 1) and ``debug.stall_s``.
    """
    kind, step = injection(cfg)
    if kind is None:
        return []
    return [FaultInjector(kind=kind, step=step, stall_s=_stall_seconds(cfg))]
