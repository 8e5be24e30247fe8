"""DBNet++'s ASF decoder: shapes, parameter count from the paper's layers, and the attention's effect."""

from __future__ import annotations

import pytest
import torch

from ocr.models.asf import ASFDecoder, ScaleChannelSpatialAttention
from ocr.models.decoder import FPNDecoder
from tests.models.test_decoder import IN_CHANNELS, features

C = 32


def asf_parameters(channels: int, levels: int = 4) -> int:
    """ASF's parameters on top of the FPN, from Liao et al. (TPAMI 2022) Fig. 3 as its code builds them:
    the 3x3 conv C -> C with bias (9C^2 + C), channel attention C -> C/4 -> C without biases (C^2/2),
    spatial attention 3x3 then 1x1 on one channel (9 + 1), and the 1x1 conv C -> N levels (N C)."""
    return 9 * channels**2 + channels + channels**2 // 2 + 10 + levels * channels


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(("height", "width"), [(64, 96), (100, 76), (33, 129)])
def test_output_is_stride_4_with_c_channels(height, width):
    feats = features(height, width)
    out = ASFDecoder(in_channels=IN_CHANNELS, channels=C)(feats)
    assert tuple(out.shape) == (2, C, *feats[0].shape[-2:])


def test_parameters_are_the_fpn_plus_the_papers_asf_layers():
    fpn = FPNDecoder(in_channels=IN_CHANNELS, channels=C)
    asf = ASFDecoder(in_channels=IN_CHANNELS, channels=C)
    assert asf_parameters(C) == 9898  # 9216 + 32 + 512 + 10 + 128
    assert count(asf) - count(fpn) == asf_parameters(C)
    # at the CPU preset's width (128) on resnet18: 156,298 parameters more than the r18 FPN decoder
    assert count(ScaleChannelSpatialAttention(128, 4)) + 9 * 128**2 + 128 == asf_parameters(128) == 156298


def test_the_fpn_tensors_keep_their_names_and_shapes():
    """So an r18-FPN checkpoint fills every tensor but the attention's (model.init_from)."""
    fpn = FPNDecoder(in_channels=IN_CHANNELS, channels=C).state_dict()
    asf = ASFDecoder(in_channels=IN_CHANNELS, channels=C).state_dict()
    assert {key: value.shape for key, value in asf.items() if key in fpn} == {
        key: value.shape for key, value in fpn.items()
    }
    assert sorted({key.split(".")[0] for key in asf.keys() - fpn.keys()}) == ["asf_conv", "attention"]


def test_the_attention_weights_each_level_per_pixel():
    attention = ScaleChannelSpatialAttention(C, 4)
    with torch.no_grad():
        weights = attention(torch.randn(2, C, 10, 12))
    assert tuple(weights.shape) == (2, 4, 10, 12)
    assert bool(((weights > 0) & (weights < 1)).all())
    assert float(weights.std(dim=(2, 3)).min()) > 0  # varies over the pixels of every level


def test_the_output_is_the_fpn_levels_times_the_attention():
    torch.manual_seed(0)
    asf = ASFDecoder(in_channels=IN_CHANNELS, channels=C).eval()
    fpn = FPNDecoder(in_channels=IN_CHANNELS, channels=C).eval()
    fpn.load_state_dict(asf.state_dict(), strict=False)
    feats = features(64, 96)
    with torch.no_grad():
        plain = fpn(feats)
        weighted = asf(feats)
        assert not torch.allclose(weighted, plain, atol=1e-3) and not torch.allclose(weighted, plain / 2)
        torch.nn.init.zeros_(asf.attention.level_wise[0].weight)  # every weight sigmoid(0) = 1/2
        torch.testing.assert_close(asf(feats), plain / 2)


@pytest.mark.parametrize(
    "part",
    ["asf_conv", "attention.channel_wise", "attention.spatial_wise", "attention.level_wise"],
)
def test_every_attention_part_reaches_the_output(part):
    """Fails if the channel, spatial or level attention (or the conv before them) is left out of forward."""
    asf = ASFDecoder(in_channels=IN_CHANNELS, channels=C)
    asf(features(64, 96)).square().mean().backward()
    grads = [p.grad for p in asf.get_submodule(part).parameters()]
    assert grads and all(g is not None and float(g.abs().sum()) > 0 for g in grads)


def test_channels_must_split_in_four():
    with pytest.raises(ValueError, match="multiple of 4, got 30"):
        ASFDecoder(in_channels=IN_CHANNELS, channels=30)
