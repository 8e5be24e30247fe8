"""End to end: train a few steps on a tiny synthetic set, then test and predict from the checkpoint."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from omegaconf import DictConfig

from tests.helpers.paths import REPO_ROOT
from tests.helpers.report_cases import report_data

pytestmark = pytest.mark.slow  # end to end: real runners on tiny runs, a minute or more on 2 cores

Compose = Callable[[str, list[str], Path], DictConfig]
Runner = Callable[[str], ModuleType]
SCORES = ("test/precision", "test/recall", "test/hmean")
# The runners' closing line: images/s and where the time went.
TIMES = (
    r"^{stage}: {images} images in [\d.]+ s, [\d.]+ img/s, network \d+% of the time \| "
    r"data [\d.]+ s, network [\d.]+ s, "
    r"post-processing [\d.]+ s in .+ \(main thread waited [\d.]+ s\), writing [\d.]+ s$"
)


def test_train_leaves_checkpoints_metadata_and_success(trained_run: tuple[Path, Path]) -> None:
    run, _ = trained_run
    assert (run / ".SUCCESS").is_file() and not (run / ".FAILURE").exists()
    assert (run / "config.yaml").is_file()
    last = run / "checkpoints" / "last.ckpt"
    assert last.is_file()
    best = [p for p in (run / "checkpoints").glob("best_hmean*_epoch*.ckpt")]
    assert len(best) == 1
    meta = json.loads(Path(f"{best[0]}.json").read_text())
    assert {"config", "metrics", "git_commit", "data_fingerprint", "epoch"} <= set(meta)
    assert "val/hmean" in meta["metrics"]
    metrics = (run / "csv" / "metrics.csv").read_text()
    assert "train/loss" in metrics and "val/hmean" in metrics and "lr-AdamW" in metrics
    scores = json.loads((run / "metrics.json").read_text())["metrics"]
    assert all(0.0 <= scores[key] <= 1.0 for key in SCORES), scores
    assert (run / "curves.png").stat().st_size > 0


def test_a_redirected_run_prints_plain_progress_lines(trained_run_output: tuple[Path, Path, str]) -> None:
    stdout = trained_run_output[2]
    steps = re.findall(
        r"step \d/3 \(\d+%\) \| epoch 0 \| loss \d+\.\d{4} \| [\d.]+ img/s \| data wait \d+ %"
        r"( \(epoch start [\d.]+ s\))? \| elapsed .* ETA ",
        stdout,
    )
    assert len(steps) == 3, stdout[-3000:]
    # training ends with its data-wait figure, and the final metrics carry it
    assert re.search(r"(data wait: |input-bound: )\d+ % of training step time waiting for data", stdout)
    assert "train/data_wait" in stdout
    assert re.search(r"validation at step 3/3 \(100%\) \| epoch 0 \| .*val/hmean \d\.\d{4}", stdout)


def test_the_printed_test_command_runs_as_printed(trained_run_output: tuple[Path, Path, str]) -> None:
    run, _, stdout = trained_run_output
    commands = stdout.split("Next commands:\n", 1)[1].splitlines()
    (command,) = [c for c in commands if c.startswith("uv run runners/test.py ")]
    assert command.startswith(f"uv run runners/test.py ckpt={run}/checkpoints/best_hmean")
    assert f"uv run runners/train.py resume={run} trainer.max_steps=6" in commands
    if shutil.which("uv") is None:  # the same command through this interpreter
        command = command.replace("uv run", shlex.quote(sys.executable), 1)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}
    result = subprocess.run(
        ["bash", "-c", command], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    test_dir = Path(result.stdout.split("Run directory: ", 1)[1].splitlines()[0])
    shutil.rmtree(test_dir)  # written under the repository's outputs/, as for a user
    assert "test/hmean" in result.stdout


def test_test_runner_scores_the_checkpoint(
    trained_run: tuple[Path, Path],
    tmp_path: Path,
    tiny_run: list[str],
    compose_cfg: Compose,
    runner_module: Runner,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run, data_root = trained_run
    (best,) = (run / "checkpoints").glob("best_hmean*_epoch*.ckpt")
    cfg = compose_cfg("test", [*tiny_run, f"data.root={data_root}", f"ckpt={best}"], tmp_path)
    metrics = runner_module("test").evaluate(cfg)
    assert json.loads((tmp_path / "metrics.json").read_text())["metrics"] == metrics
    # The test after training scored the same checkpoint on the same split.
    after_training = json.loads((run / "metrics.json").read_text())["metrics"]
    assert {key: metrics[key] for key in SCORES} == pytest.approx(
        {key: after_training[key] for key in SCORES}
    )
    report = report_data((tmp_path / "report.html").read_text())
    assert len(report["cards"]) == len(list((data_root / "images" / "test").iterdir()))
    assert report["totals"]["hmean"] == pytest.approx(metrics["test/hmean"], abs=1e-6)
    assert all((tmp_path / c["prob"]).is_file() for c in report["cards"])
    assert re.search(TIMES.format(stage="test", images=len(report["cards"])), capsys.readouterr().out, re.M)


def test_predict_runner_writes_a_row_per_image(
    trained_run: tuple[Path, Path],
    tmp_path: Path,
    tiny_run: list[str],
    compose_cfg: Compose,
    runner_module: Runner,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run, data_root = trained_run
    image_dir = data_root / "images" / "test"
    # No data.root, as in the README: the default root interpolates data.synthetic, which predict drops.
    cfg = compose_cfg(
        "predict",
        [
            *tiny_run,
            f"ckpt={run / 'checkpoints' / 'last.ckpt'}",
            f"image_dir={image_dir}",
            "overlays=true",
        ],
        tmp_path,
    )
    paths = runner_module("predict").predict(cfg)
    with open(paths["submission"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["filename"] for r in rows) == sorted(p.name for p in image_dir.iterdir())
    predictions = json.loads(Path(paths["predictions"]).read_text())
    assert set(predictions["images"]) == {r["filename"] for r in rows}
    assert len(list((tmp_path / "overlays").glob("*.png"))) == len(rows)
    assert len(report_data(Path(paths["report"]).read_text())["cards"]) == len(rows)
    assert re.search(TIMES.format(stage="predict", images=len(rows)), capsys.readouterr().out, re.M)


def test_resume_continues_from_the_saved_step_with_the_run_config(
    trained_run: tuple[Path, Path], tmp_path: Path
) -> None:
    run, _ = trained_run
    saved = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert saved["global_step"] == 3 and "rng_states" in saved
    assert saved["lr_schedulers"][0]["last_epoch"] == 3
    copy = tmp_path / "run"  # the module's run stays as the other tests expect it
    shutil.copytree(run, copy)
    original_config = (copy / "config.yaml").read_text().replace(str(run), str(copy))
    (copy / "config.yaml").write_text(original_config)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}
    # Refused (changed data): nothing in the run directory changes, its .SUCCESS included.
    _, data_root = trained_run
    changed = tmp_path / "changed-data"
    shutil.copytree(data_root, changed)
    annotation = next((changed / "jsons").glob("train*.json"))
    annotation.write_text(annotation.read_text() + "\n")
    # trainer.max_steps: a resume with nothing to train is refused before the data are looked at
    refused_cmd = [
        sys.executable,
        "runners/train.py",
        f"resume={copy}",
        f"data.root={changed}",
        "trainer.max_steps=6",
    ]
    refused = subprocess.run(refused_cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "data fingerprint" in refused.stderr + refused.stdout
    assert (copy / ".SUCCESS").is_file() and not (copy / ".FAILURE").exists()
    assert not list(copy.glob("config.resumed-*.yaml"))
    # Only the run directory and what changes: the tiny data and model settings come from the run.
    cmd = [
        sys.executable,
        "runners/train.py",
        f"resume={copy}",
        "trainer.max_steps=6",
        "test_after_fit=false",
    ]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    log = (copy / "train.log").read_text()
    assert "command-line overrides applied: trainer.max_steps=6, test_after_fit=false" in log
    assert (copy / "config.yaml").read_text() == original_config
    assert "step 6" in (copy / ".SUCCESS").read_text()
    resumed = yaml.safe_load((copy / "config.resumed-step3.yaml").read_text())
    assert resumed["trainer"]["max_steps"] == 6 and resumed["data"]["synthetic"]["long_side"] == 96
    with open(copy / "csv" / "resumed-step3" / "metrics.csv", newline="") as f:
        steps = [int(row["step"]) for row in csv.DictReader(f) if row["step"]]
    assert steps and min(steps) >= 3, f"resumed run restarted from step {min(steps, default=None)}"
    final = json.loads((copy / "checkpoints" / "last.ckpt.json").read_text())
    assert final["global_step"] == 6 and final["config"]["trainer"]["max_steps"] == 6
    # The moved run keeps its best-checkpoint tracking: still one best, and last.ckpt rewritten in place.
    assert len(list((copy / "checkpoints").glob("best_*.ckpt"))) == 1
    assert sorted(p.name for p in (copy / "checkpoints").glob("last*.ckpt")) == ["last.ckpt"]
