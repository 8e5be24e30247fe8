"""DB head: probability and threshold branches, returning logits at the input resolution."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ocr.models.autocast import autocast_disabled
from ocr.types import DBOutput

__all__ = ["DBHead", "prior_bias"]


def prior_bias(prior_prob: float) -> float:
    """Bias b with sigmoid(b) == prior_prob: ``-log((1 - p) / p)`` (focal-loss style background prior)."""
    if not 0.0 < prior_prob < 1.0:
        raise ValueError(f"DBHead.prior_prob: expected a probability in (0, 1), got {prior_prob}")
    return -math.log((1.0 - prior_prob) / prior_prob)


def _branch(in_channels: int) -> nn.Sequential:
    hidden = in_channels // 4
    return nn.Sequential(
        nn.Conv2d(in_channels, hidden, 3, padding=1, bias=False),  # (B, C/4, H/4, W/4)
        nn.BatchNorm2d(hidden),
        nn.ReLU(inplace=True),
        nn.ConvTranspose2d(hidden, hidden, 2, stride=2, bias=False),  # (B, C/4, H/2, W/2); BN follows
        nn.BatchNorm2d(hidden),
        nn.ReLU(inplace=True),
        nn.ConvTranspose2d(hidden, 1, 2, stride=2),  # (B, 1, H, W)
    )


class DBHead(nn.Module):
    """Differentiable-binarization head.

    The DB step function is ``B = 1 / (1 + exp(-k (P - T)))`` with P, T the probability and threshold
    maps, so its logit is ``binary_logits = k * (sigmoid(prob_logits) - sigmoid(thresh_logits))``.
    Returning logits lets the losses use the numerically stable ``*_with_logits`` forms. The binary
    logits are computed in float32 even under autocast: in bf16 a probability near 0.5 steps by about
    0.004, which ``k = 50`` turns into logit steps of about 0.2.

    Args:
        in_channels: decoder output channels (DBNet passes ``decoder.out_channels``).
        k: amplification factor of the step function (50 in the DB paper).
        prior_prob: initial text probability of the untrained prob branch, so it does not start saturated.
    """

    def __init__(self, *, in_channels: int, k: float, prior_prob: float) -> None:
        super().__init__()
        if in_channels < 4:
            raise ValueError(f"DBHead.in_channels: expected >= 4, got {in_channels}")
        self.k = k
        self.prob_head = _branch(in_channels)
        self.thresh_head = _branch(in_channels)
        # The last conv's bias: torch types a Sequential item's attributes as Tensor | Module.
        nn.init.constant_(self.prob_head[-1].bias, prior_bias(prior_prob))  # type: ignore[arg-type]

    def forward(self, features: Tensor, output_size: tuple[int, int]) -> DBOutput:
        """(B, C, H/4, W/4) fused features -> DBOutput of (B, 1, H, W) logits, ``output_size == (H, W)``.

        ``binary_logits`` is float32; the other two keep the autocast dtype.
        """
        prob_logits = self._resize(self.prob_head(features), output_size)
        thresh_logits = self._resize(self.thresh_head(features), output_size)
        with autocast_disabled(prob_logits.device.type):
            prob_map = torch.sigmoid(prob_logits.float())
            binary_logits = self.k * (prob_map - torch.sigmoid(thresh_logits.float()))
        return DBOutput(prob_logits, thresh_logits, binary_logits)

    @staticmethod
    def _resize(logits: Tensor, output_size: tuple[int, int]) -> Tensor:
        """Match (H, W) when it is not a multiple of the encoder stride (the x4 upsampling overshoots)."""
        if tuple(logits.shape[-2:]) == tuple(output_size):
            return logits
        return F.interpolate(logits, size=output_size, mode="bilinear", align_corners=False)
