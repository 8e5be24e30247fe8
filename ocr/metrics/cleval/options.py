"""CLEval scoring options: one frozen record shared by the evaluator, its geometry and the Metric."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["upstream", "competition"]
MODES: tuple[str, ...] = ("upstream", "competition")


@dataclass(frozen=True)
class CLEvalOptions:
    """Scoring options (values come from configs/metric/cleval.yaml).

    Attributes:
        mode: ``upstream`` or ``competition``.
        max_detections: detections kept per image (the first ones); None keeps all.
        area_precision_threshold: intersection / detection area needed for a match.
        recall_granularity_weight: penalty per extra detection on a split GT.
        precision_granularity_weight: penalty per extra GT merged into one detection.
        vertical_aspect_ratio_threshold: upstream mode: GT quads with width/height below it are read top to
            bottom (the competition's scorer has no such rule).
        case_sensitive: compare transcriptions case-sensitively (upstream character counts).
    """

    mode: Mode
    max_detections: int | None
    area_precision_threshold: float
    recall_granularity_weight: float
    precision_granularity_weight: float
    vertical_aspect_ratio_threshold: float
    case_sensitive: bool

    def __post_init__(self) -> None:
        """Reject values no run can mean."""
        if self.mode not in MODES:
            raise ValueError(f"CLEval mode: expected one of {MODES}, got {self.mode!r}")
        if self.max_detections is not None and self.max_detections < 0:
            raise ValueError(f"CLEval max_detections: expected >= 0 or None, got {self.max_detections}")
        if not 0.0 <= self.area_precision_threshold <= 1.0:
            raise ValueError(
                f"CLEval area_precision_threshold: expected in [0, 1], got {self.area_precision_threshold}"
            )
