from __future__ import annotations

from functools import partial

import pytest
import torch

from ocr.lightning_modules.build import build_net_and_loss
from ocr.machine.hardware import pick
from ocr.models.asf import ASFDecoder
from ocr.models.dbnet import DBNet
from ocr.models.decoder import FPNDecoder, UNetDecoder
from ocr.models.encoder import TimmEncoder
from ocr.models.head import DBHead
from ocr.models.pan import PANDecoder
from ocr.run.config import compose_config
from ocr.types import DBOutput

# Each option inherits dbnet_resnet18_fpn and changes one thing: (timm encoder, decoder class, decoder
# output channels: the hardware preset's width, 128 on a CPU, or PAN's 4 x 128 on any hardware).
WIDTH = pick(128, 256)
MODELS = {
    "dbnet_resnet18_fpn": ("resnet18", FPNDecoder, WIDTH),
    "dbnet_resnet18_unet": ("resnet18", UNetDecoder, WIDTH),
    "dbnet_resnet50_fpn": ("resnet50", FPNDecoder, WIDTH),
    "dbnet_mobilenetv3_fpn": ("mobilenetv3_large_100", FPNDecoder, WIDTH),
    "dbnetpp_resnet18": ("resnet18", ASFDecoder, WIDTH),
    "dbnet_resnet18_pan": ("resnet18", PANDecoder, 512),
}


def build_model(name, overrides=()):
    return build_net_and_loss(compose_config("train", [f"model={name}", *overrides]))[0]


def small_dbnet():
    encoder = TimmEncoder(name="resnet10t", pretrained=False, weights_path=None, out_indices=[1, 2, 3, 4])
    return DBNet(
        encoder=encoder,
        decoder=partial(FPNDecoder, channels=32),
        head=partial(DBHead, k=50, prior_prob=0.01),
    )


@pytest.mark.parametrize("name", MODELS)
def test_every_model_config_instantiates_and_runs(name):
    model = build_model(name).eval()
    encoder, decoder, channels = MODELS[name]
    assert isinstance(model, DBNet) and type(model.decoder) is decoder
    assert model.encoder.body.default_cfg["architecture"] == encoder
    assert model.decoder.out_channels == channels
    assert model.head.k == 50
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


@pytest.mark.parametrize("name", ["dbnetpp_resnet18", "dbnet_resnet18_pan"])
def test_a_new_decoder_overfits_one_tiny_batch(name):
    """50 Adam steps of the decoder and head on one 64x64 batch of text bars cut the DB loss to under half
    (the encoder's features computed once: the decoder is what is new)."""
    overrides = [f"model={name}", "hardware=cpu", "model.decoder.channels=16"]
    model, loss_fn = build_net_and_loss(compose_config("train", overrides))
    model.train()
    with torch.no_grad():
        features = model.encoder(torch.randn(2, 3, 64, 64))
    prob = torch.zeros(2, 1, 64, 64)
    prob[:, :, 20:28, 8:56] = 1.0
    prob[1, :, 40:46, 12:40] = 1.0
    batch = {
        "prob_map": prob,
        "prob_mask": torch.ones_like(prob),
        "thresh_map": 0.3 + 0.4 * prob,
        "thresh_mask": torch.ones_like(prob),
        "image_id": ["a.jpg", "b.jpg"],
    }
    optimizer = torch.optim.Adam([*model.decoder.parameters(), *model.head.parameters()], lr=1e-2)
    losses = []
    for _ in range(50):
        optimizer.zero_grad()
        loss = loss_fn(model.head(model.decoder(features), output_size=(64, 64)), batch)["loss"]
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 2, losses
