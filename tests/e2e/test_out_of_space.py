"""Out of disk space: refused at start with one message, or one clear error and .FAILURE mid-run."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import lightning as L
import pytest
from omegaconf import DictConfig

from ocr.run import guard
from ocr.run.guard import PreflightError
from ocr.utils.io import DiskFullError

pytestmark = pytest.mark.slow  # end to end: real runners on tiny runs, a minute or more on 2 cores

Make = Callable[[Path], DictConfig]


@pytest.fixture
def make_cfg(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_run: list[str],
    compose_cfg: Callable[[str, list[str], Path], DictConfig],
) -> Make:
    data_root = tmp_path_factory.getbasetemp() / "out_of_space_data"
    overrides = [*tiny_run, f"data.root={data_root}", "trainer.max_steps=3", "test_after_fit=false"]
    return lambda run: compose_cfg("train", [*overrides, "logger=none"], run)


def test_too_little_space_for_one_checkpoint_stops_the_run_at_start(
    tmp_path: Path,
    make_cfg: Make,
    runner_module: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(guard, "free_bytes", lambda path: (3 * 2**20, Path("/mnt/small")))
    with pytest.raises(PreflightError) as caught:
        runner_module("train").train(make_cfg(tmp_path))
    message = str(caught.value)
    assert message.startswith("Not enough disk space for a checkpoint: 3.0 MiB free in /mnt/small;")
    assert "one checkpoint of this model needs about" in message and "hydra.run.dir" in message
    assert message in (tmp_path / ".FAILURE").read_text()
    assert not (tmp_path / "checkpoints").exists()


def test_a_checkpoint_write_that_runs_out_of_space_fails_once_and_cleanly(
    tmp_path: Path,
    make_cfg: Make,
    runner_module: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fill_the_disk(self: L.Trainer, filepath: str, weights_only: bool = False) -> None:
        Path(filepath).write_bytes(b"\0" * 4096)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(L.Trainer, "save_checkpoint", fill_the_disk)
    with pytest.raises(DiskFullError):
        runner_module("train").train(make_cfg(tmp_path))
    failure = (tmp_path / ".FAILURE").read_text()
    assert "DiskFullError: [Errno 28] No space left on the disk to write " in failure
    assert "MiB needed" in failure and "MiB free in" in failure
    assert "During handling of the above exception" not in failure  # one error, not a chain
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == []  # no partial .tmp
