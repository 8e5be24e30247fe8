"""The non-finite check: each step folds ``isfinite(loss)`` into a device-side flag (no host sync), read every
``check_every_n_steps`` steps, at epoch end and before each save (``last.ckpt`` never holds weights from
after the first NaN); on CUDA the loss checks feed that flag rather than a device-side assert, which would
kill the context.
"""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import torch
from torch import Tensor

from ocr.machine.sync import sync_allowed
from ocr.run.faults import is_cuda_fault
from ocr.utils.errors import NonFiniteLossError
from ocr.utils.io import atomic_write_json

__all__ = ["NonFiniteCheck"]

log = logging.getLogger(__name__)
NO_BAD_STEP = torch.iinfo(torch.long).max  # stands for "all finite" in the cross-rank minimum


class NonFiniteCheck:
    """Raises :class:`NonFiniteLossError` when the loss (or, ``check_grads``, the gradient norm; not under
    fp16, whose scaler skips inf steps) is NaN/Inf; ``check_every_n_steps``: 1: exact, a sync each step."""

    def __init__(self, *, check_every_n_steps: int, check_grads: bool, crash: Path) -> None:
        self.check_every_n_steps = check_every_n_steps
        self.check_grads = check_grads
        self._step: Tensor | None = None  # device-side global step of the batch in flight
        self._first_bad: dict[str, Tensor] = {}  # what -> device scalar, -1 while all finite
        self._host_step = 0
        self.crash = crash
        self._trainer: L.Trainer | None = None

    def batch_started(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._trainer = trainer
        self._host_step = trainer.global_step
        if self._step is None:
            # One host->device copy at the first step; afterwards the counter advances on the device.
            self._step = torch.tensor(trainer.global_step, device=pl_module.device, dtype=torch.long)

    def _record(self, what: str, finite: Tensor) -> None:
        assert self._step is not None
        first = self._first_bad.get(what)
        if first is None:
            first = torch.full_like(self._step, -1)
        self._first_bad[what] = torch.where(~finite & (first < 0), self._step, first)

    def before_backward(self, loss: Tensor) -> None:
        if self._step is not None:
            self._record("loss", torch.isfinite(loss.detach()).all())

    def before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._step is None:
            return
        if self.check_grads and not str(trainer.precision).startswith("16"):
            grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
            if grads:
                total = torch.nn.utils.get_total_norm(grads, error_if_nonfinite=False)
                self._record("gradient norm", torch.isfinite(total))
        # Advance once per optimizer step (not per batch), so steps match trainer.global_step under
        # gradient accumulation.
        self._step += 1

    def batch_ended(self) -> None:
        if (self._host_step + 1) % self.check_every_n_steps == 0:
            self.check()

    def fit_ended(self) -> None:
        self._step = None
        self._first_bad = {}

    def check(self) -> None:
        """Read the device flags (one sync); a NaN/Inf since the last check, on any rank, writes
        ``nonfinite.json`` and raises NonFiniteLossError."""
        with sync_allowed():  # the documented sync every check_every_n_steps
            bad = self._first_bad_steps(across_ranks=True)
        if bad:
            step, what = bad[0]
            self._write_record(bad, self._host_step)
            raise NonFiniteLossError(step=step, what=what, checked_at=self._host_step)

    def _first_bad_steps(self, across_ranks: bool) -> list[tuple[int, str]]:
        """``(first bad step, tensor name)`` pairs, earliest first (one sync); ``across_ranks`` takes the
        minimum over DDP ranks: every rank must call it at the same step."""
        if not self._first_bad:
            return []
        names = sorted(self._first_bad)
        firsts = torch.stack([self._first_bad[name] for name in names])
        trainer = self._trainer
        if across_ranks and trainer is not None and trainer.world_size > 1:
            firsts = torch.where(firsts < 0, torch.full_like(firsts, NO_BAD_STEP), firsts)
            # torch's stub types ReduceOp.MIN as RedOpType, which Strategy.reduce's annotation leaves out.
            minimum = torch.distributed.ReduceOp.MIN
            firsts = trainer.strategy.reduce(firsts, reduce_op=minimum)  # type: ignore[arg-type]
            firsts = torch.where(firsts == NO_BAD_STEP, torch.full_like(firsts, -1), firsts)
        pairs = zip(firsts.tolist(), names, strict=True)
        bad = [(int(step), name) for step, name in pairs if step >= 0]
        return sorted(bad, key=lambda pair: (pair[0], pair[1] != "loss"))  # the loss before its gradients

    def _write_record(self, bad: list[tuple[int, str]], checked_at: int | None) -> Path:
        path = self.crash / "nonfinite.json"
        record = {
            "first_bad": [{"step": step, "what": what} for step, what in bad],
            "detected_at_step": checked_at,
            "rank": self._trainer.global_rank if self._trainer is not None else 0,
            "node": self._trainer.node_rank if self._trainer is not None else 0,
        }
        return atomic_write_json(path, record)

    def on_exception(self, exception: BaseException) -> None:
        # Another error (e.g. an injected fault a step later) may hide an earlier NaN: record it beside
        # the crash bundle. Never touch the device after a CUDA fault, and no collective here: the other
        # ranks may not be at this point.
        if isinstance(exception, NonFiniteLossError) or is_cuda_fault(exception):
            return
        try:
            bad = self._first_bad_steps(across_ranks=False)
        except RuntimeError:
            return
        if bad:
            path = self._write_record(bad, None)
            log.error(
                "Non-finite %s first seen at global step %d, before this exception (%s)",
                bad[0][1],
                bad[0][0],
                path,
            )
