"""A checkpoint carries its inference settings: test, predict and export take them unless the command line
sets them, and say where each value came from."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from omegaconf import DictConfig, OmegaConf

from ocr.checkpoints import inference_settings as settings
from tests.helpers.tiny_checkpoint import tiny_checkpoint

Compose = Callable[[str, list[str], Path], DictConfig]
Runner = Callable[[str], ModuleType]

STORED = {
    "data": {
        "eval_transform": {"long_side": 96, "mean": [0.5, 0.5, 0.5], "std": [0.2, 0.2, 0.2], "fill": 0},
        "targets": {"shrink_ratio": 0.4, "thresh_min": 0.3, "thresh_max": 0.7, "min_text_size": 2},
    },
    "postprocess": {"thresh": 0.25, "box_thresh": 0.6, "unclip_ratio": 1.8, "max_candidates": 500},
}


def test_stored_values_are_taken_unless_the_command_line_sets_them(
    compose_cfg: Compose, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    given = ["data.eval_transform.long_side=1024", "postprocess.thresh=0.35", "+x=1", "data=receipts"]
    cfg = compose_cfg("test", ["ckpt=x", "data.root=/d", *given[:2]], tmp_path)
    assert list(cfg.command_line) == ["ckpt=x", "data.root=/d", *given[:2]]  # as Hydra's overrides.task
    cfg.command_line = given
    keys = settings.stored_setting_keys(cfg, targets=True)
    assert keys[:4] == [f"data.eval_transform.{k}" for k in ("long_side", "mean", "std", "fill")]
    with caplog.at_level(logging.INFO):
        choices = settings.apply_stored_settings(cfg, STORED, keys, "the checkpoint's training run")
    assert cfg.data.eval_transform.long_side == 1024 and cfg.postprocess.thresh == 0.35  # the command line's
    assert list(cfg.data.eval_transform.mean) == [0.5, 0.5, 0.5] and cfg.postprocess.unclip_ratio == 1.8
    assert cfg.data.targets.min_text_size == 2
    assert cfg.postprocess.min_size == 3  # not stored (an older checkpoint): this config's, and said so
    by_key = {c.key: c for c in choices}
    assert by_key["postprocess.thresh"].differs and not by_key["postprocess.box_thresh"].from_command_line
    assert "not in the checkpoint's training run, this config's: postprocess.min_size" in caplog.text
    assert "from the command line: data.eval_transform.long_side=1024 (stored: 96)" in caplog.text
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [  # the network's input changed; a post-processing choice is only logged
        "data.eval_transform.long_side=1024 (command line) differs from 96 in the checkpoint's training "
        "run: the network sees other inputs than it was validated on; drop the override to use the stored "
        "value"
    ]


def test_a_group_choice_and_prefixed_overrides_count_as_given() -> None:
    assert settings.command_line_keys(["postprocess=db", "++data.root=/x", "~seed"]) == {
        "postprocess",
        "data.root",
        "seed",
    }
    cfg = OmegaConf.create({"postprocess": {"thresh": 0.3}, "command_line": ["postprocess=db"]})
    settings.apply_stored_settings(cfg, STORED, ["postprocess.thresh"], "a run")
    assert cfg.postprocess.thresh == 0.3
    # Without a command line to read (composed elsewhere, Hydra's resolver unset), nothing was given.
    cfg = OmegaConf.create({"postprocess": {"thresh": 0.3}, "command_line": "${hydra:overrides.task}"})
    settings.apply_stored_settings(cfg, STORED, ["postprocess.thresh"], "a run")
    assert cfg.postprocess.thresh == 0.25


def test_export_takes_the_runs_long_side_unless_given(caplog: pytest.LogCaptureFixture) -> None:
    assert settings.export_long_side(None, 512) == 512 and settings.export_long_side(512, 512) == 512
    assert not caplog.records
    assert settings.export_long_side(1024, 512) == 1024
    assert (
        "long_side=1024 (command line) differs from data.eval_transform.long_side=512 in the checkpoint's"
        in (caplog.text)
    )


@pytest.mark.slow  # over 20 s on 2 busy cores: the test runner on a tiny checkpoint
def test_the_test_runner_scores_at_the_checkpoints_settings_without_a_warning(
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    tiny_run: list[str],
    compose_cfg: Compose,
    runner_module: Runner,
) -> None:
    """Before, test took data.eval_transform and postprocess from its own defaults (512 px here, the
    CPU preset's) and only warned that they differed from the run's (96 px)."""
    (tmp_path / "ckpt").mkdir()
    ckpt = tiny_checkpoint(tmp_path / "ckpt", [*tiny_run, "postprocess.box_thresh=0.45"])
    data = [o for o in tiny_run if not o.startswith(("data.eval_transform.", "data.targets."))]
    cfg = compose_cfg(
        "test", [*data, f"data.root={tmp_path / 'ckpt' / 'data'}", f"ckpt={ckpt}"], tmp_path / "a"
    )
    with caplog.at_level(logging.INFO):
        runner_module("test").evaluate(cfg)
    saved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert (
        saved["data"]["eval_transform"]["long_side"] == 96 and saved["data"]["targets"]["min_text_size"] == 2
    )
    assert saved["postprocess"]["box_thresh"] == 0.45
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    # A value given on the command line wins, and is logged beside the stored one.
    given = [*data, f"data.root={tmp_path / 'ckpt' / 'data'}", f"ckpt={ckpt}", "postprocess.box_thresh=0.7"]
    cfg = compose_cfg("test", given, tmp_path / "b")
    with caplog.at_level(logging.INFO):
        runner_module("test").evaluate(cfg)
    assert yaml.safe_load((tmp_path / "b" / "config.yaml").read_text())["postprocess"]["box_thresh"] == 0.7
    assert "from the command line: postprocess.box_thresh=0.7 (stored: 0.45)" in caplog.text
