"""check_config: wrong value types name their full key; every shipped config passes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from omegaconf import DictConfig, OmegaConf

from ocr.run.config import check_config
from ocr.utils.config_types import ConfigValueTypeError
from ocr.utils.errors import ConfigValueError, UsageError
from tests.helpers.paths import REPO_ROOT

CONFIG_DIR = REPO_ROOT / "configs"
Compose = Callable[[str, list[str], Path], DictConfig]


def _problems(cfg: DictConfig) -> list[str]:
    with pytest.raises(ConfigValueTypeError) as info:
        check_config(cfg)
    return [p for p in str(info.value).partition("command line):")[2].splitlines() if p]  # one: one line


def test_every_wrong_type_is_named_by_its_full_key_at_once(compose_cfg: Compose, tmp_path: Path) -> None:
    overrides = [
        "data.batch_size=abc",
        "data.targets.min_text_size=x",  # an item of a Mapping[str, float]
        "data.train_transform.scale_range=[1,a]",  # an item of a tuple, inside a nested _target_
        "trainer.max_steps=1.5",
        "trainer.check_val_every_n_epoch=true",  # a bool is not an int to a config reader
        "model.encoder.pretrained=yes",
        "optimizer.lr=fast",
    ]
    problems = _problems(compose_cfg("train", overrides, tmp_path))
    assert sorted(p.strip() for p in problems) == [
        "data.batch_size: expected int, got 'abc' (str)",
        "data.targets.min_text_size: expected float, got 'x' (str)",
        "data.train_transform.scale_range[1]: expected float, got 'a' (str)",
        "model.encoder.pretrained: expected bool, got 'yes' (str)",
        "optimizer.lr: expected float or Tensor, got 'fast' (str)",
        "trainer.check_val_every_n_epoch: expected int or null, got True (bool)",
        "trainer.max_steps: expected int, got 1.5 (float)",
    ]


def test_optional_and_numeric_values(compose_cfg: Compose, tmp_path: Path) -> None:
    check_config(compose_cfg("train", ["data.cache_dir=null", "data.min_polygon_size=2"], tmp_path))
    [problem] = _problems(compose_cfg("train", ["data.cache_dir=2024"], tmp_path))
    assert "data.cache_dir: expected str or null, got 2024 (int)" in problem
    assert "data.cache_dir=\"'2024'\"" in problem  # how to pass a number as text


def test_a_node_without_a_target_or_an_unloadable_target_is_not_judged() -> None:
    cfg = OmegaConf.create(
        {"seed": "x", "gone": {"_target_": "no.such.module.Thing", "size": "abc"}, "paths": {"a": 1}}
    )
    check_config(cfg)


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


@pytest.mark.slow  # over 20 s on 2 busy cores
def test_every_shipped_config_passes(compose_cfg: Compose, tmp_path: Path) -> None:
    groups = [
        "data",
        "model",
        "hardware",
        "performance",
        "logger",
        "callbacks",
        "experiment",
        "debug",
        "scheduler",
    ]
    runs = [("train", [f"{group}={option}"]) for group in groups for option in _options(group)]
    runs += [("test", ["ckpt=x.ckpt"]), ("predict", ["ckpt=x.ckpt", "image_dir=d"]), ("evaluate", [])]
    for name, overrides in runs:
        check_config(compose_cfg(name, overrides, tmp_path))


@pytest.mark.parametrize(
    ("runner", "task", "extra"),
    [
        ("train", "train", []),
        ("test", "evaluate", ["ckpt=missing.ckpt"]),
        ("predict", "predict", ["ckpt=x", "image_dir=x"]),
    ],
)
def test_each_runner_names_the_key_and_writes_nothing(
    tmp_path: Path,
    compose_cfg: Compose,
    runner_module: Callable[[str], ModuleType],
    runner: str,
    task: str,
    extra: list[str],
) -> None:
    cfg = compose_cfg(runner, ["data.batch_size=abc", *extra], tmp_path / "run")
    with pytest.raises(TypeError, match=r"data\.batch_size: expected int, got 'abc' \(str\)"):
        getattr(runner_module(runner), task)(cfg)
    assert not (tmp_path / "run").exists()  # refused by the one config check, before the claim


def test_sizes_counts_and_post_processing_ranges_are_named_at_config_read(
    compose_cfg: Compose, tmp_path: Path
) -> None:
    """data.batch_size=-2 used to fail in torch's DataLoader 12 s later; unclip_ratio=-1 was accepted."""
    overrides = [
        "data.batch_size=-2",
        "data.eval_batch_size=0",
        "data.num_workers=-1",
        "data.eval_transform.long_side=0",
        "postprocess.unclip_ratio=-1",
        "postprocess.box_thresh=1.5",
    ]
    with pytest.raises(ConfigValueError) as info:
        check_config(compose_cfg("train", overrides, tmp_path))
    assert str(info.value).splitlines() == [
        "config: 6 value(s) out of range (fix them in the YAML or on the command line):",
        "  data.batch_size: expected >= 1, got -2",
        "  data.eval_batch_size: expected >= 1, got 0",
        "  data.num_workers: expected >= 0, got -1",
        "  data.eval_transform.long_side: expected >= 1, got 0",
        "  postprocess.box_thresh: expected a value in [0.0, 1.0], got 1.5",
        "  postprocess.unclip_ratio: expected >= 0.0, got -1",
    ]
    assert isinstance(info.value, UsageError)


def test_a_wrong_type_and_a_range_problem_are_listed_together(compose_cfg: Compose, tmp_path: Path) -> None:
    cfg = compose_cfg("train", ["data.batch_size=abc", "postprocess.thresh=2"], tmp_path)
    assert sorted(p.strip() for p in _problems(cfg)) == [
        "data.batch_size: expected int, got 'abc' (str)",
        "postprocess.thresh: expected a value in [0.0, 1.0], got 2",
    ]


def test_nan_is_out_of_every_range(compose_cfg: Compose, tmp_path: Path) -> None:
    """NaN compares False with every bound, so postprocess.thresh=nan used to pass the check."""
    cfg = compose_cfg("train", ["postprocess.thresh=nan"], tmp_path)
    with pytest.raises(
        ConfigValueError, match=r"postprocess\.thresh: expected a value in \[0\.0, 1\.0\], got nan"
    ):
        check_config(cfg)
