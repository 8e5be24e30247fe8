"""Every config composes in struct mode; misspelled keys fail naming the key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")
Compose = Callable[[str, list[str]], DictConfig]


@pytest.fixture
def compose(compose_cfg: Callable[[str, list[str], Path], DictConfig], tmp_path: Path) -> Compose:
    """``compose(name, overrides)``: the conftest composer with this test's output directory."""
    return lambda name, overrides: compose_cfg(name, overrides, tmp_path)


def _group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "group",
    ["data", "model", "hardware", "performance", "logger", "callbacks", "experiment", "debug", "scheduler"],
)
def test_every_group_option_composes(group: str, compose: Compose) -> None:
    for option in _group_options(group):
        overrides = [f"{group}={option}"]
        if group in ("experiment",) or option == "receipts":
            overrides.append("data.root=/nonexistent")
        cfg = compose("train", overrides)
        for node in ("trainer", "data", "model", "module", "callbacks", "logger"):
            OmegaConf.resolve(cfg[node])
        assert cfg.model._target_ == "ocr.models.dbnet.DBNet"


@pytest.mark.parametrize(
    "name,extra",
    [("test", ["ckpt=x.ckpt"]), ("predict", ["ckpt=x.ckpt", "image_dir=d"]), ("export", ["ckpt=x.ckpt"])],
)
def test_test_and_predict_configs_compose(name: str, extra: list[str], compose: Compose) -> None:
    cfg = compose(name, extra)
    assert cfg.ckpt == "x.ckpt"


def test_misspelled_override_fails_naming_the_key(compose: Compose) -> None:
    with pytest.raises(ConfigCompositionException) as err:
        compose("train", ["model.encoder.nmae=resnet18"])
    assert "nmae" in str(err.value) + str(err.value.__cause__)


def test_unknown_added_key_fails_at_instantiation(compose: Compose) -> None:
    cfg = compose("train", ["+model.decoder.channls=64"])
    with pytest.raises(Exception, match="channls"):
        instantiate(cfg.model)


def test_default_model_loss_postprocess_metric_instantiate(compose: Compose) -> None:
    cfg = compose("train", [])
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
