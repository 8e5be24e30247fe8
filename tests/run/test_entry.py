"""The entry decorator: a failed run leaves .FAILURE (Lightning's SystemExit(1) included), Ctrl-C
.INTERRUPTED; logs a person can read."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ocr.checkpoints.resume import ResumeRefusedError
from ocr.run.entry import entry, quiet_third_party, route_lightning_logs


def _run(tmp_path: Path, exc: BaseException) -> None:
    @entry("predict")
    def task(cfg: object) -> None:
        raise exc

    with pytest.raises(type(exc)):
        task(OmegaConf.create({"paths": {"output_dir": str(tmp_path / "run")}}))


@pytest.mark.parametrize("exc", [ValueError("bad data"), SystemExit(1)])
def test_failures_leave_a_report(tmp_path: Path, exc: BaseException) -> None:
    _run(tmp_path, exc)
    assert type(exc).__name__ in (tmp_path / "run" / ".FAILURE").read_text()


def test_a_ctrl_c_outside_training_marks_the_run_interrupted(tmp_path: Path) -> None:
    """Not "Run failed: KeyboardInterrupt: " with an empty message; the shell's exit code for Ctrl-C."""

    @entry("predict")
    def task(cfg: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises((SystemExit, KeyboardInterrupt)) as exited:
        task(OmegaConf.create({"paths": {"output_dir": str(tmp_path / "run")}}))
    assert isinstance(exited.value, SystemExit) and exited.value.code == 130
    assert "interrupted by Ctrl-C" in (tmp_path / "run" / ".INTERRUPTED").read_text()
    assert not (tmp_path / "run" / ".FAILURE").exists()


@pytest.mark.parametrize("code", [0, None])
def test_a_clean_exit_is_not_a_failure(tmp_path: Path, code: int | None) -> None:
    _run(tmp_path, SystemExit(code))
    assert not (tmp_path / "run" / ".FAILURE").exists()


def test_a_new_failure_replaces_an_earlier_attempts_report(tmp_path: Path) -> None:
    """resume= of a failed run that fails again before training: .FAILURE tells this attempt's error."""
    (tmp_path / "run").mkdir()
    old = tmp_path / "run" / ".FAILURE"
    old.write_text("2026-11-01 ValueError: the first attempt\n")
    os.utime(old, (0, 0))  # written long before this process started
    _run(tmp_path, RuntimeError("the second attempt"))
    assert "the second attempt" in old.read_text()


def test_a_refused_resume_keeps_the_runs_status(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".SUCCESS").write_text("fit finished\n")
    _run(tmp_path, ResumeRefusedError("resume: the data changed"))
    assert (tmp_path / "run" / ".SUCCESS").is_file()
    assert not (tmp_path / "run" / ".FAILURE").exists()


def test_each_lightning_line_appears_once_and_tips_not_at_all() -> None:
    """The lightning package's own console handler printed an "INFO: ..." copy of every line that Hydra's
    handlers printed too; the "Tip: try litlogger" lines advertise products."""
    from lightning.pytorch.utilities.rank_zero import rank_zero_info

    records: list[logging.LogRecord] = []
    collect = logging.Handler()
    collect.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    root.addHandler(collect)
    try:
        route_lightning_logs()
        rank_zero_info("GPU available: False, used: False")
        rank_zero_info("💡 Tip: For seamless cloud logging, try installing [litlogger]")
    finally:
        root.removeHandler(collect)
    assert [r.getMessage() for r in records] == ["GPU available: False, used: False"]
    assert not logging.getLogger("lightning").handlers


def test_warnings_the_project_handles_and_onnx_chatter_are_silenced() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_third_party()
        warnings.warn(
            "Checkpoint directory /run/checkpoints exists and is not empty.", UserWarning, stacklevel=1
        )
        warnings.warn(
            "You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not "
            "resumable. This can cause unreliable results if further training is done.",
            UserWarning,
            stacklevel=1,
        )
        warnings.warn("something new", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["something new"]
    assert not logging.getLogger("onnxscript.optimizer._constant_folding").isEnabledFor(logging.INFO)
    assert not logging.getLogger("onnx_ir.passes.common.unused_removal").isEnabledFor(logging.INFO)
