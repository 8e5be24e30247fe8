"""Run-status sentinels (ocr.run.folder, written by the guard): into directories that do not exist yet; stale
ones removed; wandb tagged."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from lightning.pytorch.loggers import WandbLogger

from ocr.run.folder import write_failure, write_success
from ocr.run.guard import Guard


class StubWandbLogger(WandbLogger):
    """Lightning's WandbLogger type (the guard checks isinstance) with a stand-in run: no wandb needed."""

    def __init__(self) -> None:  # Lightning's __init__ would set up wandb
        self.run = SimpleNamespace(tags=("receipts",))

    @property
    def experiment(self) -> SimpleNamespace:
        return self.run


def _trainer(**kwargs: object) -> SimpleNamespace:
    return SimpleNamespace(
        **{"is_global_zero": True, "interrupted": False, "current_epoch": 2, "global_step": 40, **kwargs},
        world_size=1,
        global_rank=0,
        node_rank=0,
        callbacks=[],
    )


def RunStatus(run_dir: str) -> Guard:  # noqa: N802 - the guard's status part, as these tests use it
    return Guard(run_dir=run_dir, check_every_n_steps=50, check_grads=False, fail_on_preflight=False)


def test_failure_report_lands_in_a_missing_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "never" / "created"
    try:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    except RuntimeError as exc:
        path = write_failure(run_dir, exc)
    text = path.read_text()
    assert path == run_dir / ".FAILURE"
    assert "RuntimeError: CUDA error: an illegal memory access" in text
    assert "Traceback (most recent call last)" in text and "test_failure_report_lands" in text


def test_success_and_failure_replace_each_other(tmp_path: Path) -> None:
    write_failure(tmp_path, ValueError("first attempt"))
    write_success(tmp_path, "resumed and finished")
    assert (tmp_path / ".SUCCESS").is_file() and not (tmp_path / ".FAILURE").exists()
    write_failure(tmp_path, ValueError("test failed after fit"))
    assert (tmp_path / ".FAILURE").is_file() and not (tmp_path / ".SUCCESS").exists()


def test_callback_marks_the_run_and_tags_wandb(tmp_path: Path) -> None:
    wandb, csv = StubWandbLogger(), SimpleNamespace(experiment=None)
    # Another logger's run is not tagged, even one with tags and the same class name.
    other = type("WandbLogger", (), {"experiment": SimpleNamespace(tags=("other",))})()
    trainer = _trainer(loggers=[csv, wandb, other])
    callback = RunStatus(run_dir=str(tmp_path / "run"))
    callback.on_fit_end(trainer, None)
    assert "step 40" in (tmp_path / "run" / ".SUCCESS").read_text()
    callback.on_exception(trainer, None, KeyError("image_id"))
    assert "KeyError" in (tmp_path / "run" / ".FAILURE").read_text()
    assert wandb.experiment.tags == ("receipts", "succeeded", "failed")
    assert other.experiment.tags == ("other",)
    callback.on_test_end(trainer, None)  # a failure is not overwritten by a later test end
    assert not (tmp_path / "run" / ".SUCCESS").exists()


def test_interrupted_fit_is_not_a_success(tmp_path: Path) -> None:
    RunStatus(run_dir=str(tmp_path)).on_fit_end(_trainer(interrupted=True, loggers=[]), None)
    assert not (tmp_path / ".SUCCESS").exists()


def test_a_resumed_fit_clears_the_earlier_attempts_status(tmp_path: Path) -> None:
    """A resume that is then killed -9 must not look finished (or failed with the old error)."""
    write_success(tmp_path, "fit finished at step 40")
    RunStatus(run_dir=str(tmp_path)).on_fit_start(_trainer(), None)
    assert not (tmp_path / ".SUCCESS").exists()
    write_failure(tmp_path, ValueError("first attempt"))
    RunStatus(run_dir=str(tmp_path)).on_fit_start(_trainer(), None)
    assert not (tmp_path / ".FAILURE").exists()
