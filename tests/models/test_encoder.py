from __future__ import annotations

import pytest
import timm
import torch
from safetensors.torch import save_file

from ocr.models import encoder as encoder_module
from ocr.models.encoder import TimmEncoder


def make(**overrides):
    args = {"name": "resnet18", "pretrained": False, "weights_path": None, "out_indices": [1, 2, 3, 4]}
    args.update(overrides)
    return TimmEncoder(**args)


def test_channels_and_shapes_from_feature_info():
    enc = make()
    assert enc.channels == [64, 128, 256, 512]
    feats = enc(torch.randn(1, 3, 64, 96))
    assert [tuple(f.shape) for f in feats] == [
        (1, c, 64 // s, 96 // s) for c, s in zip(enc.channels, (4, 8, 16, 32), strict=True)
    ]


def test_reductions_other_than_4_to_32_rejected():
    with pytest.raises(ValueError, match=r"reductions \[2, 4, 8, 16\], expected \[4, 8, 16, 32\]"):
        make(out_indices=[0, 1, 2, 3])


def _classifier_state(tmp_path, suffix):
    """A full resnet18 classification state dict (with fc.*), as a user would download it."""
    full = timm.create_model("resnet18", pretrained=False)
    state = {k: torch.randn_like(v) if v.is_floating_point() else v for k, v in full.state_dict().items()}
    path = tmp_path / f"resnet18{suffix}"
    if suffix == ".safetensors":
        save_file(state, str(path))
    else:
        torch.save(state, path)
    return path, state


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_weights_path_loads_local_state_dict(tmp_path, suffix):
    path, state = _classifier_state(tmp_path, suffix)
    enc = make(weights_path=str(path))
    loaded = enc.body.state_dict()
    assert torch.equal(loaded["conv1.weight"], state["conv1.weight"])
    assert torch.equal(loaded["layer4.1.bn2.running_var"], state["layer4.1.bn2.running_var"])


def test_weights_path_with_missing_keys_fails(tmp_path):
    path, state = _classifier_state(tmp_path, ".pth")
    del state["layer3.0.conv1.weight"]
    torch.save(state, path)
    with pytest.raises(ValueError, match=r"1 missing keys .*layer3\.0\.conv1\.weight"):
        make(weights_path=str(path))


def test_weights_path_with_foreign_keys_fails(tmp_path):
    path, state = _classifier_state(tmp_path, ".pth")
    state["decoder.weight"] = torch.zeros(1)
    torch.save(state, path)
    with pytest.raises(ValueError, match=r"1 unexpected keys .*decoder\.weight"):
        make(weights_path=str(path))


def test_weights_path_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="weights_path"):
        make(weights_path=str(tmp_path / "nope.pth"))


def test_pretrained_and_weights_path_are_exclusive(tmp_path):
    with pytest.raises(ValueError, match="pretrained=true and weights_path"):
        make(pretrained=True, weights_path=str(tmp_path / "w.pth"))


def test_failed_download_says_how_to_pass_local_weights(monkeypatch):
    real_create = timm.create_model

    def offline_create(name, pretrained=False, **kwargs):
        if pretrained:
            raise OSError("We couldn't connect to 'https://huggingface.co'\nmore details")
        return real_create(name, pretrained=pretrained, **kwargs)

    monkeypatch.setattr(encoder_module.timm, "create_model", offline_create)
    with pytest.raises(RuntimeError) as info:
        make(pretrained=True)
    message = str(info.value)
    assert "\n" not in message
    assert "download" in message and "failed" in message
    assert "model.encoder.weights_path=" in message and "pretrained=false" in message
