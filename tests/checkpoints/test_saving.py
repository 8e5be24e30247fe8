"""RunCheckpoint: last.ckpt is always the latest state; temp files never outlive a failed write."""

from __future__ import annotations

import contextlib
import errno
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import pytest
import torch
from lightning.fabric.utilities.seed import _collect_rng_states, _set_rng_states
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from torch.utils.data import DataLoader

from ocr.checkpoints import saving as checkpoint_module
from ocr.checkpoints.saving import (
    TIME_CHECK_EVERY_N_STEPS,
    RunCheckpoint,
    estimate_checkpoint_bytes,
)
from ocr.utils.io import DiskFullError
from tests.helpers.triage_tiny import TinyModule, tiny_loader
from tests.helpers.triage_tiny import quiet_cpu_trainer as _quiet_trainer
from tests.helpers.triage_tiny import run_checkpoint as _run_checkpoint


class PlateauModule(TinyModule):
    """val/hmean never improves, so only the first validation yields a best checkpoint."""

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.log("val/hmean", 0.5)


class LastStepRecorder(Callback):
    """Reads last.ckpt's JSON step when each epoch and each batch starts (after the previous saves)."""

    def __init__(self, dirpath: Path) -> None:
        self.json = dirpath / "last.ckpt.json"
        self.at_epoch_start: list[int | None] = []
        self.at_batch_start: list[int | None] = []

    def _step(self) -> int | None:
        return json.loads(self.json.read_text())["global_step"] if self.json.exists() else None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.at_epoch_start.append(self._step())

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self.at_batch_start.append(self._step())


def _fit(
    root: Path,
    *,
    every_n_steps: int | None = None,
    max_steps: int = -1,
    max_epochs: int = 3,
    check_val_every_n_epoch: int = 1,
) -> tuple[RunCheckpoint, LastStepRecorder]:
    dirpath = root / "checkpoints"
    checkpoint = _run_checkpoint(dirpath, every_n_steps)
    recorder = LastStepRecorder(dirpath)
    trainer = _quiet_trainer(
        root,
        [checkpoint, recorder],
        max_epochs=max_epochs,
        max_steps=max_steps,
        check_val_every_n_epoch=check_val_every_n_epoch,
    )
    trainer.fit(PlateauModule(), train_dataloaders=tiny_loader(), val_dataloaders=tiny_loader(num=2))
    return checkpoint, recorder


def _last_step(root: Path) -> int:
    return json.loads((root / "checkpoints" / "last.ckpt.json").read_text())["global_step"]


@pytest.mark.parametrize("check_val_every_n_epoch", [1, 2])
def test_last_checkpoint_follows_every_validation_on_a_plateau(
    tmp_path: Path, check_val_every_n_epoch: int
) -> None:
    # 4 steps per epoch; validation every epoch (saved at epoch end) or every 2nd (saved at validation end).
    _, recorder = _fit(tmp_path, max_epochs=4, check_val_every_n_epoch=check_val_every_n_epoch)
    expected = [None, 4, 8, 12] if check_val_every_n_epoch == 1 else [None, None, 8, 8]
    assert recorder.at_epoch_start == expected
    assert _last_step(tmp_path) == 16
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert saved["global_step"] == 16
    assert len(list((tmp_path / "checkpoints").glob("best_*.ckpt"))) == 1
    # A resume on another number of processes is refused or warned about (ocr.checkpoints.world_size).
    meta = json.loads((tmp_path / "checkpoints" / "last.ckpt.json").read_text())
    assert saved["world_size"] == meta["world_size"] == 1


def test_last_checkpoint_every_n_steps_and_at_the_end_between_validations(tmp_path: Path) -> None:
    _, recorder = _fit(tmp_path, every_n_steps=3, max_steps=10, max_epochs=10, check_val_every_n_epoch=2)
    # Batch k starts after step k: saves at steps 3, 6, 8 (validation), 9, then 10 at the end.
    assert recorder.at_batch_start == [None, None, None, 3, 3, 3, 6, 6, 8, 9]
    assert _last_step(tmp_path) == 10
    assert [p.name for p in (tmp_path / "checkpoints").glob("best_*.ckpt")] == [
        "best_hmean0.5000_epoch01.ckpt"
    ]


