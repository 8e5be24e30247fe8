"""The device warp against its CPU reference (``render_crop``): the same crops from the same regions.

Tolerances, and why: OpenCV rounds to uint8 after its integer INTER_AREA and after its bilinear
``warpAffine`` (1/32 px positions, fixed-point weights); the device pools and samples in float32 and
rounds nothing. So the crops agree to one grey level where a region is pooled first (the pooled means
are rounded on the CPU only) and to rounding otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ocr.data.device_warp import pack_regions, warp_regions
from ocr.data.transforms import SourceImage
from ocr.data.warp import render_crop
from tests.helpers.receipt_fixtures import NO_AUGMENTATION, train_transform


def _image(height: int = 300, width: int = 220) -> np.ndarray:
    """Smooth texture with sharp-edged blocks, as print on paper."""
    rng = np.random.default_rng(0)
    coarse = rng.integers(0, 256, (height // 10 + 1, width // 10 + 1, 3)).astype(np.float32)
    rows, cols = np.arange(height) / 10, np.arange(width) / 10
    smooth = coarse[rows.astype(int)][:, cols.astype(int)]  # blocky, then blurred by the mean of shifts
    image = sum(np.roll(smooth, (dy, dx), axis=(0, 1)) for dy in range(-4, 5) for dx in range(-4, 5)) / 81
    image = image.astype(np.uint8)
    image[60:90, 20:180] = (10, 20, 200)
    image[150:156, 40:200] = 255
    return image


@pytest.mark.parametrize("train_long_side", [96, 400])  # crops that area-average (pool >= 2), and upscale
def test_device_crops_match_the_cpu_reference(train_long_side: int) -> None:
    transform = train_transform(
        64,
        **{**NO_AUGMENTATION, "rotate_limit": 15.0, "p_rotate": 0.7, "p_flip": 0.5, "fill": 7},
        train_long_side=train_long_side,
        p_text_crop=0.0,
    )
    transform.set_random_seed(0)
    source = SourceImage(_image(), 1.0, 220, 300)
    regions, warps, expected = [], [], []
    for _ in range(12):
        region, result = transform.crop_region(source, [], [])
        assert result.warp is not None and result.image.shape[1:] == region.shape[:2]
        regions.append(result.image)
        warps.append(result.warp)
        expected.append(render_crop(region, result.warp).astype(np.float64))
    pools = {w.pool for w in warps}
    assert (max(pools) >= 2) if train_long_side == 96 else (pools == {1})
    out = torch.empty(sum(r.numel() for r in regions), dtype=torch.uint8)
    images, packed = pack_regions(regions, warps, out)
    got = warp_regions(images, packed).permute(0, 2, 3, 1).numpy() * 255.0  # (B, H, W, 3)
    difference = np.abs(np.round(got) - np.stack(expected))
    assert difference.max() <= 1 and difference.mean() < (0.15 if max(pools) >= 2 else 0.01)
    assert (np.stack(expected) == 7).any(), "some crops must leave the image (border value 7)"


def test_warp_refuses_an_unpacked_batch() -> None:
    transform = train_transform(32, **NO_AUGMENTATION)
    region, result = transform.crop_region(SourceImage(_image(), 1.0, 220, 300), [], [])
    assert result.warp is not None
    out = torch.empty(result.image.numel(), dtype=torch.uint8)
    _, packed = pack_regions([result.image], [result.warp], out)
    with pytest.raises(TypeError, match=r"images: expected the packed source regions, 1-D uint8"):
        warp_regions(result.image.float(), packed)
    with pytest.raises(ValueError, match="out has"):
        pack_regions([result.image], [result.warp], torch.empty(1, dtype=torch.uint8))
