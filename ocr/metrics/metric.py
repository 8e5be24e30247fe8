"""CLEval as a torchmetrics ``Metric`` (DDP-safe: every state is a tensor summed across processes)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric

from ocr.metrics.cleval import CLEvalOptions, ImageResult, evaluate_image, scores_from_counts

__all__ = ["CLEvalMetric"]

_COUNT_STATES = ("tp_chars", "recall_penalty", "precision_penalty", "num_gt_chars", "num_det_chars")
_MEAN_STATES = ("sum_precision", "sum_recall", "sum_hmean", "num_images")


class CLEvalMetric(Metric):
    """Character-level evaluation of text detection (docs/metrics.md).

    ``competition`` mode reports the mean of per-image P/R/H; ``upstream`` mode divides character counts
    summed over the dataset. Both sets of sums are kept, so the reduction is a plain sum in either mode.
    """

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(
        self,
        *,
        mode: str,
        max_detections: int | None,
        area_precision_threshold: float,
        recall_granularity_weight: float,
        precision_granularity_weight: float,
        vertical_aspect_ratio_threshold: float,
        case_sensitive: bool,
    ) -> None:
        """Options as in configs/metric/cleval.yaml (see :class:`~ocr.metrics.cleval.CLEvalOptions`)."""
        super().__init__()
        self.options = CLEvalOptions(
            mode=mode,  # type: ignore[arg-type]
            max_detections=max_detections,
            area_precision_threshold=area_precision_threshold,
            recall_granularity_weight=recall_granularity_weight,
            precision_granularity_weight=precision_granularity_weight,
            vertical_aspect_ratio_threshold=vertical_aspect_ratio_threshold,
            case_sensitive=case_sensitive,
        )
        for name in _COUNT_STATES + _MEAN_STATES:
            self.add_state(name, default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(
        self,
        pred_polygons: Sequence[Sequence[np.ndarray]],
        gt_polygons: Sequence[Sequence[np.ndarray]],
        gt_ignore: Sequence[Sequence[bool]],
        gt_texts: Sequence[Sequence[str | None]] | None = None,
    ) -> None:
        """Score a batch; one list entry per image, polygons (K, 2) in the same pixel frame.

        Raises:
            ValueError: lists of different lengths or a malformed polygon (naming the batch image).
        """
        n = len(gt_polygons)
        if len(pred_polygons) != n or len(gt_ignore) != n or (gt_texts is not None and len(gt_texts) != n):
            raise ValueError(
                f"CLEvalMetric.update: expected one entry per image, got {len(pred_polygons)} predictions, "
                f"{n} GT, {len(gt_ignore)} ignore lists, {None if gt_texts is None else len(gt_texts)} texts"
            )
        for i in range(n):
            texts = None if gt_texts is None else gt_texts[i]
            try:
                result = evaluate_image(pred_polygons[i], gt_polygons[i], gt_ignore[i], texts, self.options)
            except ValueError as exc:
                raise ValueError(f"CLEvalMetric.update: batch image {i}: {exc}") from None
            self._accumulate(result)

    def _accumulate(self, r: ImageResult) -> None:
        self.tp_chars += r.tp_chars
        self.recall_penalty += r.recall_penalty
        self.precision_penalty += r.precision_penalty
        self.num_gt_chars += r.num_gt_chars
        self.num_det_chars += r.num_det_chars
        self.sum_precision += r.precision
        self.sum_recall += r.recall
        self.sum_hmean += r.hmean
        self.num_images += 1

    def compute(self) -> dict[str, Tensor]:
        """``{"precision", "recall", "hmean"}`` as float32 scalars (0 before any image)."""
        if self.options.mode == "competition":
            n = max(float(self.num_images), 1.0)
            values = (float(self.sum_precision) / n, float(self.sum_recall) / n, float(self.sum_hmean) / n)
        else:
            values = scores_from_counts(
                float(self.tp_chars),
                float(self.recall_penalty),
                float(self.precision_penalty),
                float(self.num_gt_chars),
                float(self.num_det_chars),
            )
        return {
            name: torch.tensor(v, dtype=torch.float32, device=self.device)
            for name, v in zip(("precision", "recall", "hmean"), values, strict=True)
        }
