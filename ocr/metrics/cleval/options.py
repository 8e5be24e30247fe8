"""CLEval scoring options: one frozen record shared by the evaluator, its geometry and the Metric."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["upstream", "competition"]
MODES: tuple[str, ...] = ("upstream", "competition")


@dataclass(frozen=True)
class CLEvalOptions:
    """Scoring options (configs/metric/cleval.yaml): ``mode``, the first ``max_detections`` kept (None: all),
    the area-precision a match needs, the split and merge penalty weights, upstream's
    ``vertical_aspect_ratio_threshold`` (GT quads narrower than it are read top to bottom) and case
    sensitivity of transcriptions."""

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
