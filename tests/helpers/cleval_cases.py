"""CLEval options as configs/metric/cleval.yaml sets them, and axis-aligned boxes for hand-made cases."""

from __future__ import annotations

import numpy as np

from ocr.metrics.cleval.options import CLEvalOptions


def options(mode: str = "competition", max_detections: int | None = 500) -> CLEvalOptions:
    return CLEvalOptions(
        mode=mode,
        max_detections=max_detections,
        area_precision_threshold=0.3,
        recall_granularity_weight=1.0,
        precision_granularity_weight=1.0,
        vertical_aspect_ratio_threshold=0.5,
        case_sensitive=True,
    )


def rect(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.float32)


WORD = rect(10, 10, 110, 30)  # 100 x 20: 5 pseudo characters, centres at x = 20, 40, 60, 80, 100
