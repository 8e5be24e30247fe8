"""Collect what the results page shows during ``trainer.test`` / ``trainer.predict``."""

from __future__ import annotations

import logging
from typing import Any

import cv2
import lightning as L
import numpy as np
import numpy.typing as npt
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from ocr.lightning_modules.prediction_io import gather_predictions
from ocr.types import Batch, DBOutput, Geometry

__all__ = ["ReportCollector", "attach_report_collector", "prob_map_in_original_frame"]

log = logging.getLogger(__name__)


def prob_map_in_original_frame(
    prob: npt.NDArray[np.float32], geometry: Geometry, long_side: int
) -> npt.NDArray[np.uint8]:
    """A (H, W) probability map in input px as uint8 in the original frame, long side ``long_side``.

    The map may be smaller than the network input (it is scaled up to the input first, as a matrix).
    """
    scale = long_side / max(geometry.orig_width, geometry.orig_height)
    width = max(1, round(geometry.orig_width * scale))
    height = max(1, round(geometry.orig_height * scale))
    map_to_input = np.diag([geometry.input_width / prob.shape[1], geometry.input_height / prob.shape[0], 1.0])
    matrix = np.diag([scale, scale, 1.0]) @ geometry.matrix @ map_to_input
    warped = cv2.warpPerspective(prob, matrix, (width, height), flags=cv2.INTER_LINEAR)
    return np.clip(np.round(warped * 255), 0, 255).astype(np.uint8)


class ReportCollector(Callback):
    """Keeps, per image, the predictions, the ground truth (test) and a small probability map.

    The probability map is read from the network's output by a forward hook, so the module's steps are
    unchanged; the test step's return value supplies the predictions.

    Args:
        prob_long_side: long side in px of the kept probability maps (0 keeps none).
    """

    def __init__(self, *, prob_long_side: int) -> None:
        self.prob_long_side = prob_long_side
        self._records: list[dict[str, Any]] = []
        self._prob: Tensor | None = None
        self._hook: RemovableHandle | None = None

    def _start(self, pl_module: L.LightningModule) -> None:
        self._records.clear()
        net = getattr(pl_module, "net", None)
        if self.prob_long_side > 0 and isinstance(net, nn.Module):
            self._hook = net.register_forward_hook(self._capture)
        elif self.prob_long_side > 0:  # backend=onnx: ONNX Runtime runs the network outside torch
            log.info(
                "report: %s has no torch network to read probability maps from", type(pl_module).__name__
            )

    def _capture(self, module: nn.Module, inputs: Any, output: DBOutput) -> None:
        self._prob = output.prob_logits.detach()

    def _stop(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._prob = None

    def _collect(self, predictions: list[dict[str, Any]], batch: Batch, labelled: bool) -> None:
        probs = None
        if self._prob is not None:
            probs = torch.sigmoid(self._prob.float())[:, 0].cpu().numpy()
        for i, pred in enumerate(predictions):
            record = {"image_id": pred["image_id"], "polygons": pred["polygons"], "scores": pred["scores"]}
            if labelled:
                record |= {
                    "gt_polygons": batch["polygons"][i],
                    "gt_ignore": batch["ignore"][i],
                    "gt_texts": batch["texts"][i],
                }
            if probs is not None:
                record["prob_map"] = prob_map_in_original_frame(
                    probs[i], batch["geometry"][i], self.prob_long_side
                )
            self._records.append(record)
        self._prob = None

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start(pl_module)

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start(pl_module)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start(pl_module)

    def on_test_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._collect(outputs, batch, labelled=True)

    def on_validation_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._collect(outputs, batch, labelled=True)

    def on_predict_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._collect(outputs, batch, labelled=False)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop()

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop()

    def records(self) -> list[dict[str, Any]] | None:
        """Every rank's records on global rank 0 in image-name order; None on the other ranks."""
        return gather_predictions(self._records)


def attach_report_collector(trainer: L.Trainer, prob_long_side: int) -> ReportCollector:
    """Add a :class:`ReportCollector` to the bare inference trainer (``restore_for_inference``)."""
    collector = ReportCollector(prob_long_side=prob_long_side)
    trainer.callbacks.append(collector)  # type: ignore[attr-defined]
    return collector
