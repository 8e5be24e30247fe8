"""Every config composes in struct mode; misspelled keys fail naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from ocr.utils.hardware import register_resolvers

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")
register_resolvers()


def _compose(name: str, overrides: list[str]) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name=name, overrides=overrides)
    with open_dict(cfg):
        cfg.paths.output_dir = "/tmp/ocr-config-test"
    return cfg


def _group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "group",
    ["data", "model", "hardware", "performance", "logger", "callbacks", "experiment", "debug", "scheduler"],
)
def test_every_group_option_composes(group: str) -> None:
    for option in _group_options(group):
        overrides = [f"{group}={option}"]
        if group in ("experiment",) or option == "receipts":
            overrides.append("data.root=/nonexistent")
        cfg = _compose("train", overrides)
        for node in ("trainer", "data", "model", "module", "callbacks", "logger"):
            OmegaConf.resolve(cfg[node])
        assert cfg.model._target_ == "ocr.models.dbnet.DBNet"


@pytest.mark.parametrize(
    "name,extra", [("test", ["ckpt=x.ckpt"]), ("predict", ["ckpt=x.ckpt", "image_dir=d"])]
)
def test_test_and_predict_configs_compose(name: str, extra: list[str]) -> None:
    cfg = _compose(name, extra)
    assert cfg.ckpt == "x.ckpt"


def test_misspelled_override_fails_naming_the_key() -> None:
    with pytest.raises(ConfigCompositionException) as err:
        _compose("train", ["model.encoder.nmae=resnet18"])
    assert "nmae" in str(err.value) + str(err.value.__cause__)


def test_unknown_added_key_fails_at_instantiation() -> None:
    cfg = _compose("train", ["+model.decoder.channls=64"])
    with pytest.raises(Exception, match="channls"):
        instantiate(cfg.model)


def test_default_model_loss_postprocess_metric_instantiate() -> None:
    cfg = _compose("train", [])
    net = instantiate(cfg.model)
    module = instantiate(
        cfg.module,
        net=net,
        loss=instantiate(cfg.loss),
        postprocess=instantiate(cfg.postprocess),
        metric=instantiate(cfg.metric),
    )
    assert module.net is net
    assert cfg.scheduler.kind in ("poly", "cosine")
