"""Run configs stored by older versions still build their module (test, predict and resume read them)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig

from ocr.checkpoints.legacy import TARGET_ALIASES, upgrade_run_config
from ocr.checkpoints.reading import load_checkpoint
from ocr.data.photometric import PhotometricParams
from ocr.data.synthetic.generate import synthetic_settings
from ocr.lightning_modules.build import build_module
from ocr.lightning_modules.restore import module_from_checkpoint
from ocr.metrics.cleval.metric import CLEvalMetric

OLD_RUN_CONFIG = Path(__file__).parent / "fixtures" / "old_run_config.yaml"


@pytest.fixture(scope="module")
def old_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    """A checkpoint with the old run config and the weights of a module built from today's configs."""
    from ocr.run.config import compose_config

    old = yaml.safe_load(OLD_RUN_CONFIG.read_text())
    assert old["metric"]["_target_"] == "ocr.metrics.metric.CLEvalMetric"
    assert {"optimizer", "scheduler"} <= set(old["module"])
    # The old run config's FPN has 256 channels (today's CPU default is 128).
    state_dict = build_module(
        compose_config("train", ["hardware=cpu", "model.decoder.channels=256"])
    ).state_dict()
    path = tmp_path_factory.mktemp("old") / "best.ckpt"
    torch.save({"state_dict": state_dict, "ocr_config": old, "epoch": 3, "global_step": 40}, path)
    return path, state_dict


def test_predict_builds_an_old_checkpoint_with_its_own_metric(
    old_checkpoint: tuple[Path, dict[str, torch.Tensor]],
    compose_cfg: Callable[[str, list[str], Path], DictConfig],
    tmp_path: Path,
) -> None:
    path, state_dict = old_checkpoint
    cfg = compose_cfg("predict", [f"ckpt={path}", "image_dir=d", "hardware=cpu"], tmp_path)
    module = module_from_checkpoint(path, cfg)
    assert isinstance(module.val_metric, CLEvalMetric) and module.val_metric.options.mode == "competition"
    loaded = module.state_dict()
    assert loaded.keys() == state_dict.keys()
    assert all(torch.equal(loaded[key], value) for key, value in state_dict.items())
    assert module.run_config["metric"]["_target_"] == "ocr.metrics.cleval.options.CLEvalOptions"
    assert set(module.run_config["module"]) == {"_target_", "channels_last", "compile"}


def test_test_scores_an_old_checkpoint_in_the_mode_asked_for(
    old_checkpoint: tuple[Path, dict[str, torch.Tensor]],
    compose_cfg: Callable[[str, list[str], Path], DictConfig],
    tmp_path: Path,
) -> None:
    path, _ = old_checkpoint
    cfg = compose_cfg("test", [f"ckpt={path}", "hardware=cpu", "metric.mode=upstream"], tmp_path)
    assert module_from_checkpoint(path, cfg).test_metric.options.mode == "upstream"


def test_upgrade_renames_moved_targets_anywhere_and_logs_each(caplog: pytest.LogCaptureFixture) -> None:
    old = {
        "metric": {"_target_": "ocr.metrics.cleval.metric.CLEvalMetric", "mode": "upstream"},
        "callbacks": {"extra": [{"_target_": "ocr.metrics.metric.CLEvalMetric"}]},
        "module": {"_target_": "m", "optimizer": {"lr": 1}, "scheduler": {}, "compile": False},
        "debug": {"inject": "nan_loss", "inject_step": 3},  # the fault injection before debug=inject
    }
    kept = copy.deepcopy(old)
    with caplog.at_level(logging.WARNING):
        new = upgrade_run_config(old)
    assert old == kept  # the checkpoint's own dict is not edited
    assert new["metric"] == {"_target_": "ocr.metrics.cleval.options.CLEvalOptions", "mode": "upstream"}
    assert new["callbacks"]["extra"][0]["_target_"] == "ocr.metrics.cleval.options.CLEvalOptions"
    assert new["module"] == {"_target_": "m", "compile": False}
    assert "debug" not in new and "debug dropped (no longer read)" in caplog.text
    assert "metric._target_: ocr.metrics.cleval.metric.CLEvalMetric ->" in caplog.text
    assert "module.optimizer dropped" in caplog.text


def test_todays_config_is_left_as_it_is(caplog: pytest.LogCaptureFixture) -> None:
    today = {
        "metric": {"_target_": next(iter(TARGET_ALIASES.values()))},
        "module": {"_target_": "m"},
        "pipeline": {"_target_": "ocr.evaluation.pipeline.PipelineSettings", "kind": "process"},
    }
    with caplog.at_level(logging.WARNING):
        assert upgrade_run_config(today) == today
    assert not caplog.text


def _targets(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["_target_"]] if "_target_" in node else []
        return own + [target for value in node.values() for target in _targets(value)]
    return [target for value in node for target in _targets(value)] if isinstance(node, list) else []


def test_every_target_of_an_upgraded_old_config_exists() -> None:
    """A resume instantiates the stored config's callbacks, loggers and trainer: each target must import."""
    upgraded = upgrade_run_config(yaml.safe_load(OLD_RUN_CONFIG.read_text()))
    targets = _targets(upgraded)
    assert "ocr.checkpoints.saving.RunCheckpoint" in targets
    for target in targets:
        get_object(target)


@pytest.mark.parametrize("old", sorted(TARGET_ALIASES))
def test_every_alias_names_an_object_that_exists(old: str) -> None:
    get_object(TARGET_ALIASES[old])


def test_load_checkpoint_upgrades_the_stored_config(tmp_path: Path) -> None:
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": {}, "ocr_config": yaml.safe_load(OLD_RUN_CONFIG.read_text())}, path)
    stored = load_checkpoint(path)["ocr_config"]
    assert stored["metric"]["_target_"] == "ocr.metrics.cleval.options.CLEvalOptions"
    assert "optimizer" not in stored["module"]
    # The photometric keys moved under data.train_transform.photometric; the old data config still builds.
    transform = stored["data"]["train_transform"]
    assert transform["photometric"]["_target_"] == "ocr.data.photometric.PhotometricParams"
    assert transform["photometric"]["p_color"] == 0.5 and "p_color" not in transform
    assert isinstance(instantiate(transform).photometric, PhotometricParams)
    # Runs before data.render_on warped the crop and drew the targets in the workers, and resume so.
    assert stored["data"]["render_on"] == "worker"
    # Sets generated before styles existed are the basic style with word boxes.
    assert synthetic_settings(stored["data"]["synthetic"]) == {
        **yaml.safe_load(OLD_RUN_CONFIG.read_text())["data"]["synthetic"],
        "style": "basic",
        "granularity": "word",
    }


def test_a_config_from_before_the_pipeline_evaluates_as_it_did(caplog: pytest.LogCaptureFixture) -> None:
    """The square letterbox and post-processing in the main thread, each logged."""
    old = yaml.safe_load(OLD_RUN_CONFIG.read_text())
    assert "pipeline" not in old and "pad_multiple" not in old["data"]["eval_transform"]
    with caplog.at_level(logging.WARNING):
        new = upgrade_run_config(old)
    assert new["data"]["eval_transform"]["pad_multiple"] is None
    assert new["pipeline"] == {
        "_target_": "ocr.evaluation.pipeline.PipelineSettings",
        "kind": "inline",
        "workers": 0,
        "max_pending_batches": 1,
    }
    assert "data.eval_transform.pad_multiple: None" in caplog.text and "pipeline: {" in caplog.text
