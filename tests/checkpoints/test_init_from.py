"""model.init_from: network weights from a checkpoint or state dict, in the one construction path."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from safetensors.torch import save_file
from torch import Tensor, nn

from ocr.lightning_modules.build import build_module, build_net_and_loss
from ocr.run.config import compose_config

TINY_MODEL = ["hardware=cpu", "model.decoder.channels=16"]

Compose = Callable[..., DictConfig]


@pytest.fixture(scope="module")
def source() -> dict[str, Tensor]:
    """A tiny module's state dict (keys ``net.*``), with weights unlike a fresh build's."""
    torch.manual_seed(123)
    module = build_module(compose_config("train", TINY_MODEL))
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(1.0)
    return module.state_dict()


def _net(
    init_from: Path | str | None, *, weights_free: bool = False, extra: tuple[str, ...] = ()
) -> nn.Module:
    cfg = compose_config("train", [*TINY_MODEL, *extra])
    cfg.model.init_from = None if init_from is None else str(init_from)
    return build_net_and_loss(cfg, weights_free=weights_free)[0]


def _assert_equal(net: nn.Module, expected: dict[str, Tensor], prefix: str = "net.") -> None:
    loaded = net.state_dict()
    assert {prefix + key for key in loaded} == expected.keys()
    for key, value in loaded.items():
        torch.testing.assert_close(value, expected[prefix + key], rtol=0, atol=0, msg=key)


def test_a_run_checkpoint_loads_its_network(source: dict[str, Tensor], tmp_path: Path) -> None:
    config = OmegaConf.to_container(compose_config("train", TINY_MODEL, tmp_path), resolve=False)
    path = tmp_path / "best.ckpt"
    torch.save({"state_dict": source, "ocr_config": config, "epoch": 3, "global_step": 40}, path)
    _assert_equal(_net(path), source)


@pytest.mark.parametrize("suffix", [".pth", ".pt", ".safetensors"])
@pytest.mark.parametrize("prefixed", [True, False])
def test_a_plain_state_dict_loads_with_or_without_the_module_prefix(
    suffix: str, prefixed: bool, source: dict[str, Tensor], tmp_path: Path
) -> None:
    state = source if prefixed else {key.removeprefix("net."): value for key, value in source.items()}
    path = tmp_path / f"weights{suffix}"
    if suffix == ".safetensors":
        save_file({key: value.contiguous() for key, value in state.items()}, str(path))
    else:
        torch.save(state, path)
    _assert_equal(_net(path), source)


def test_missing_and_unexpected_keys_are_reported_and_the_rest_loads(
    source: dict[str, Tensor], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = [key for key in source if key.startswith("net.head.")]
    state = {key: value for key, value in source.items() if key not in missing}
    state["net.classifier.weight"] = torch.zeros(3)
    path = tmp_path / "partial.pth"
    torch.save(state, path)
    torch.manual_seed(0)
    fresh = _net(None).state_dict()
    torch.manual_seed(0)  # the same initial weights for the tensors the file lacks
    with caplog.at_level(logging.INFO, logger="ocr.checkpoints.init_from"):
        net = _net(path)
    assert f"{len(missing)} network tensors are not in the file" in caplog.text
    assert missing[0].removeprefix("net.") in caplog.text
    assert "1 tensors of the file are not in the network and are ignored: classifier.weight" in caplog.text
    assert f"Loaded {len(source) - len(missing)} of {len(source)} network tensors" in caplog.text
    loaded = net.state_dict()
    for key in source:
        name = key.removeprefix("net.")
        torch.testing.assert_close(loaded[name], fresh[name] if key in missing else source[key], msg=key)


def test_a_shape_mismatch_is_refused_naming_the_parameter_and_both_shapes(tmp_path: Path) -> None:
    wider = build_module(compose_config("train", ["hardware=cpu", "model.decoder.channels=32"]))
    path = tmp_path / "wider.pth"
    torch.save(wider.state_dict(), path)
    with pytest.raises(
        ValueError, match=r"model.init_from=.*wider\.pth: \d+ tensor\(s\) do not fit"
    ) as caught:
        _net(path)
    assert "decoder.lateral.0.weight: (32, 64, 1, 1) in the file, (16, 64, 1, 1) in the model" in str(
        caught.value
    )


def test_a_file_of_another_network_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"fc.weight": torch.zeros(2, 2)}, path)
    with pytest.raises(ValueError, match="got none of its"):
        _net(path)


@pytest.mark.parametrize("name", ["absent.ckpt", "absent.pth"])
def test_a_missing_file_names_the_key_and_path(name: str, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=rf"model.init_from={tmp_path / name}: .*no such file"):
        _net(tmp_path / name)


def test_another_suffix_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(b"x")
    with pytest.raises(ValueError, match=r"got the suffix '\.bin'"):
        _net(path)


def test_weights_free_builds_never_read_the_file(tmp_path: Path) -> None:
    net = _net(tmp_path / "gone.ckpt", weights_free=True)
    assert isinstance(net, nn.Module)


def test_a_stored_config_without_the_key_still_builds(compose_cfg: Compose, tmp_path: Path) -> None:
    cfg = compose_cfg("train", TINY_MODEL, tmp_path)
    container = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(container, dict)
    del container["model"]["init_from"]
    assert isinstance(build_net_and_loss(OmegaConf.create(container))[0], nn.Module)


def _fresh_and_loaded(
    name: str, path: Path, caplog: pytest.LogCaptureFixture
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """(a fresh build's tensors, the tensors after loading ``path``) of ``model=name``, same seed."""
    extra = (f"model={name}",)
    torch.manual_seed(0)
    fresh = _net(None, extra=extra).state_dict()
    torch.manual_seed(0)
    with caplog.at_level(logging.INFO, logger="ocr.checkpoints.init_from"):
        loaded = _net(path, extra=extra).state_dict()
    return fresh, loaded


def test_dbnetpp_takes_every_tensor_of_an_fpn_checkpoint_and_starts_the_attention_fresh(
    source: dict[str, Tensor], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "fpn.pt"
    torch.save(source, path)
    fresh, loaded = _fresh_and_loaded("dbnetpp_resnet18", path, caplog)
    new = sorted(key for key in loaded if f"net.{key}" not in source)
    assert new and all(key.startswith(("decoder.asf_conv.", "decoder.attention.")) for key in new)
    for key, value in loaded.items():
        expected = fresh[key] if key in new else source[f"net.{key}"]
        torch.testing.assert_close(value, expected, rtol=0, atol=0, msg=key)
    assert f"{len(new)} network tensors are not in the file and keep their initial weights" in caplog.text
    assert f"Loaded {len(loaded) - len(new)} of {len(loaded)} network tensors" in caplog.text
    assert "another family" not in caplog.text and "not in the network" not in caplog.text


def test_pan_takes_the_encoder_of_an_fpn_checkpoint_and_logs_what_starts_fresh(
    source: dict[str, Tensor], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another decoder family: the head's tensors of other shapes (its input is 4 x 16 channels, not 16)
    start fresh instead of stopping the run; the encoder loads whole."""
    path = tmp_path / "fpn.pth"
    torch.save(source, path)
    fresh, loaded = _fresh_and_loaded("dbnet_resnet18_pan", path, caplog)
    other_shape = [k for k in loaded if f"net.{k}" in source and source[f"net.{k}"].shape != loaded[k].shape]
    assert other_shape and all(key.startswith("head.") for key in other_shape)
    for key, value in loaded.items():
        if key.startswith("encoder."):
            torch.testing.assert_close(value, source[f"net.{key}"], rtol=0, atol=0, msg=key)
        elif key.startswith("decoder.") or key in other_shape:
            torch.testing.assert_close(value, fresh[key], rtol=0, atol=0, msg=key)
    assert (
        f"the file's decoder is another family (its tensor names differ from the network's); "
        f"{len(other_shape)} decoder/head tensors of other shapes keep their initial weights: "
        f"{other_shape[0]}"
    ) in caplog.text
    decoder = [key for key in loaded if key.startswith("decoder.")]
    assert f"{len(decoder)} network tensors are not in the file" in caplog.text
    fpn_decoder = [key for key in source if key.startswith("net.decoder.")]
    assert f"{len(fpn_decoder)} tensors of the file are not in the network and are ignored" in caplog.text
    assert f"Loaded {len(loaded) - len(decoder) - len(other_shape)} of {len(loaded)}" in caplog.text


def test_another_decoder_family_still_needs_an_encoder_that_fits(
    source: dict[str, Tensor], tmp_path: Path
) -> None:
    state = dict(source)
    state["net.encoder.body.conv1.weight"] = torch.zeros(8, 3, 7, 7)
    path = tmp_path / "other_encoder.pth"
    torch.save(state, path)
    with pytest.raises(
        ValueError, match=r"1 tensor\(s\) do not fit.*encoder\.body\.conv1\.weight: \(8, 3, 7, 7\)"
    ):
        _net(path, extra=("model=dbnet_resnet18_pan",))


def test_the_same_decoder_family_at_another_width_is_refused(tmp_path: Path) -> None:
    wider = build_module(compose_config("train", [*TINY_MODEL, "model=dbnet_resnet18_pan"]))
    path = tmp_path / "pan16.pth"
    torch.save(wider.state_dict(), path)
    with pytest.raises(
        ValueError, match=r"tensor\(s\) do not fit .*decoder\.reduce\.0\.0\.weight: \(16, 64, 1, 1\)"
    ):
        _net(path, extra=("model=dbnet_resnet18_pan", "model.decoder.channels=8"))
