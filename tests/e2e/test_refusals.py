"""Refusals through the real runners: one line naming key, value and range, exit 1, no traceback, and
nothing loaded first (issue 30: a 5000 px crop of 128 px images hung its first step for minutes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.receipt_fixtures import block_words, make_root, write_split


def _run(runner: str, *overrides: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, f"runners/{runner}.py", *overrides],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result, time.perf_counter() - started


def test_a_crop_beyond_the_training_images_is_refused_before_any_data_loads(tmp_path: Path) -> None:
    run = tmp_path / "run"
    data_root = tmp_path / "synthetic"  # generated on first use: it must not be
    result, seconds = _run(
        "train",
        "data.train_transform.crop_size=5000",
        "data.train_transform.train_long_side=128",
        f"data.root={data_root}",
        f"hydra.run.dir={run}",
    )
    console = result.stdout + result.stderr
    assert result.returncode == 1, console
    assert "Traceback" not in console
    assert "data.train_transform.crop_size: expected <= 384 (the largest scaled training image" in console
    assert not run.exists() and not data_root.exists()  # refused at the run-start gate: nothing written
    # 7.4 s on 2 cores under a load of 19 (torch is not imported for it: that alone took 25 s there).
    assert seconds < 20, f"refused after {seconds:.1f} s"


def test_a_decoder_without_channels_is_refused_in_one_line_naming_the_key(tmp_path: Path) -> None:
    """DBNet++ (and PAN) with channels=-8 failed in torch's conv constructor, the key unnamed."""
    result, _ = _run(
        "train", "model=dbnetpp_resnet18", "model.decoder.channels=-8", f"hydra.run.dir={tmp_path / 'run'}"
    )
    console = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in console, console
    assert (
        "out of range (fix them in the YAML or on the command line): model.decoder.channels: expected "
        ">= 1, got -8" in console
    )


def test_a_sidecar_value_that_fails_the_config_check_is_named_with_the_sidecar(tmp_path: Path) -> None:
    """mean: "abc" in an export's sidecar failed inside EvalTransform, naming neither."""
    pytest.importorskip("onnxruntime")
    model = tmp_path / "model.onnx"
    model.write_bytes(b"never read: the settings are checked first")
    sidecar = {"format": "ocr-dbnet-prob-map", "data": {"eval_transform": {"mean": "abc"}}, "postprocess": {}}
    Path(f"{model}.json").write_text(json.dumps(sidecar))
    result, _ = _run(
        "predict",
        "backend=onnx",
        f"onnx_model={model}",
        f"image_dir={tmp_path}",
        f"hydra.run.dir={tmp_path}/r",
    )
    console = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in console, console
    assert "the ONNX export (model.onnx.json): a stored value is refused" in console
    assert "data.eval_transform.mean: expected a list, got 'abc' (str)" in console


@pytest.mark.slow  # a training run up to its first data scan: a minute on 2 busy cores
def test_an_extra_train_root_without_a_usable_image_is_one_line(tmp_path: Path) -> None:
    """The message was clear, but came with a traceback."""
    make_root(tmp_path / "labelled", num_images=2)
    write_split(tmp_path / "empty", "train", {"ghost.png": block_words()}, create=False)
    result, _ = _run(
        "train",
        "data=receipts",
        f"data.root={tmp_path / 'labelled'}",
        f"data.extra_train_roots=[{tmp_path / 'empty'}]",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    console = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in console, console
    assert (
        f"data.extra_train_roots[0]={tmp_path / 'empty'} has no usable image (1 listed, 1 missing" in console
    )


@pytest.mark.slow  # two more runner processes
def test_pipeline_optimizer_and_export_refusals_are_one_line_each(tmp_path: Path) -> None:
    result, _ = _run(
        "test",
        f"ckpt={tmp_path / 'missing.ckpt'}",  # would be refused later: the config check comes first
        "pipeline.kind=fork",
        "pipeline.max_pending_batches=0",
        f"hydra.run.dir={tmp_path / 'test'}",
    )
    console = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in console, console
    assert "pipeline.kind: expected one of process, thread, inline, got 'fork'" in console
    assert "pipeline.max_pending_batches: expected >= 1, got 0" in console
    result, _ = _run(
        "export", f"ckpt={tmp_path / 'missing.ckpt'}", "long_side=abc", f"hydra.run.dir={tmp_path}/x"
    )
    console = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in console, console
    assert "long_side: expected null (the checkpoint's) or an int >= 1, got 'abc'" in console


@pytest.mark.slow  # the shared tiny training run
def test_a_resume_of_a_finished_run_is_refused_and_leaves_it_as_it_was(
    trained_run: tuple[Path, Path],
) -> None:
    """It used to test again, rewrite metrics.json with the test keys only, and rewrite .SUCCESS."""
    run, data_root = trained_run
    before = {name: (run / name).read_bytes() for name in ("metrics.json", ".SUCCESS")}
    result, _ = _run("train", f"resume={run}")
    console = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in console, console
    assert "nothing to train, the run is at step 3 and trainer.max_steps=3" in console
    assert f"resume={run} trainer.max_steps=6" in console
    assert {name: (run / name).read_bytes() for name in before} == before
