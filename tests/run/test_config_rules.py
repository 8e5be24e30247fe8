"""check_config's value rules: ranges known at composition, one line naming key, value, range, first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from ocr.run.config import check_config
from ocr.utils.errors import ConfigValueError

Compose = Callable[[str, list[str], Path], DictConfig]


def _refusal(cfg: DictConfig) -> list[str]:
    with pytest.raises(ConfigValueError) as info:
        check_config(cfg)
    message = str(info.value)
    assert "\n" not in message
    return message.split("; ")


def test_the_hang_case_a_crop_beyond_the_largest_scaled_image_is_refused(
    compose_cfg: Compose, tmp_path: Path
) -> None:
    """crop 5000 on images at long side 128 grew to 23.5 GB in its first step, and never ended it."""
    overrides = ["data.train_transform.crop_size=5000", "data.train_transform.train_long_side=128"]
    [problem] = _refusal(compose_cfg("train", overrides, tmp_path))
    assert problem.startswith("data.train_transform.crop_size: expected <= 384 (the largest scaled training")
    assert "got 5000" in problem
    ok = ["data.train_transform.crop_size=384", "data.train_transform.train_long_side=128"]
    check_config(compose_cfg("train", ok, tmp_path))


def test_pipeline_optimizer_and_export_values_are_named_together(
    compose_cfg: Compose, tmp_path: Path
) -> None:
    overrides = [
        "pipeline.kind=fork",
        "pipeline.workers=0",
        "pipeline.max_pending_batches=0",
        "optimizer.lr=-0.001",
        "optimizer.weight_decay=-1",
        "optimizer.betas=[0.9,1.5]",
    ]
    assert _refusal(compose_cfg("train", overrides, tmp_path)) == [
        "pipeline.kind: expected one of process, thread, inline, got 'fork'",
        "pipeline.workers: expected >= 1 (or pipeline.kind=inline, which needs none), got 0",
        "pipeline.max_pending_batches: expected >= 1, got 0",
        "optimizer.lr: expected >= 0, got -0.001",
        "optimizer.weight_decay: expected >= 0, got -1",
        "optimizer.betas: expected values in [0, 1), got [0.9, 1.5]",
    ]
    check_config(compose_cfg("test", ["ckpt=x", "pipeline.kind=inline", "pipeline.workers=0"], tmp_path))
    for value, shown in (("abc", "'abc'"), ("0", "0"), ("1.5", "1.5")):
        [problem] = _refusal(compose_cfg("export", ["ckpt=x", f"long_side={value}"], tmp_path))
        assert problem == f"long_side: expected null (the checkpoint's) or an int >= 1, got {shown}"
    check_config(compose_cfg("export", ["ckpt=x", "long_side=640"], tmp_path))


def test_a_config_without_the_keys_passes() -> None:
    check_config(OmegaConf.create({"data": {"train_transform": {"crop_size": 64}}, "pipeline": {}}))


def test_a_key_added_with_plus_that_no_target_takes_is_named_with_the_close_one(
    compose_cfg: Compose, tmp_path: Path
) -> None:
    """+trainer.max_step=4 (Hydra's hint for the typo) reached Lightning's TypeError."""
    cfg = compose_cfg("train", ["+trainer.max_step=4", "+data.train_transform.crop=3"], tmp_path)
    with pytest.raises(ConfigValueError) as info:
        check_config(cfg)
    message = str(info.value)
    assert "trainer.max_step: not an argument of lightning.Trainer, did you mean trainer.max_steps?" in (
        message
    )
    assert "data.train_transform.crop: not an argument of ocr.data.transforms.TrainTransform" in message
    assert "\n" not in message