@pytest.mark.parametrize("every_n_steps", [None, 6])
def test_a_run_without_validation_saves_as_between_validations(
    tmp_path: Path, every_n_steps: int | None
) -> None:
    """No save at each epoch end (4 steps each here): every_n_steps and the end of training only."""
    dirpath = tmp_path / "checkpoints"
    recorder = LastStepRecorder(dirpath)
    trainer = _quiet_trainer(
        tmp_path, [_run_checkpoint(dirpath, every_n_steps), recorder], max_epochs=3, limit_val_batches=0
    )
    trainer.fit(PlateauModule(), train_dataloaders=tiny_loader())
    assert recorder.at_epoch_start == ([None, None, None] if every_n_steps is None else [None, None, 6])
    assert _last_step(tmp_path) == 12
    assert not list(dirpath.glob("best_*.ckpt"))


class ShuffledPlateauModule(PlateauModule):
    """Saves and restores the RNG states as DetectionModule does; trains on a shuffled loader."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["rng_states"] = _collect_rng_states()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        _set_rng_states(checkpoint["rng_states"])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(tiny_loader().dataset, batch_size=2, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return tiny_loader(num=2)


class StopAtStep(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("interrupted")


def _fit_shuffled(root: Path, callbacks: list[Callback], ckpt_path: Path | None = None) -> L.LightningModule:
    L.seed_everything(0)
    checkpoint = _run_checkpoint(root / "checkpoints")
    # max_steps set and max_epochs reached first: Lightning resumes an epoch-end checkpoint one epoch short.
    trainer = _quiet_trainer(root, [checkpoint, *callbacks], max_epochs=4, max_steps=100)
    module = ShuffledPlateauModule()
    trainer.fit(module, ckpt_path=ckpt_path, weights_only=False)
    assert trainer.global_step == 16
    return module


def test_resume_from_a_validation_checkpoint_is_exact(tmp_path: Path) -> None:
    expected = _fit_shuffled(tmp_path / "uninterrupted", [])
    with pytest.raises(RuntimeError, match="interrupted"):
        _fit_shuffled(tmp_path / "run", [StopAtStep(8)])
    resumed = _fit_shuffled(tmp_path / "run", [], ckpt_path=tmp_path / "run" / "checkpoints" / "last.ckpt")
    for (name, value), other in zip(
        expected.state_dict().items(), resumed.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(other, value, rtol=0, atol=0, msg=name)


def test_stale_temp_files_are_removed_at_start(tmp_path: Path) -> None:
    dirpath = tmp_path / "checkpoints"
    dirpath.mkdir()
    (dirpath / "last.ckpt.tmp").write_bytes(b"\0" * 1000)  # killed during a checkpoint write
    (dirpath / ".last.ckpt.json.k2j3h4.tmp").write_text("{")  # killed during an atomic JSON write
    _fit(tmp_path, max_epochs=1)
    assert sorted(p.name for p in dirpath.iterdir()) == [
        "best_hmean0.5000_epoch00.ckpt",
        "best_hmean0.5000_epoch00.ckpt.json",
        "last.ckpt",
        "last.ckpt.json",
    ]


def test_a_full_disk_gives_one_clear_error_and_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fill_the_disk(self: L.Trainer, filepath: str, weights_only: bool = False) -> None:
        Path(filepath).write_bytes(b"\0" * 4096)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(L.Trainer, "save_checkpoint", fill_the_disk)
    with pytest.raises(DiskFullError) as caught:
        _fit(tmp_path, max_epochs=1)
    message = str(caught.value)
    assert str(tmp_path / "checkpoints" / "best_hmean0.5000_epoch00.ckpt") in message
    assert "MiB needed" in message and "MiB free in" in message and "hydra.run.dir" in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert list((tmp_path / "checkpoints").iterdir()) == []


def test_checkpoint_size_estimate_counts_weights_and_adam_moments() -> None:
    module = TinyModule()
    weights = sum(p.numel() * 4 for p in module.parameters())
    assert estimate_checkpoint_bytes(module) == 3 * weights


@pytest.mark.parametrize(("key", "value"), [("every_n_steps", 0), ("every_n_minutes", 0.0)])
def test_rejects_non_positive_intervals(key: str, value: float) -> None:
    options: dict[str, Any] = {"every_n_steps": None, "every_n_minutes": None, key: value}
    with pytest.raises(ValueError, match=f"callbacks.checkpoint.{key}"):
        RunCheckpoint(dirpath="x", monitor="val/hmean", mode="max", save_top_k=1, **options)


def _keeping(keep: str) -> RunCheckpoint:
    return RunCheckpoint(
        dirpath="x",
        monitor="val/hmean",
        mode="max",
        save_top_k=1,
        every_n_steps=None,
        every_n_minutes=None,
        keep=keep,  # type: ignore[arg-type]  # the constructor refuses other values
    )


@pytest.mark.parametrize(("keep", "expected"), [("best", "best.ckpt"), ("last", "last.ckpt")])
def test_the_kept_checkpoint_is_the_best_or_the_last(keep: str, expected: str) -> None:
    checkpoint = _keeping(keep)
    checkpoint.best_model_path, checkpoint.last_model_path = "best.ckpt", "last.ckpt"
    assert checkpoint.kept_path == expected
    with pytest.raises(
        ValueError, match="callbacks.checkpoint.keep: expected 'best' or 'last', got 'newest'"
    ):
        _keeping("newest")


def test_the_time_trigger_broadcasts_only_on_check_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """every_n_minutes needs a broadcast (a collective under DDP): not on every step."""
    checkpoint = RunCheckpoint(
        dirpath="x", monitor="val/hmean", mode="max", save_top_k=1, every_n_steps=None, every_n_minutes=1
    )
    checkpoint._last_write_time -= 3600  # an hour since the last write: due at the next check
    broadcasts: list[int] = []
    saves: list[int] = []
    trainer = SimpleNamespace(
        fast_dev_run=False, sanity_checking=False, state=SimpleNamespace(fn=TrainerFn.FITTING), global_step=0
    )
    trainer.strategy = SimpleNamespace(
        broadcast=lambda value: broadcasts.append(trainer.global_step) or value
    )
    monkeypatch.setattr(checkpoint, "_save_last_checkpoint", lambda *args: saves.append(trainer.global_step))
    monkeypatch.setattr(checkpoint, "_monitor_candidates", lambda trainer: {})
    for step in range(1, 2 * TIME_CHECK_EVERY_N_STEPS + 1):
        trainer.global_step = step
        checkpoint.on_train_batch_end(trainer, None, None, None, step - 1)
    assert broadcasts == [TIME_CHECK_EVERY_N_STEPS, 2 * TIME_CHECK_EVERY_N_STEPS]
    assert saves == broadcasts


def test_last_checkpoint_is_written_once_per_step_when_a_step_trigger_meets_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[tuple[str, int]] = []
    save = RunCheckpoint._save_checkpoint

    def recording_save(self: RunCheckpoint, trainer: L.Trainer, filepath: str) -> None:
        writes.append((Path(filepath).name, trainer.global_step))
        save(self, trainer, filepath)

    monkeypatch.setattr(RunCheckpoint, "_save_checkpoint", recording_save)
    # 4 steps per epoch, validation at each epoch end (steps 4 and 8), step trigger every 2 steps.
    _fit(tmp_path, every_n_steps=2, max_epochs=2)
    assert [step for name, step in writes if name == "last.ckpt"] == [2, 4, 6, 8]
    assert _last_step(tmp_path) == 8


def test_time_and_step_saves_are_documented_syncs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under debug=gpu_probe's sync debug mode, the broadcast and the save must be marked sync_allowed."""
    checkpoint = RunCheckpoint(
        dirpath="x", monitor="val/hmean", mode="max", save_top_k=1, every_n_steps=None, every_n_minutes=1
    )
    checkpoint._last_write_time -= 3600
    inside: list[bool] = [False]
    marked: list[str] = []

    @contextlib.contextmanager
    def recording_sync_allowed() -> Iterator[None]:
        inside[0] = True
        yield
        inside[0] = False

    monkeypatch.setattr(checkpoint_module, "sync_allowed", recording_sync_allowed)
    trainer = SimpleNamespace(
        fast_dev_run=False,
        sanity_checking=False,
        state=SimpleNamespace(fn=TrainerFn.FITTING),
        global_step=TIME_CHECK_EVERY_N_STEPS,
    )
    trainer.strategy = SimpleNamespace(
        broadcast=lambda value: marked.append(f"broadcast {inside[0]}") or value
    )
    monkeypatch.setattr(checkpoint, "_save_last_checkpoint", lambda *args: marked.append(f"save {inside[0]}"))
    monkeypatch.setattr(checkpoint, "_monitor_candidates", lambda trainer: {})
    checkpoint.on_train_batch_end(trainer, None, None, None, 0)
    assert marked == ["broadcast True", "save True"]
