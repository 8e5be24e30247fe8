"""Masked L1 loss on the threshold map."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["masked_l1"]


def masked_l1(logits: Tensor, target: Tensor, mask: Tensor, *, eps: float) -> Tensor:
    """Mean ``|sigmoid(logits) - target|`` over pixels where ``mask`` is 1.

    Args:
        logits: (B, 1, H, W) float32 threshold logits.
        target: (B, 1, H, W) float32 threshold map in [0, 1].
        mask: (B, 1, H, W) float32 in {0, 1} (dilated text regions).
        eps: keeps the denominator positive.

    Returns:
        0-d float32 loss; 0 when the mask is empty.
    """
    error = (torch.sigmoid(logits) - target).abs() * mask
    return error.sum() / (mask.sum() + eps)
