from __future__ import annotations

from functools import partial

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from ocr.models.dbnet import DBNet
from ocr.models.decoder import FPNDecoder
from ocr.models.encoder import TimmEncoder
from ocr.models.head import DBHead
from ocr.types import DBOutput
from tests.helpers.paths import REPO_ROOT

MODEL_CONFIGS = REPO_ROOT / "configs" / "model"
NAMES = ["dbnet_resnet18_fpn", "dbnet_resnet18_unet", "dbnet_resnet50_fpn", "dbnet_mobilenetv3_fpn"]


def compose_model(name, overrides=()):
    with initialize_config_dir(config_dir=str(MODEL_CONFIGS), version_base="1.3"):
        return compose(config_name=name, overrides=list(overrides))


def small_dbnet():
    encoder = TimmEncoder(name="resnet10t", pretrained=False, weights_path=None, out_indices=[1, 2, 3, 4])
    return DBNet(
        encoder=encoder,
        decoder=partial(FPNDecoder, channels=32),
        head=partial(DBHead, k=50, prior_prob=0.01),
    )


@pytest.mark.parametrize("name", NAMES)
def test_every_model_config_instantiates_and_runs(name):
    model = instantiate(compose_model(name)).eval()
    assert isinstance(model, DBNet)
    assert model.decoder.out_channels == 256
    with torch.no_grad():
        out = model(torch.randn(1, 3, 64, 96))
    assert isinstance(out, DBOutput)
    assert all(tuple(t.shape) == (1, 1, 64, 96) for t in out)


def test_decoder_and_head_get_channels_from_the_encoder():
    model = small_dbnet()
    assert model.decoder.lateral[-1].in_channels == model.encoder.channels[-1]
    assert model.head.prob_head[0].in_channels == 32


def test_gradients_flow_to_the_encoder():
    model = small_dbnet()
    out = model(torch.randn(2, 3, 64, 64))
    (out.prob_logits.mean() + out.thresh_logits.mean() + out.binary_logits.mean()).backward()
    first = next(model.encoder.parameters())
    assert first.grad is not None and first.grad.abs().sum() > 0


def test_channels_last_and_bf16_autocast():
    model = small_dbnet().eval().to(memory_format=torch.channels_last)
    images = torch.randn(2, 3, 64, 64).to(memory_format=torch.channels_last)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(images)
    assert all(tuple(t.shape) == (2, 1, 64, 64) and torch.isfinite(t.float()).all() for t in out)


def test_wrong_image_shape_is_named():
    with pytest.raises(ValueError, match=r"images: expected \(B, 3, H, W\), got \(2, 1, 64, 64\)"):
        small_dbnet()(torch.randn(2, 1, 64, 64))
