"""Collect what the results page shows during ``trainer.test`` / ``trainer.predict``."""

from __future__ import annotations

import logging
from typing import Any

from ocr.evaluation.host_work import GroundTruth, ImageOutcome
from ocr.evaluation.pipeline import EvalPipeline
from ocr.lightning_modules.prediction_io import gather_predictions

__all__ = ["ReportCollector", "attach_report_collector", "outcome_record", "report_record"]

log = logging.getLogger(__name__)


def report_record(image_id: str, polygons: Any, scores: Any, truth: GroundTruth | None) -> dict[str, Any]:
    """The record ``image_card`` and ``analyse_records`` read: predictions, and labels when given."""
    record: dict[str, Any] = {"image_id": image_id, "polygons": polygons, "scores": scores}
    if truth is not None:
        record |= {"gt_polygons": truth.polygons, "gt_ignore": truth.ignore, "gt_texts": truth.texts}
    return record


class ReportCollector:
    """A sink of the module's :class:`~ocr.evaluation.pipeline.EvalPipeline` that keeps, per image, the
    predictions, the ground truth (test) and a probability map of ``prob_long_side`` px (0: none)."""

    def __init__(self, *, prob_long_side: int) -> None:
        self.preview_long_side = prob_long_side
        self._records: list[dict[str, Any]] = []

    def add(self, outcome: ImageOutcome) -> None:
        """Keep one image's record."""
        self._records.append(outcome_record(outcome))

    def records(self) -> list[dict[str, Any]] | None:
        """Every rank's records on global rank 0 in image-name order; None on the other ranks."""
        return gather_predictions(self._records)


def outcome_record(outcome: ImageOutcome) -> dict[str, Any]:
    """One image's record as :func:`ocr.reporting.html.write_report` reads it."""
    prediction = outcome.prediction
    record = report_record(
        prediction["image_id"], prediction["polygons"], prediction["scores"], outcome.job.gt
    )
    if outcome.preview is not None:
        record["prob_map"] = outcome.preview
    return record


def attach_report_collector(pipeline: EvalPipeline, prob_long_side: int) -> ReportCollector:
    """Add a :class:`ReportCollector` to a module's pipeline (``module.pipeline``)."""
    collector = ReportCollector(prob_long_side=prob_long_side)
    pipeline.sinks.append(collector)
    return collector
