"""PAN's neck: shapes, parameter count from the paper's layers, and the FPEM cascade with the FFM's sum."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ocr.models.pan import FPEM, PANDecoder
from ocr.utils.config_types import check_config_types
from ocr.utils.errors import ConfigValueError
from tests.models.test_decoder import IN_CHANNELS, features

C = 16
RESNET18_CHANNELS = [64, 128, 256, 512]


def pan_parameters(in_channels: list[int], channels: int, num_fpems: int) -> int:
    """PAN's neck parameters from Wang et al. (ICCV 2019) Sec. 3.2 and Fig. 4: a 1x1 reduction of every
    encoder map to C (conv Ci C, BN 2C; no conv bias before a BN), then per FPEM six depthwise-separable
    convs (3 up-scale, 3 down-scale), each a depthwise 3x3 (9C), a pointwise 1x1 (C^2) and a BN (2C).
    The FFM (add, upsample, concatenate) has none."""
    reduction = sum(c * channels + 2 * channels for c in in_channels)
    fpem = 6 * (9 * channels + channels**2 + 2 * channels)
    return reduction + num_fpems * fpem


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def pan(num_fpems: int = 2) -> PANDecoder:
    return PANDecoder(in_channels=IN_CHANNELS, channels=C, num_fpems=num_fpems)


@pytest.mark.parametrize(("height", "width"), [(64, 96), (100, 76), (33, 129)])
def test_output_is_stride_4_with_four_times_c_channels(height, width):
    feats = features(height, width)
    decoder = pan()
    assert decoder.out_channels == 4 * C
    assert tuple(decoder(feats).shape) == (2, 4 * C, *feats[0].shape[-2:])


@pytest.mark.parametrize(("height", "width"), [(64, 64), (100, 76)])
def test_an_fpem_keeps_every_levels_shape(height, width):
    levels = [torch.randn(1, C, *f.shape[-2:]) for f in features(height, width)]
    assert [o.shape for o in FPEM(C)(levels)] == [x.shape for x in levels]


def test_parameters_follow_the_papers_layers():
    # (152 + 8) C for the reductions, 6 (9C + C^2 + 2C) per FPEM
    assert count(pan()) == pan_parameters(IN_CHANNELS, C, 2) == 2432 + 2 * 2592
    # resnet18 at the paper's C = 128: 123,904 for the reductions + 2 x 106,752 for the FPEMs
    assert count(PANDecoder(in_channels=RESNET18_CHANNELS, channels=128, num_fpems=2)) == 337408
    assert pan_parameters(RESNET18_CHANNELS, 128, 2) == 337408
    assert count(pan(1)) == pan_parameters(IN_CHANNELS, C, 1)


def test_the_fpems_run_in_cascade_and_the_ffm_adds_their_outputs():
    """Fails with one FPEM, with FPEMs applied side by side to the reduced maps, or with an FFM that
    keeps only the last FPEM's output."""
    decoder = pan().eval()
    assert len(decoder.fpems) == 2
    feats = features(64, 96)
    with torch.no_grad():
        reduced = [conv(f) for conv, f in zip(decoder.reduce, feats, strict=True)]
        first = decoder.fpems[0](reduced)
        second = decoder.fpems[1](first)
        summed = [a + b for a, b in zip(first, second, strict=True)]
        size = summed[0].shape[-2:]
        upsampled = [F.interpolate(p, size=size, mode="bilinear", align_corners=False) for p in summed[1:]]
        expected = torch.cat([summed[0], *upsampled], dim=1)
        torch.testing.assert_close(decoder(feats), expected)


def test_the_second_fpem_changes_the_output():
    decoder = pan().eval()
    feats = features(64, 96)
    with torch.no_grad():
        before = decoder(feats)
        for parameter in decoder.fpems[1].parameters():
            parameter.zero_()
        assert not torch.allclose(decoder(feats), before, atol=1e-3)


@pytest.mark.parametrize("part", ["up.0", "up.2", "down.0", "down.2"])
@pytest.mark.parametrize("index", [0, 1])
def test_both_enhancements_of_each_fpem_reach_the_output(part, index):
    """Fails if an FPEM skips its up-scale or its down-scale enhancement."""
    decoder = pan()
    decoder(features(64, 96)).square().mean().backward()
    grads = [p.grad for p in decoder.fpems[index].get_submodule(part).parameters()]
    assert grads and all(g is not None and float(g.abs().sum()) > 0 for g in grads)


def test_the_config_check_names_a_channel_count_or_cascade_below_one(compose_cfg, tmp_path):
    """channels=0 failed in torch's conv constructor, without the key."""
    overrides = ["model=dbnet_resnet18_pan", "model.decoder.channels=0", "model.decoder.num_fpems=0"]
    with pytest.raises(ConfigValueError) as info:
        check_config_types(compose_cfg("train", overrides, tmp_path))
    assert "model.decoder.channels: expected >= 1, got 0" in str(info.value)
    assert "model.decoder.num_fpems: expected >= 1, got 0" in str(info.value)
