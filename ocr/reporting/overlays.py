"""ValOverlays: at every validation, a few val images with their ground truth and detections coloured by
CLEval outcome, drawn from report.html's cards, to the loggers that take images (TensorBoard, W&B), else as
PNGs in ``<run>/val_images/<step>/``."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, cast

import lightning as L
from lightning.pytorch.callbacks import Callback

from ocr.data.images import ImageReadError
from ocr.evaluation.host_work import ImageOutcome
from ocr.lightning_modules.detection_module import DetectionModule
from ocr.lightning_modules.prediction_io import gather_predictions
from ocr.reporting.collect import outcome_record
from ocr.reporting.html import image_card, thumbnail
from ocr.utils.io import atomic_write_bytes
from ocr.utils.loggers import log_images
from ocr.utils.visualize import draw_outcomes, encode_image

__all__ = ["ValOverlays"]

log = logging.getLogger(__name__)


class ValOverlays(Callback):
    """A sink of the module's evaluation pipeline during validation: it keeps each image's predictions and
    the CLEval outcomes the workers already computed (no second network pass, no second matching), and
    at the end of each validation draws on rank 0 (unless not ``enabled``) the ``num_fixed`` images first
    in name order at the first validation, and this validation's ``num_worst`` lowest-hmean others (ties
    by name), at ``long_side`` px at most: tags ``val_overlays/fixed_<i>`` and ``val_overlays/worst_<i>``,
    each captioned with its name and hmean, as PNGs ``png_dir/<step>/<tag>-<image>.png`` when no logger
    takes images."""

    def __init__(
        self, *, enabled: bool, num_fixed: int, num_worst: int, long_side: int, png_dir: str
    ) -> None:
        for key, value, least in (
            ("num_fixed", num_fixed, 0),
            ("num_worst", num_worst, 0),
            ("long_side", long_side, 16),
        ):
            if value < least:
                raise ValueError(f"callbacks.val_overlays.{key}: expected >= {least}, got {value}")
        self.enabled = enabled
        self.num_fixed, self.num_worst, self.long_side = num_fixed, num_worst, long_side
        self.png_dir = Path(png_dir)
        self.preview_long_side = 0  # the pipeline's sink protocol: no probability map wanted
        self.fixed: list[str] = []
        self.seconds = 0.0  # spent here, summed over the run (scripts/benchmark_overlays.py reads it)
        self._records: list[dict[str, Any]] = []
        self._collecting = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        sinks = cast(DetectionModule, pl_module).pipeline.sinks
        if self.enabled and self not in sinks:
            sinks.append(self)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._collecting = self.enabled and not trainer.sanity_checking
        self._records = []

    def add(self, outcome: ImageOutcome) -> None:
        """Keep one scored val image's record (the pipeline calls this; test and predict are ignored)."""
        if self._collecting and outcome.boxes is not None and outcome.cleval is not None:
            started = time.perf_counter()
            self._records.append(outcome_record(outcome) | {"scored": (outcome.boxes, outcome.cleval)})
            self.seconds += time.perf_counter() - started

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._collecting:
            return
        self._collecting = False
        started = time.perf_counter()
        records = gather_predictions(self._records)  # every rank's, on rank 0
        self._records = []
        if records is not None and records:
            self._draw_and_send(trainer, records)
        self.seconds += time.perf_counter() - started

    def _draw_and_send(self, trainer: L.Trainer, records: list[dict[str, Any]]) -> None:
        by_name = {r["image_id"]: r for r in records}
        if not self.fixed:
            self.fixed = sorted(by_name)[: self.num_fixed]
        rest = sorted(
            (r for r in records if r["image_id"] not in self.fixed),
            key=lambda r: (r["scored"][1].hmean, r["image_id"]),
        )
        chosen = [(f"fixed_{i}", by_name[name]) for i, name in enumerate(self.fixed) if name in by_name]
        chosen += [(f"worst_{i}", record) for i, record in enumerate(rest[: self.num_worst])]
        image_dir = Path(trainer.datamodule.datasets["val"].image_dir)  # type: ignore[attr-defined]
        images, names = {}, {}
        for slot, record in chosen:
            try:
                image, width, _ = thumbnail(image_dir / record["image_id"], self.long_side)
            except (ImageReadError, OSError) as exc:
                log.warning("val overlays: %s skipped: %s", record["image_id"], exc)
                continue
            card, _ = image_card(0, record, None, record["scored"])
            caption = f"{record['image_id']}  H {record['scored'][1].hmean:.3f}"
            tag = f"val_overlays/{slot}"
            images[tag] = (draw_outcomes(image, image.shape[1] / width, card, caption), caption)
            names[tag] = f"{slot}-{Path(record['image_id']).stem}.png"
        step = trainer.global_step
        if not log_images(trainer.loggers, images, step):
            for tag, (image, _) in images.items():
                atomic_write_bytes(self.png_dir / str(step) / names[tag], encode_image(image, ".png", tag))
        log.info("val overlays: %d images at step %d", len(images), step)
