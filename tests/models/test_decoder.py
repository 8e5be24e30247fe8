from __future__ import annotations

import pytest
import torch

from ocr.models.decoder import FPNDecoder, UNetDecoder

IN_CHANNELS = [16, 24, 40, 64]


def features(height, width, batch=2):
    """Encoder-like maps at strides 4..32 with ceil sizes, as strided convs produce for odd inputs."""
    sizes = [(-(-height // s), -(-width // s)) for s in (4, 8, 16, 32)]
    return [torch.randn(batch, c, h, w) for c, (h, w) in zip(IN_CHANNELS, sizes, strict=True)]


@pytest.mark.parametrize("decoder_cls", [FPNDecoder, UNetDecoder])
@pytest.mark.parametrize(("height", "width"), [(64, 96), (100, 76)])
def test_output_is_stride_4_with_out_channels(decoder_cls, height, width):
    decoder = decoder_cls(in_channels=IN_CHANNELS, channels=32)
    feats = features(height, width)
    out = decoder(feats)
    assert decoder.out_channels == 32
    assert tuple(out.shape) == (2, 32, *feats[0].shape[-2:])


def test_fpn_channels_must_split_in_four():
    with pytest.raises(ValueError, match="multiple of 4, got 30"):
        FPNDecoder(in_channels=IN_CHANNELS, channels=30)


@pytest.mark.parametrize("decoder_cls", [FPNDecoder, UNetDecoder])
def test_four_levels_required(decoder_cls):
    with pytest.raises(ValueError, match=r"expected 4 input channel counts .*got \[16, 24, 40\]"):
        decoder_cls(in_channels=IN_CHANNELS[:3], channels=32)


def test_fpn_gradients_reach_every_level():
    decoder = FPNDecoder(in_channels=IN_CHANNELS, channels=32)
    feats = [f.requires_grad_() for f in features(64, 64)]
    decoder(feats).sum().backward()
    assert all(f.grad is not None and f.grad.abs().sum() > 0 for f in feats)
