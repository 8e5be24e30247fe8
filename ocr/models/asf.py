"""DBNet++'s decoder: the FPN's four stride-4 levels weighted by Adaptive Scale Fusion (ASF).

Liao et al., "Real-Time Scene Text Detection with Differentiable Binarization and Adaptive Scale Fusion"
(TPAMI 2022), section 3.2: the concatenated levels go through a 3x3 conv, then attention gives each level
a weight per pixel, and the weighted levels are concatenated again. The attention here is the paper's
scale-channel-spatial form (as in its code and MMOCR's ``ScaleChannelSpatialAttention``): channel
attention, then spatial attention on the channel mean, then a 1x1 conv to one sigmoid weight per level.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ocr.models.decoder import NUM_LEVELS, FPNDecoder
from ocr.utils.config_types import PositiveInt

__all__ = ["ASFDecoder", "ScaleChannelSpatialAttention"]

CHANNEL_REDUCTION = 4  # the channel attention's bottleneck: C -> C/4 -> C, as in the paper's code


class ScaleChannelSpatialAttention(nn.Module):
    """(B, C, H, W) fused features -> (B, N, H, W) per-level weights in (0, 1).

    Args:
        channels: C, the fused channels (divisible by ``CHANNEL_REDUCTION``).
        num_levels: N, the levels to weight.
    """

    def __init__(self, channels: int, num_levels: int) -> None:
        super().__init__()
        hidden = channels // CHANNEL_REDUCTION
        self.channel_wise = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(channels, hidden, 1, bias=False),
            nn.ReLU(inplace=True),
            nn.Conv2d(hidden, channels, 1, bias=False),
            nn.Sigmoid(),
        )
        self.spatial_wise = nn.Sequential(
            nn.Conv2d(1, 1, 3, padding=1, bias=False),
            nn.ReLU(inplace=True),
            nn.Conv2d(1, 1, 1, bias=False),
            nn.Sigmoid(),
        )
        self.level_wise = nn.Sequential(nn.Conv2d(channels, num_levels, 1, bias=False), nn.Sigmoid())

    def forward(self, x: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, N, H, W)."""
        x = x + self.channel_wise(x)  # (B, C, 1, 1) broadcast
        x = x + self.spatial_wise(x.mean(dim=1, keepdim=True))  # (B, 1, H, W) broadcast
        return self.level_wise(x)


class ASFDecoder(FPNDecoder):
    """FPN levels (:class:`~ocr.models.decoder.FPNDecoder`, same tensor names) fused by ASF.

    Args:
        in_channels: encoder channels at strides 4, 8, 16, 32 (DBNet passes ``encoder.channels``).
        channels: C, the fused output channels (divisible by 4; each level has C/4).
    """

    def __init__(self, *, in_channels: list[int], channels: PositiveInt) -> None:
        super().__init__(in_channels=in_channels, channels=channels)
        self.asf_conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.attention = ScaleChannelSpatialAttention(channels, NUM_LEVELS)

    def forward(self, features: list[Tensor]) -> Tensor:
        """[(B, Ci, H/s, W/s) for s in 4, 8, 16, 32] -> (B, C, H/4, W/4)."""
        levels = self.levels(features)  # N x (B, C/N, H/4, W/4)
        weights = self.attention(self.asf_conv(torch.cat(levels, dim=1)))  # (B, N, H/4, W/4)
        return torch.cat([weights[:, i : i + 1] * level for i, level in enumerate(levels)], dim=1)
