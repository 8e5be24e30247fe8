"""Decoders that fuse the encoder's stride 4/8/16/32 maps into one stride-4 map of ``out_channels``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ocr.utils.config_types import PositiveInt

__all__ = ["NUM_LEVELS", "FPNDecoder", "UNetDecoder", "check_in_channels", "conv_bn_relu", "upsample_to"]

NUM_LEVELS = 4


def check_in_channels(in_channels: list[int], name: str) -> None:
    if len(in_channels) != NUM_LEVELS:
        raise ValueError(
            f"{name}: expected {NUM_LEVELS} input channel counts (strides 4..32), got {in_channels}"
        )


def upsample_to(x: Tensor, ref: Tensor) -> Tensor:
    """Nearest upsampling of ``x`` to ``ref``'s spatial size (exact even for odd feature sizes)."""
    return F.interpolate(x, size=ref.shape[-2:], mode="nearest")


class FPNDecoder(nn.Module):
    """DBNet-style FPN: lateral 1x1 to C, top-down add, 3x3 smooth to C/4, upsample all to 1/4, concat.

    Args:
        in_channels: encoder channels at strides 4, 8, 16, 32 (DBNet passes ``encoder.channels``).
        channels: C, the fused output channels (divisible by 4).
    """

    def __init__(self, *, in_channels: list[int], channels: PositiveInt) -> None:
        super().__init__()
        check_in_channels(in_channels, "FPNDecoder")
        if channels % NUM_LEVELS:
            raise ValueError(f"FPNDecoder.channels: expected a multiple of {NUM_LEVELS}, got {channels}")
        self.out_channels = channels
        self.lateral = nn.ModuleList(nn.Conv2d(c, channels, 1, bias=False) for c in in_channels)
        self.smooth = nn.ModuleList(
            nn.Conv2d(channels, channels // NUM_LEVELS, 3, padding=1, bias=False) for _ in in_channels
        )

    def levels(self, features: list[Tensor]) -> list[Tensor]:
        """[(B, Ci, H/s, W/s) for s in 4, 8, 16, 32] -> the smoothed levels at stride 4, coarsest first:
        [(B, C/4, H/4, W/4) from s = 32, 16, 8, 4]."""
        laterals = [conv(f) for conv, f in zip(self.lateral, features, strict=True)]  # each (B, C, H/s, W/s)
        for i in range(NUM_LEVELS - 2, -1, -1):
            laterals[i] = laterals[i] + upsample_to(laterals[i + 1], laterals[i])
        smoothed = [conv(p) for conv, p in zip(self.smooth, laterals, strict=True)]  # each (B, C/4, H/s, W/s)
        fused = [smoothed[0]] + [upsample_to(p, smoothed[0]) for p in smoothed[1:]]  # each (B, C/4, H/4, W/4)
        return fused[::-1]

    def forward(self, features: list[Tensor]) -> Tensor:
        """[(B, Ci, H/s, W/s) for s in 4, 8, 16, 32] -> (B, C, H/4, W/4)."""
        return torch.cat(self.levels(features), dim=1)


def conv_bn_relu(in_ch: int, out_ch: int, kernel_size: int = 3) -> nn.Sequential:
    """Conv (same padding, no bias: BN follows) -> BN -> ReLU; keys ``0.weight``, ``1.*``."""
    return nn.Sequential(
        nn.Conv2d(in_ch, out_ch, kernel_size, padding=kernel_size // 2, bias=False),
        nn.BatchNorm2d(out_ch),
        nn.ReLU(True),
    )


class UNetDecoder(nn.Module):
    """U-Net decoder: from stride 32 up to 4, each step upsamples x2, concatenates the skip, two conv-BN-ReLU.

    Args:
        in_channels: encoder channels at strides 4, 8, 16, 32 (DBNet passes ``encoder.channels``).
        channels: C, the channels of every decoder stage and of the output.
    """

    def __init__(self, *, in_channels: list[int], channels: PositiveInt) -> None:
        super().__init__()
        check_in_channels(in_channels, "UNetDecoder")
        self.out_channels = channels
        self.bottleneck = nn.Conv2d(in_channels[-1], channels, 1, bias=False)
        self.stages = nn.ModuleList(
            nn.Sequential(conv_bn_relu(channels + skip, channels), conv_bn_relu(channels, channels))
            for skip in in_channels[-2::-1]
        )

    def forward(self, features: list[Tensor]) -> Tensor:
        """[(B, Ci, H/s, W/s) for s in 4, 8, 16, 32] -> (B, C, H/4, W/4)."""
        x = self.bottleneck(features[-1])  # (B, C, H/32, W/32)
        for stage, skip in zip(self.stages, features[-2::-1], strict=True):
            x = torch.cat([upsample_to(x, skip), skip], dim=1)  # (B, C + Cs, H/s, W/s)
            x = stage(x)  # (B, C, H/s, W/s)
        return x  # (B, C, H/4, W/4)
