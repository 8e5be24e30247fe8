"""A callback for multi-rank tests: what each rank saw and decided, as ``<dirpath>/rank<k>.json``.

Added to a real run with ``+callbacks.rank_report._target_=tests.helpers.rank_report.RankReport
+callbacks.rank_report.dirpath=<dir>`` (the tests package must be importable: PYTHONPATH=<repo>).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping

from ocr.checkpoints.saving import scalar_metrics
from ocr.lightning_modules.callbacks.time_budget import TimeBudget


def weights_sha256(state_dict: Mapping[str, torch.Tensor]) -> str:
    """sha256 over a state dict (names and bytes), for comparing ranks and checkpoints."""
    digest = hashlib.sha256()
    for name, tensor in sorted(state_dict.items()):
        digest.update(name.encode() + b"\0" + tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


class RankReport(Callback):
    """Records each validation's logged metrics and, at the end of fit, the weights' hash and the
    decisions every rank must share (best checkpoint, early stop, time-budget plan)."""

    def __init__(self, *, dirpath: str) -> None:
        self.dirpath = Path(dirpath)
        self.validations: list[dict[str, Any]] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            metrics = {k: v for k, v in scalar_metrics(trainer).items() if k.startswith("val/")}
            self.validations.append({"step": trainer.global_step, **metrics})

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        checkpoint = trainer.checkpoint_callback
        stopping = next((c for c in trainer.callbacks if isinstance(c, EarlyStopping)), None)  # type: ignore[attr-defined]
        budget = next((c for c in trainer.callbacks if isinstance(c, TimeBudget)), None)  # type: ignore[attr-defined]
        record = {
            "rank": trainer.global_rank,
            "node": trainer.node_rank,
            "world_size": trainer.world_size,
            "global_step": trainer.global_step,
            "epoch": trainer.current_epoch,
            "weights_sha256": weights_sha256(pl_module.state_dict()),
            "validations": self.validations,
            "best_model_path": getattr(checkpoint, "best_model_path", None),
            "best_model_score": _float(getattr(checkpoint, "best_model_score", None)),
            "stopped_epoch": stopping.stopped_epoch if stopping is not None else None,
            "plan": None if budget is None or budget.plan is None else budget.plan.max_steps,
        }
        self.dirpath.mkdir(parents=True, exist_ok=True)
        (self.dirpath / f"rank{trainer.global_rank}.json").write_text(json.dumps(record, indent=2))


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
