"""Printed commands paste into a shell and Hydra as they are."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from ocr.utils.commands import (
    RUNNERS,
    next_commands,
    override,
    run_next_commands,
    run_overrides,
)

EQUALS = "/runs/x/checkpoints/best-hmean=0.9312-epoch=07.ckpt"  # "=" needs Hydra's quotes
NEW = "/runs/2026-11-22_10-00-00/checkpoints/best_hmean0.9652_epoch07.ckpt"


def _hydra_value(argument: str) -> object:
    return OverridesParser.create().parse_overrides([argument])[0].value()


@pytest.mark.parametrize("path", [NEW, EQUALS, "/my runs/it's,here/last.ckpt"])
def test_an_override_reads_back_through_the_shell_and_hydra(path: str) -> None:
    (word,) = shlex.split(override("ckpt", path))
    assert _hydra_value(word) == path


def test_new_checkpoint_names_need_no_quotes() -> None:
    assert override("ckpt", NEW) == f"ckpt={NEW}"


def test_next_commands_carry_the_runs_data_options(tmp_path: Path) -> None:
    record = tmp_path / ".hydra" / "2026-11-22_10-00-00" / "overrides.yaml"
    record.parent.mkdir(parents=True)
    record.write_text("- data=receipts\n- data.root=/data/my receipts\n- trainer.max_steps=20\n")
    later = tmp_path / ".hydra" / "2026-11-22_11-00-00" / "overrides.yaml"  # a resume adds its own
    later.parent.mkdir()
    later.write_text(f"- resume={tmp_path}\n")
    text = next_commands(
        runners=Path("runners").resolve(),
        checkpoint=Path(NEW),
        run_dir=tmp_path,
        overrides=run_overrides(tmp_path),
        image_dir=None,
        more_training="trainer.max_steps=40",
    )
    lines = text.splitlines()
    assert lines[1] == f"uv run runners/test.py ckpt={NEW} data=receipts 'data.root=/data/my receipts'"
    assert lines[3].startswith(f"uv run runners/predict.py ckpt={NEW} image_dir=path/to/images overlays=true")
    assert lines[5] == f"uv run runners/export.py ckpt={NEW}"
    assert lines[7] == f"uv run runners/train.py resume={tmp_path} trainer.max_steps=40"
    assert lines[6] == "# train longer in this run's directory, to trainer.max_steps=40"


def test_next_commands_leave_out_what_the_checkpoint_carries(tmp_path: Path) -> None:
    """The evaluation transform, the loss targets and the post-processing come from the checkpoint; the
    train transform and batch size never mattered to test or predict."""
    overrides = [
        "data.synthetic.num_test=3",
        "data.eval_transform.long_side=96",
        "data.train_transform.crop_size=64",
        "data.targets.min_text_size=2",
        "data.batch_size=2",
        "data.eval_batch_size=2",
        "data.num_workers=0",
        "postprocess.thresh=0.2",
        "hardware=cpu",
    ]
    text = next_commands(
        runners=Path("runners").resolve(),
        checkpoint=Path(NEW),
        run_dir=tmp_path,
        overrides=overrides,
        image_dir=None,
        more_training="trainer.max_steps=40",
    )
    data = "data.synthetic.num_test=3 data.eval_batch_size=2 data.num_workers=0"
    lines = text.splitlines()
    assert lines[1] == f"uv run runners/test.py ckpt={NEW} {data}"
    assert lines[3] == f"uv run runners/predict.py ckpt={NEW} image_dir=path/to/images overlays=true {data}"


@pytest.mark.parametrize(
    ("max_steps", "more"), [(20, "trainer.max_steps=40"), (-1, "trainer.max_epochs=200")]
)
def test_a_training_run_offers_its_test_images_and_twice_its_budget(
    tmp_path: Path, max_steps: int, more: str
) -> None:
    images = tmp_path / "data" / "images" / "test"
    images.mkdir(parents=True)
    cfg = OmegaConf.create(
        {"data": {"root": str(tmp_path / "data")}, "trainer": {"max_steps": max_steps, "max_epochs": 100}}
    )
    lines = run_next_commands(cfg, tmp_path, Path(NEW)).splitlines()
    assert f" image_dir={images} " in lines[3]
    assert lines[7] == f"uv run {os.path.relpath(RUNNERS)}/train.py resume={tmp_path} {more}"
