"""A clear error prints one clear message: what the project raises on purpose is a UsageError, which ends a
run with its message alone on the console (the traceback in the run's log file); other errors keep theirs."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ocr.checkpoints.reading import load_checkpoint
from ocr.checkpoints.resume import find_checkpoint
from ocr.data.annotations import load_annotations
from ocr.data.dataset import ImageFolderDataset
from ocr.lightning_modules.prediction_io import require_images
from ocr.run.entry import entry
from ocr.run.folder import OutputDirCheck, writable_dir
from ocr.utils.errors import CheckpointError, find_usage_error
from tests.helpers.receipt_fixtures import eval_transform

Compose = Callable[[str, list[str], Path], DictConfig]
Runner = Callable[[str], ModuleType]


def _truncated_last(run: Path) -> Path:
    """``run/checkpoints/last.ckpt`` cut in half, as by a full disk or an interrupted copy."""
    last = run / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    torch.save({"state_dict": {"w": torch.zeros(4096)}, "ocr_config": {}, "global_step": 4}, last)
    last.write_bytes(last.read_bytes()[:3000])
    return last


def _raised(call: Callable[[], object]) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


def test_the_errors_raised_on_purpose_are_usage_errors_naming_what_is_wrong(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("epoch=3 step=120\n")
    (tmp_path / "empty").mkdir()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    postprocess = OmegaConf.create(
        {
            "_target_": "ocr.models.postprocess.DBPostProcessor",
            **{"thresh": 0.3, "box_thresh": 0.5, "unclip_ratio": -1, "max_candidates": 10, "min_size": 3},
            "output": "box",
        }
    )
    cases = {
        f"ckpt={text}: a text file": lambda: load_checkpoint(text),
        "image_dir=": lambda: require_images(
            ImageFolderDataset(image_dir=tmp_path / "empty", transform=eval_transform())
        ),
        f"paths.output_dir={blocker / 'run'}: expected a folder": lambda: writable_dir(
            blocker / "run", "paths.output_dir", create=True
        ),
        "postprocess.unclip_ratio: expected >= 0.0, got -1": lambda: instantiate(postprocess),
        f"{tmp_path / 'gone.json'}: annotation file not found": lambda: load_annotations(
            tmp_path / "gone.json"
        ),
    }
    for expected, call in cases.items():
        usage = find_usage_error(_raised(call))
        assert usage is not None and expected in str(usage), (expected, usage)
    wrapped = _raised(cases["postprocess.unclip_ratio: expected >= 0.0, got -1"])
    assert isinstance(wrapped, InstantiationException)  # Hydra's wrapper: the cause is found through it
    assert find_usage_error(RuntimeError("a bug")) is None


def test_a_truncated_last_checkpoint_is_named_as_truncated_when_resuming(tmp_path: Path) -> None:
    """It used to fail in torch.load with 'PytorchStreamReader failed reading zip archive', no file named."""
    last = _truncated_last(tmp_path / "run")
    with pytest.raises(CheckpointError, match=rf"checkpoint={last}: a truncated checkpoint: a zip archive"):
        find_checkpoint(tmp_path / "run", None)


def test_a_failed_resume_leaves_one_status(
    tmp_path: Path, compose_cfg: Compose, runner_module: Runner, tiny_run: list[str]
) -> None:
    run = tmp_path / "run"
    last = _truncated_last(run)
    (run / ".SUCCESS").write_text("fit finished\n")
    cfg = compose_cfg("train", [*tiny_run, f"resume={run}"], run)
    with pytest.raises(CheckpointError, match=f"{last}: a truncated checkpoint"):
        runner_module("train").train(cfg)
    # Refused at the claim, before anything is written: the run's status stays as it was.
    assert [p.name for p in run.glob(".*") if p.name in (".SUCCESS", ".FAILURE")] == [".SUCCESS"]


@pytest.fixture
def run_logging(tmp_path: Path) -> Iterator[tuple[io.StringIO, Path]]:
    """Root logging as a Hydra run sets it up: a console stream and the run's log file."""
    console, log_file = io.StringIO(), tmp_path / "test.log"
    handlers = [logging.StreamHandler(console), logging.FileHandler(log_file)]
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers, root.level = handlers, logging.INFO
    try:
        yield console, log_file
    finally:
        for handler in handlers:
            handler.close()
        root.handlers, root.level = saved


def _main(exc: BaseException, tmp_path: Path) -> Callable[[], object]:
    """A runner's process (``task.main()`` under Hydra) whose task raises ``exc``."""

    @entry("predict", lightning=False)
    def task(cfg: DictConfig) -> None:
        raise exc

    return lambda: task.run_as_process(OmegaConf.create({"paths": {"output_dir": str(tmp_path / "run")}}))


def test_a_usage_error_ends_the_run_with_its_message_alone(
    tmp_path: Path, run_logging: tuple[io.StringIO, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    console, log_file = run_logging
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    message = "ckpt=/x/last.ckpt: a truncated checkpoint: a zip archive of 3000 bytes without its end record"
    with pytest.raises(SystemExit) as info:
        _main(CheckpointError(message), tmp_path)()
    assert info.value.code == 1
    run = tmp_path / "run"
    assert console.getvalue().splitlines() == [  # the message once (with its report), no traceback
        f"Run failed: CheckpointError: {message} (report: {run / '.FAILURE'})",
        f"Run directory: {run}",
    ]
    logged = log_file.read_text()
    assert "Traceback (most recent call last)" in logged and "CheckpointError: " + message in logged


def test_other_errors_and_hydra_full_error_keep_the_traceback(
    tmp_path: Path, run_logging: tuple[io.StringIO, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(KeyError):  # a bug: Hydra prints its traceback
        _main(KeyError("x"), tmp_path)()
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(CheckpointError):
        _main(CheckpointError("ckpt=x: broken"), tmp_path)()
    assert "Traceback" not in run_logging[0].getvalue()  # Hydra prints it, not the runner


def test_a_read_only_run_directory_stops_before_hydra_writes_into_it(
    tmp_path: Path, run_logging: tuple[io.StringIO, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hydra's own mkdir used to end in a raw PermissionError (or NotADirectoryError) traceback."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config = OmegaConf.create({"hydra": {"run": {"dir": str(blocker / "run")}}})
    with pytest.raises(SystemExit):
        OutputDirCheck().on_run_start(config)
    assert run_logging[0].getvalue() == (
        f"hydra.run.dir={blocker / 'run'}: expected a folder this process can create and write files in, "
        f"but {blocker}: a file is in the way; pass hydra.run.dir=<a writable folder>\n"
    )
    OutputDirCheck().on_run_start(OmegaConf.create({"hydra": {"run": {"dir": str(tmp_path / "new")}}}))
    assert not (tmp_path / "new").exists()  # checked without creating anything
