"""Balanced binary cross-entropy with online hard negative mining (OHEM), free of host-device syncs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["balanced_bce", "sum_of_largest"]

FLOAT32_INF_BITS = 0x7F800000


def sum_of_largest(values: Tensor, k: Tensor) -> Tensor:
    """Sum of the ``ceil(k)`` largest of the non-negative float32 ``values``, without a sort or a sync.

    The k-th largest value is found by bisection over the float32 bit patterns, whose integer order is
    the value order for non-negative floats: 31 counting passes, where a sort of every pixel's loss
    (about 13 M at batch 32, 640 px) also allocates int64 indices. Ties at the k-th value share its
    gradient; NaN values are always counted, so they propagate.

    Args:
        values: (N,) contiguous float32, >= 0.
        k: 0-d float tensor on the same device, ``0 <= k <= N``.

    Returns:
        0-d float32 sum (0 when ``k`` is 0).
    """
    if values.numel() == 0:  # amax has no identity; the shape is host metadata, so this costs no sync
        return values.new_zeros(())
    bits = values.detach().view(torch.int32).clamp_min(0)  # -0.0 counts as 0.0
    count = torch.ceil(k)
    low = torch.zeros((), dtype=torch.int64, device=values.device)
    high = torch.full((), FLOAT32_INF_BITS + 1, dtype=torch.int64, device=values.device)
    for _ in range(31):  # high - low starts below 2**31
        middle = (low + high) // 2
        enough = (bits >= middle).sum() >= count
        low = torch.where(enough, middle, low)
        high = torch.where(enough, high, middle)
    above = bits > low
    kth_value = (values * (bits == low)).amax()
    total = (values * above).sum() + (count - above.sum()) * kth_value
    return torch.where(count > 0, total, torch.zeros_like(total))


def balanced_bce(logits: Tensor, target: Tensor, mask: Tensor, *, ohem_ratio: float, eps: float) -> Tensor:
    """BCE over all positives plus the ``k = min(#neg, ohem_ratio * #pos)`` hardest negatives, per batch.

    The top-k sum is taken by :func:`sum_of_largest` on the device, so ``k`` never leaves it (no
    ``.item()``, no boolean indexing). With no positives ``k`` is 0 and the term is 0, as in the DB
    reference implementation.

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
    hard_neg_sum = sum_of_largest((loss * negative).flatten(), k)  # non-negatives are 0
    return ((loss * positive).sum() + hard_neg_sum) / (pos_count + k + eps)
