"""CLEval as a torchmetrics ``Metric`` (DDP-safe: every state is a tensor summed across processes)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric

from ocr.metrics.cleval.evaluate import (
    COUNT_FIELDS,
    SCORE_FIELDS,
    ImageResult,
    evaluate_images,
    scores_from_counts,
    warn_unscored,
)
from ocr.metrics.cleval.options import CLEvalOptions

__all__ = ["CLEvalMetric"]

# Each state sums one ImageResult field over the images seen; num_images counts them.
_SUMMED_FIELDS = {name: name for name in COUNT_FIELDS} | {f"sum_{s}": s for s in SCORE_FIELDS}
_SUMMED_FIELDS |= {"num_dropped": "num_dropped_detections", "num_skipped": "num_skipped_polygons"}


class CLEvalMetric(Metric):
    """Character-level evaluation of text detection (docs/metrics.md). ``competition`` mode reports the mean
    of per-image P/R/H; ``upstream`` mode divides character counts summed over the dataset. Both sets of sums
    are kept, so the reduction is a plain sum in either mode."""

    full_state_update = False
    higher_is_better = True
    is_differentiable = False
    # The states add_state registers: 0-d float64 sums.
    tp_chars: Tensor
    recall_penalty: Tensor
    precision_penalty: Tensor
    num_gt_chars: Tensor
    num_det_chars: Tensor
    sum_precision: Tensor
    sum_recall: Tensor
    sum_hmean: Tensor
    num_dropped: Tensor
    num_skipped: Tensor
    num_images: Tensor

    def __init__(self, *, options: CLEvalOptions) -> None:
        """Score with ``options`` (configs/metric/cleval.yaml builds them)."""
        super().__init__()
        self.options = options
        for name in (*_SUMMED_FIELDS, "num_images"):
            self.add_state(name, default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(
        self,
        pred_polygons: Sequence[Sequence[np.ndarray]],
        gt_polygons: Sequence[Sequence[np.ndarray]],
        gt_ignore: Sequence[Sequence[bool]],
        gt_texts: Sequence[Sequence[str | None]] | None = None,
    ) -> None:
        """Score a batch, one list entry per image, (K, 2) polygons in one pixel frame (ValueError names the
        image)."""
        labels = [f"batch image {i}" for i in range(len(gt_polygons))]
        self._add(evaluate_images(pred_polygons, gt_polygons, gt_ignore, gt_texts, self.options, labels))

    def add_results(self, results: Sequence[ImageResult]) -> None:
        """Add a batch of per-image results scored elsewhere (``ocr.inference``'s workers) with this
        metric's options, as :meth:`update` adds the ones it scores."""
        # Through the bookkeeping torchmetrics wraps `update` in (update count, compute cache); wrapped
        # per call, as a wrapper kept in an attribute would stay bound to the original through clone().
        self._wrap_update(self._add)(results)

    def _add(self, results: Sequence[ImageResult]) -> None:
        # One addition per state and batch: the states live on the module's device.
        for state, field in _SUMMED_FIELDS.items():
            getattr(self, state).add_(sum(getattr(r, field) for r in results))
        self.num_images.add_(len(results))

    def compute(self) -> dict[str, Tensor]:
        """``{"precision", "recall", "hmean"}`` as float32 scalars (0 before any image)."""
        warn_unscored(int(self.num_dropped), int(self.num_skipped), self.options)
        if self.options.mode == "competition":
            n = max(float(self.num_images), 1.0)
            values = tuple(float(getattr(self, f"sum_{s}")) / n for s in SCORE_FIELDS)
        else:
            values = scores_from_counts(*(float(getattr(self, name)) for name in COUNT_FIELDS))
        return {
            name: torch.tensor(v, dtype=torch.float32, device=self.device)
            for name, v in zip(SCORE_FIELDS, values, strict=True)
        }
