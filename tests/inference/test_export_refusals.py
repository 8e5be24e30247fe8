"""runners/export.py as a user runs it: bad check inputs are refused before the export, and a failed check,
an unwritable output or SIGTERM leave a previous model and sidecar byte-identical, nothing beside them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.file_hashes import tree_hashes
from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.slow  # runner processes (torch import, checkpoint load, an export): 10-60 s each

PREVIOUS = {"model.onnx": b"the previous, checked model", "model.onnx.json": b'{"format": "previous"}\n'}


def _deployed(folder: Path) -> Path:
    """``folder`` holding a previous model and sidecar (their bytes stand for a good export's)."""
    folder.mkdir()
    for name, data in PREVIOUS.items():
        (folder / name).write_bytes(data)
    return folder / "model.onnx"


def _command(ckpt: Path, images: Path, run: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "runners/export.py",
        f"ckpt={ckpt}",
        f"parity.image_dir={images}",
        f"hydra.run.dir={run}",
        *overrides,
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HYDRA_FULL_ERROR": "0"}


def _export(*command: str) -> tuple[int, str]:
    result = subprocess.run(command, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["quantize=int8", "calibration.method=bogus"],
            "calibration.method: expected one of ('minmax', 'entropy', 'percentile'), got 'bogus'",
        ),
        (["quantize=int8", "calibration.split=test"], "calibration.split: expected one of ('train', 'val')"),
        (
            ["quantize=int8", "calibration.num_images=0"],
            "calibration.num_images: expected a positive int, got 0",
        ),
        (["quantize=int4"], "quantize: expected null or 'int8', got 'int4'"),
    ],
)
def test_bad_check_inputs_are_refused_in_one_line_before_the_export(
    tmp_path: Path, tiny_checkpoint: Path, small_images: Path, overrides: list[str], message: str
) -> None:
    """They used to be refused after the whole fp32 export and its parity check, each failure leaving a
    hidden ``.model.onnx.fp32.onnx`` behind."""
    model = _deployed(tmp_path / "deploy")
    before = tree_hashes(model.parent)
    code, console = _export(
        *_command(tiny_checkpoint, small_images, tmp_path / "run", f"output={model}", *overrides)
    )
    assert code == 1 and "Traceback" not in console, console
    assert [line for line in console.splitlines() if message in line], console
    assert "Exported" not in console  # refused before the export
    assert tree_hashes(model.parent) == before


def test_an_output_folder_that_cannot_be_written_is_named_before_the_export(
    tmp_path: Path, tiny_checkpoint: Path, small_images: Path
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the output folder would be")
    code, console = _export(
        *_command(tiny_checkpoint, small_images, tmp_path / "run", f"output={blocker / 'model.onnx'}")
    )
    assert code == 1 and "Traceback" not in console, console
    assert f"output={blocker}: expected a folder this process can create and write files in" in console
    assert "Exported" not in console


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_output_folder_is_named_before_the_export(
    tmp_path: Path, tiny_checkpoint: Path, small_images: Path
) -> None:
    model = _deployed(tmp_path / "deploy")
    before = tree_hashes(model.parent)
    model.parent.chmod(0o555)
    try:
        code, console = _export(*_command(tiny_checkpoint, small_images, tmp_path / "run", f"output={model}"))
    finally:
        model.parent.chmod(0o755)
    assert code == 1 and "Traceback" not in console, console
    assert f"output={model.parent}: expected a folder this process can create and write files in" in console
    assert tree_hashes(model.parent) == before


def test_a_failed_parity_check_keeps_the_previous_model_and_sidecar(
    tmp_path: Path, tiny_checkpoint: Path, small_images: Path
) -> None:
    """The re-export used to overwrite model.onnx, then remove it, leaving the old sidecar beside no model."""
    model = _deployed(tmp_path / "deploy")
    before = tree_hashes(model.parent)
    code, console = _export(
        *_command(tiny_checkpoint, small_images, tmp_path / "run", f"output={model}", "parity.prob_tol=-1")
    )
    assert code == 1 and "Traceback" not in console, console
    assert (
        f"{model}: ONNX output differs from PyTorch's; not written (a previous model stays): 3 images"
        in console
    )
    assert tree_hashes(model.parent) == before


def test_sigterm_during_the_export_keeps_the_previous_model_and_leaves_no_file(
    tmp_path: Path, tiny_checkpoint: Path, small_images: Path
) -> None:
    """SIGTERM used to leave an unchecked model.onnx without its sidecar, and print nothing."""
    model = _deployed(tmp_path / "deploy")
    before = tree_hashes(model.parent)
    run = tmp_path / "run"
    command = _command(tiny_checkpoint, small_images, run, f"output={model}")
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 300
    while not list(model.parent.glob(".model.onnx.*")):  # the staging folder: the export has begun
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[0]
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    console = process.communicate(timeout=300)[0]
    assert process.returncode == 128 + signal.SIGTERM, console
    assert "Traceback" not in console
    assert f"SIGTERM: export stopped; {model} and its sidecar are unchanged" in console
    assert tree_hashes(model.parent) == before
    assert "export stopped by SIGTERM" in (run / ".INTERRUPTED").read_text()
