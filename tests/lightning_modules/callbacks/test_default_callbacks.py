"""The callbacks a default ``runners/train.py`` run instantiates: few enough to read (issue 41)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from ocr.run.entry import instantiate_all

Compose = Callable[[str, list[str], Path], DictConfig]
MAX_CALLBACKS = 8
# Modules of what once were four callbacks: time budget, validation at the end, data wait, progress bar.
RUN_LENGTH_AND_PROGRESS = {
    f"ocr.lightning_modules.callbacks.{name}"
    for name in ("time_budget", "final_validation", "data_wait", "progress")
}


def _default_callbacks(compose_cfg: Compose, tmp_path: Path) -> list[object]:
    return instantiate_all(compose_cfg("train", [], tmp_path).callbacks)


def test_the_run_length_and_progress_take_one_callback_each(compose_cfg: Compose, tmp_path: Path) -> None:
    """The time budget validates the last step too; the progress bar reports the data wait."""
    callbacks = _default_callbacks(compose_cfg, tmp_path)
    ours = [type(c).__name__ for c in callbacks if type(c).__module__ in RUN_LENGTH_AND_PROGRESS]
    assert ours in (["TimeBudget", "PlainProgress"], ["TimeBudget", "RichProgress"])


def test_a_default_run_instantiates_at_most_eight_callbacks(compose_cfg: Compose, tmp_path: Path) -> None:
    callbacks = _default_callbacks(compose_cfg, tmp_path)
    names = [type(c).__name__ for c in callbacks]
    assert len(callbacks) <= MAX_CALLBACKS, f"{len(callbacks)} callbacks: {names}"
