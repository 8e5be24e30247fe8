"""PAN's neck: cascaded Feature Pyramid Enhancement Modules (FPEM) and the Feature Fusion Module (FFM).

Wang et al., "Efficient and Accurate Arbitrary-Shaped Text Detection with Pixel Aggregation Network"
(ICCV 2019), section 3.2: the encoder's four maps are reduced to C channels by 1x1 convs; each FPEM
enhances the pyramid from stride 32 down to 4 (up-scale), then from 4 back to 32 (down-scale), each step an
element-wise add followed by a depthwise-separable 3x3 conv, BN and ReLU; the FFM adds the FPEMs' outputs
scale by scale, upsamples them to stride 4 and concatenates them. Here the DB head follows, not PAN's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ocr.models.decoder import NUM_LEVELS, check_in_channels, conv_bn_relu, upsample_to
from ocr.utils.config_types import PositiveInt

__all__ = ["FPEM", "PANDecoder", "separable_conv_bn_relu"]


def separable_conv_bn_relu(channels: int, stride: int) -> nn.Sequential:
    """Depthwise 3x3 conv (``stride``) -> pointwise 1x1 conv -> BN -> ReLU; C -> C channels."""
    return nn.Sequential(
        nn.Conv2d(channels, channels, 3, stride=stride, padding=1, groups=channels, bias=False),
        conv_bn_relu(channels, channels, kernel_size=1),
    )


class FPEM(nn.Module):
    """One Feature Pyramid Enhancement Module: C channels at every level, sizes kept.

    Args:
        channels: C, the channels of every level.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        # up[j] makes stride 16, 8, 4; down[j] makes stride 8, 16, 32 (a stride-2 conv from the finer size).
        self.up = nn.ModuleList(separable_conv_bn_relu(channels, 1) for _ in range(NUM_LEVELS - 1))
        self.down = nn.ModuleList(separable_conv_bn_relu(channels, 2) for _ in range(NUM_LEVELS - 1))

    def forward(self, levels: list[Tensor]) -> list[Tensor]:
        """[(B, C, H/s, W/s) for s in 4, 8, 16, 32] -> the same shapes, enhanced."""
        out = list(levels)
        for j, i in enumerate(range(NUM_LEVELS - 2, -1, -1)):  # up-scale: strides 16, 8, 4
            out[i] = self.up[j](out[i] + upsample_to(out[i + 1], out[i]))
        for j, i in enumerate(range(1, NUM_LEVELS)):  # down-scale: strides 8, 16, 32
            out[i] = self.down[j](out[i - 1] + upsample_to(out[i], out[i - 1]))
        return out


class PANDecoder(nn.Module):
    """1x1 reduction to C, ``num_fpems`` cascaded FPEMs, FFM: output 4C channels at stride 4.

    Args:
        in_channels: encoder channels at strides 4, 8, 16, 32 (DBNet passes ``encoder.channels``).
        channels: C, every level's channels after the reduction (128 in the paper).
        num_fpems: FPEMs in the cascade (2 in the paper).
    """

    def __init__(self, *, in_channels: list[int], channels: PositiveInt, num_fpems: PositiveInt) -> None:
        super().__init__()
        check_in_channels(in_channels, "PANDecoder")
        self.out_channels = NUM_LEVELS * channels
        self.reduce = nn.ModuleList(conv_bn_relu(c, channels, kernel_size=1) for c in in_channels)
        self.fpems = nn.ModuleList(FPEM(channels) for _ in range(num_fpems))

    def forward(self, features: list[Tensor]) -> Tensor:
        """[(B, Ci, H/s, W/s) for s in 4, 8, 16, 32] -> (B, 4C, H/4, W/4)."""
        levels = [conv(f) for conv, f in zip(self.reduce, features, strict=True)]  # each (B, C, H/s, W/s)
        summed: list[Tensor] = []
        for fpem in self.fpems:
            levels = fpem(levels)
            summed = levels if not summed else [a + b for a, b in zip(summed, levels, strict=True)]
        size = summed[0].shape[-2:]
        upsampled = [F.interpolate(p, size=size, mode="bilinear", align_corners=False) for p in summed[1:]]
        return torch.cat([summed[0], *upsampled], dim=1)  # (B, 4C, H/4, W/4)
