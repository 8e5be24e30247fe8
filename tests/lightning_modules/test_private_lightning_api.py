"""The private Lightning APIs the code relies on still exist with the shapes it was written against.

pyproject.toml pins ``lightning`` to the tested minor range; before widening it, make these pass and
re-verify the code each message names.
"""

from __future__ import annotations

import inspect
import random
import re
from collections.abc import Callable
from typing import Any

import lightning
import numpy as np
import pytest
import torch
from lightning.fabric.utilities import seed
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loops.fit_loop import _FitLoop
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

from ocr.checkpoints.saving import RunCheckpoint

RNG_USERS = (
    "ocr/lightning_modules/detection_module.py (on_save/on_load_checkpoint), ocr/checkpoints/saving.py, "
    "callbacks/crash_bundle.py"
)
CHECKPOINT_USER = "ocr/checkpoints/saving.py (RunCheckpoint)"


def _parameters(function: Callable[..., Any]) -> list[str]:
    return [name for name in inspect.signature(function).parameters if name != "self"]


def _changed(what: str, user: str) -> str:
    return f"lightning {lightning.__version__} changed {what}: re-verify {user} against the new code"


@pytest.mark.parametrize(
    "name,parameters", [("_collect_rng_states", ["include_cuda"]), ("_set_rng_states", ["rng_state_dict"])]
)
def test_rng_state_helpers_keep_their_signatures(name: str, parameters: list[str]) -> None:
    function = getattr(seed, name, None)
    assert function is not None, _changed(f"lightning.fabric.utilities.seed.{name} (gone)", RNG_USERS)
    assert _parameters(function) == parameters, _changed(
        f"{name}{inspect.signature(function)} (expected parameters {parameters})", RNG_USERS
    )


def test_rng_states_round_trip_torch_numpy_and_python() -> None:
    states = seed._collect_rng_states()
    assert {"torch", "numpy", "python"} <= set(states), _changed(
        f"the keys of _collect_rng_states() to {sorted(states)}", RNG_USERS
    )
    drawn = (torch.rand(3), np.random.rand(3), random.random())
    seed._set_rng_states(states)
    again = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(drawn[0], again[0]) and np.array_equal(drawn[1], again[1]) and drawn[2] == again[2], (
        _changed("what _set_rng_states restores", RNG_USERS)
    )


@pytest.mark.parametrize(
    "name,parameters",
    [
        ("_save_checkpoint", ["trainer", "filepath"]),
        ("_remove_checkpoint", ["trainer", "filepath"]),
        ("_monitor_candidates", ["trainer"]),
        ("_save_topk_checkpoint", ["trainer", "monitor_candidates"]),
        ("_save_last_checkpoint", ["trainer", "monitor_candidates"]),
    ],
)
def test_model_checkpoint_private_methods_keep_their_signatures(name: str, parameters: list[str]) -> None:
    method = getattr(ModelCheckpoint, name, None)
    assert method is not None, _changed(f"ModelCheckpoint.{name} (gone)", CHECKPOINT_USER)
    assert _parameters(method) == parameters, _changed(
        f"ModelCheckpoint.{name}{inspect.signature(method)} (expected parameters {parameters})",
        CHECKPOINT_USER,
    )
    if name in vars(RunCheckpoint):
        assert _parameters(getattr(RunCheckpoint, name)) == parameters, (
            f"RunCheckpoint.{name} overrides ModelCheckpoint.{name}: expected parameters {parameters}"
        )


def test_model_checkpoint_save_does_what_run_checkpoint_repeats() -> None:
    """RunCheckpoint._save_checkpoint re-implements the base method's steps around an atomic rename."""
    source = inspect.getsource(ModelCheckpoint._save_checkpoint)
    for step in (
        "trainer.save_checkpoint(filepath, self.save_weights_only)",
        "self._last_global_step_saved = trainer.global_step",
        "self._last_checkpoint_saved = filepath",
        "logger.after_save_checkpoint(proxy(self))",
    ):
        assert step in source, _changed(
            f"ModelCheckpoint._save_checkpoint (no longer has {step!r})", CHECKPOINT_USER
        )
    assigned = set(re.findall(r"self\.(\w+) =", source))
    assert assigned == {"_last_global_step_saved", "_last_checkpoint_saved"}, _changed(
        f"ModelCheckpoint._save_checkpoint (it now sets {sorted(assigned)})", CHECKPOINT_USER
    )


def test_loop_internals_behind_validation_follows() -> None:
    """RunCheckpoint._validation_follows asks the epoch loop whether validation runs after this batch."""
    assert _parameters(_TrainingEpochLoop._should_check_val_fx) == ["data_fetcher"], _changed(
        "_TrainingEpochLoop._should_check_val_fx", CHECKPOINT_USER
    )
    assert "self._skip_next_val" in inspect.getsource(_TrainingEpochLoop.__init__), _changed(
        "_TrainingEpochLoop._skip_next_val (gone)", CHECKPOINT_USER
    )
    assert "self._data_fetcher" in inspect.getsource(_FitLoop.__init__), _changed(
        "_FitLoop._data_fetcher (gone)", CHECKPOINT_USER
    )


def test_loop_state_behind_a_validation_pending_on_resume() -> None:
    """RunCheckpoint.save_on_interrupt marks a cut validation so that Lightning runs it again on resume: a
    validation batch started and none finished is Lightning's RESTARTED_MID_EVALUATION."""
    from lightning.pytorch.loops.evaluation_loop import _EvaluationLoop

    source = inspect.getsource(_EvaluationLoop.update_restart_stage)
    assert "self.batch_progress.total.processed == self.batch_progress.total.started - 1" in source, _changed(
        "_EvaluationLoop.update_restart_stage", CHECKPOINT_USER
    )
