"""task_wrapper: every failed run leaves .FAILURE, including Ctrl-C (Lightning's SystemExit(1))."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ocr.utils.runner import task_wrapper


def _run(tmp_path: Path, exc: BaseException) -> None:
    @task_wrapper
    def task(cfg: object) -> None:
        raise exc

    with pytest.raises(type(exc)):
        task(OmegaConf.create({"paths": {"output_dir": str(tmp_path / "run")}}))


@pytest.mark.parametrize("exc", [ValueError("bad data"), SystemExit(1), KeyboardInterrupt()])
def test_failures_leave_a_report(tmp_path: Path, exc: BaseException) -> None:
    _run(tmp_path, exc)
    assert type(exc).__name__ in (tmp_path / "run" / ".FAILURE").read_text()


@pytest.mark.parametrize("code", [0, None])
def test_a_clean_exit_is_not_a_failure(tmp_path: Path, code: int | None) -> None:
    _run(tmp_path, SystemExit(code))
    assert not (tmp_path / "run" / ".FAILURE").exists()
