"""The CUDA fault recogniser, the explanation, and the runners' exit path (``exit_on_cuda_fault``)."""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from ocr.debug.inject import CUDA_FAULT_MESSAGE
from ocr.run import faults
from ocr.run.faults import (
    EXIT_CUDA_FAULT,
    FaultSite,
    exit_on_cuda_fault,
    explanation,
    find_cuda_fault,
    is_cuda_fault,
    next_commands,
)
from tests.helpers.exits import Exited, Exits, fake_exits

SITE = FaultSite("train", 3, 0, 3, 0, 1, ("a.jpg", "b.jpg"))


@pytest.mark.parametrize(
    "exception,kind",
    [
        (torch.AcceleratorError("CUDA error: device-side assert triggered"), "device-side assert"),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), "illegal memory access"),
        (RuntimeError("CUDA error: unspecified launch failure"), "kernel launch failure"),
        (RuntimeError("CUDA error: uncorrectable ECC error encountered"), "ECC error"),
        (RuntimeError("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"), "cuDNN failure"),
        (
            RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling cublasSgemm"),
            "cuBLAS failure",
        ),
        (RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1935, unhandled cuda error"), "NCCL failure"),
        (torch.AcceleratorError("an error without the usual words"), "CUDA error"),
    ],
)
def test_cuda_faults_are_recognised_by_type_and_message(exception: BaseException, kind: str) -> None:
    fault = find_cuda_fault(exception)
    assert fault is not None and fault.kind == kind and fault.exception is exception


def test_an_oom_and_python_errors_are_not_cuda_faults() -> None:
    assert not is_cuda_fault(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not is_cuda_fault(ValueError("images: expected (B, 3, H, W)"))
    assert not is_cuda_fault(IndexError("index out of range in self"))


def _chained() -> BaseException:
    """A teardown error raised while the first CUDA error was handled, as Lightning's teardown raises."""
    try:
        try:
            raise torch.AcceleratorError(CUDA_FAULT_MESSAGE.format(step=3))
        except torch.AcceleratorError:
            raise torch.AcceleratorError("CUDA error: device-side assert triggered (in teardown)")  # noqa: B904
    except torch.AcceleratorError as teardown:
        return teardown


def test_the_first_cuda_error_of_a_chain_is_the_fault() -> None:
    fault = find_cuda_fault(_chained())
    assert fault is not None and "[injected by callbacks.inject.kind=cuda_fault" in str(fault.exception)


def test_asynchronous_faults_explain_cuda_launch_blocking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    fault = find_cuda_fault(torch.AcceleratorError("CUDA error: device-side assert triggered"))
    assert fault is not None and fault.asynchronous
    commands = next_commands(
        "fit", Path("run/crash"), ["runners/train.py", "data=receipts", "hydra.run.dir=x"]
    )
    assert commands == [
        "scripts/debug_cuda.sh replay run/crash --device cuda --blocking",
        "scripts/debug_cuda.sh blocking data=receipts",
        "scripts/debug_cuda.sh sanitizer memcheck data=receipts",
    ]
    text = explanation(
        fault, SITE, failure=Path("run/.FAILURE"), crash=Path("run/crash"), commands=commands, exit_code=84
    )
    assert "where:   training, global step 3, epoch 0, batch 3" in text and "a.jpg, b.jpg" in text
    assert "CUDA_LAUNCH_BLOCKING=1 every launch waits" in text and "code 84" in text
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    fault = find_cuda_fault(torch.AcceleratorError("CUDA error: device-side assert triggered"))
    assert fault is not None and not fault.asynchronous
    predict = next_commands("predict", Path("c"), ["runners/predict.py", "ckpt=a b"])
    assert predict == ["CUDA_LAUNCH_BLOCKING=1 TORCH_USE_CUDA_DSA=1 python runners/predict.py 'ckpt=a b'"]


@pytest.fixture
def console_and_file(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """Root handlers as Hydra sets them up: the console (a file here, as a pipe would be) and the run's
    log file; yields both paths."""
    console, path = tmp_path / "console.txt", tmp_path / "train.log"
    stream = console.open("w")
    handlers = [logging.StreamHandler(stream), logging.FileHandler(path)]
    root = logging.getLogger()
    for handler in handlers:
        handler.setFormatter(logging.Formatter("[%(name)s][%(levelname)s] - %(message)s"))
        root.addHandler(handler)
    try:
        yield console, path
    finally:
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()
        stream.close()


def test_runner_exit_shows_the_first_error_and_logs_the_teardown_error_to_the_file_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, console_and_file: tuple[Path, Path]
) -> None:
    exits = fake_exits(monkeypatch)
    teardown = _chained()
    with pytest.raises(Exited) as exited:
        exit_on_cuda_fault(teardown, tmp_path)
    assert exited.value.code == exits.codes[0] == EXIT_CUDA_FAULT
    console, log_file = console_and_file[0].read_text(), console_and_file[1].read_text()
    errors = [line for line in console.splitlines() if "[ERROR]" in line]
    assert errors[0].startswith("[ocr.run.faults][ERROR] - CUDA FAULT (device-side assert)")
    assert console.rstrip().splitlines()[-1].endswith(f"ending the process with exit code {EXIT_CUDA_FAULT}.")
    assert "[injected by callbacks.inject.kind=cuda_fault at global step 3]" in console  # the first error
    assert "(in teardown)" not in console and "(in teardown)" in log_file  # the later one: file only
    assert "Raised after the CUDA fault" in log_file
    assert "device-side assert triggered [injected" in (tmp_path / ".FAILURE").read_text()


def test_other_errors_pass_through_the_runner_exit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    exits = fake_exits(monkeypatch)
    exit_on_cuda_fault(ValueError("not a fault"), tmp_path)
    assert exits.codes == [] and not (tmp_path / ".FAILURE").exists()


def test_the_deadline_ends_the_process_when_a_hook_blocks(
    monkeypatch: pytest.MonkeyPatch, console_and_file: tuple[Path, Path]
) -> None:
    exits: Exits = fake_exits(monkeypatch)
    closing = [("CUDA FAULT: ending the process with exit code 84.", None)]
    start = time.monotonic()
    faults.FaultExit(code=84, closing=closing, deadline_s=0.3).arm()
    assert exits.event.wait(10) and exits.codes == [84]  # the main thread never called finish()
    assert time.monotonic() - start < 5
    console = console_and_file[0].read_text()
    assert "did not return within 0.3 s" in console and console.rstrip().endswith("exit code 84.")


def _sleep() -> None:
    time.sleep(60)


def test_child_processes_are_killed_before_the_exit() -> None:
    child = multiprocessing.get_context("fork").Process(target=_sleep, daemon=True)
    child.start()
    assert faults._kill_children() == [child.pid]
    assert not child.is_alive()
