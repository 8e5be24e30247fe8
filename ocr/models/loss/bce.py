"""Balanced binary cross-entropy with online hard negative mining (OHEM), free of host-device syncs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["balanced_bce"]


def balanced_bce(logits: Tensor, target: Tensor, mask: Tensor, *, ohem_ratio: float, eps: float) -> Tensor:
    """BCE over all positives plus the ``k = min(#neg, ohem_ratio * #pos)`` hardest negatives, per batch.

    The top-k is taken by sorting the negative losses and keeping ranks ``< k`` with a mask built on the
    device, so ``k`` never leaves it (no ``.item()``, no boolean indexing). With no positives ``k`` is 0
    and the term is 0, as in the DB reference implementation.

    Args:
        logits: (B, 1, H, W) float32 probability logits.
        target: (B, 1, H, W) float32 in {0, 1}.
        mask: (B, 1, H, W) float32 in {0, 1}; 0 = ignored pixel.
        ohem_ratio: negatives kept per positive.
        eps: keeps the denominator positive when nothing is selected.

    Returns:
        0-d float32 loss (0, not NaN, when the mask is empty).
    """
    loss = F.binary_cross_entropy_with_logits(logits, target, reduction="none")  # (B, 1, H, W)
    positive = target * mask
    negative = (1.0 - target) * mask
    pos_count = positive.sum()
    k = torch.minimum(negative.sum(), ohem_ratio * pos_count)
    neg_loss, _ = (loss * negative).flatten().sort(descending=True)  # (B*H*W,) non-negatives are 0
    keep = torch.arange(neg_loss.numel(), device=neg_loss.device) < k
    hard_neg_sum = (neg_loss * keep).sum()
    return ((loss * positive).sum() + hard_neg_sum) / (pos_count + k + eps)
