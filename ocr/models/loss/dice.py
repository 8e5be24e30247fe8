"""Dice loss on the binary (DB step-function) map."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["dice_loss"]


def dice_loss(logits: Tensor, target: Tensor, mask: Tensor, *, eps: float) -> Tensor:
    """``1 - 2 |P ∩ G| / (|P| + |G|)`` over masked pixels, with ``P = sigmoid(logits)``.

    Args:
        logits: (B, 1, H, W) float32 binary-map logits.
        target: (B, 1, H, W) float32 in {0, 1}.
        mask: (B, 1, H, W) float32 in {0, 1}; 0 = ignored pixel.
        eps: keeps the denominator positive.

    Returns:
        0-d float32 loss; 0 when the mask is empty.
    """
    pred = torch.sigmoid(logits)
    intersection = (pred * target * mask).sum()
    union = (pred * mask).sum() + (target * mask).sum() + eps
    loss = 1.0 - 2.0 * intersection / union
    return torch.where(mask.sum() > 0, loss, torch.zeros_like(loss))
