"""runners/evaluate.py end to end with plain ``python runners/evaluate.py`` (PYTHONPATH = repo root)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from ocr.utils.submission import write_submission_csv
from tests.helpers.paths import REPO_ROOT


def _run(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [
        sys.executable,
        str(REPO_ROOT / "runners" / "evaluate.py"),
        *overrides,
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_evaluate_submission_csv(tmp_path: Path) -> None:
    word = [[10, 10], [110, 10], [110, 30], [10, 30]]
    gt = {
        "images": {
            "a.jpg": {"words": {"0001": {"points": word, "text": "HELLO"}}},
            "b.jpg": {
                "words": {
                    "0001": {"points": word},
                    "0002": {"points": [[10, 50], [110, 50], [110, 70], [10, 70]], "ignore": True},
                }
            },
            "c.jpg": {"words": {"0001": {"points": word}}},
        }
    }
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    half = np.array([[10, 10], [60, 10], [60, 30], [10, 30]])
    write_submission_csv(tmp_path / "sub.csv", {"a.jpg": [np.array(word)], "b.jpg": [half]})  # c.jpg missing
    proc = _run(tmp_path, "gt=gt.json", "pred=sub.csv", f"out_dir={tmp_path / 'out'}")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    # per image H: a = 1, b = 2 * 0.4 / 1.4 (half covered), c = 0 (no row); competition = their mean
    assert summary["num_images"] == 3
    assert summary["hmean"] == pytest_approx((1 + 0.8 / 1.4) / 3)
    rows = list(csv.DictReader((tmp_path / "out" / "cleval_per_image.csv").open()))
    assert [r["filename"] for r in rows] == ["a.jpg", "b.jpg", "c.jpg"]
    assert rows[1]["num_gt_ignored"] == "1"

    upstream = _run(tmp_path, "gt=gt.json", "pred=gt.json", "metric.mode=upstream", f"out_dir={tmp_path}")
    assert upstream.returncode == 0, upstream.stderr
    assert json.loads(upstream.stdout.strip().splitlines()[-1])["hmean"] == 1.0
    # the `mode=` shortcut reaches the metric: micro-averaged counts differ from the per-image mean
    shortcut = _run(tmp_path, "gt=gt.json", "pred=sub.csv", "mode=upstream", f"out_dir={tmp_path / 'up'}")
    assert shortcut.returncode == 0, shortcut.stderr
    assert json.loads(shortcut.stdout.strip().splitlines()[-1])["hmean"] != pytest_approx(summary["hmean"])


def test_evaluate_reports_a_malformed_submission(tmp_path: Path) -> None:
    (tmp_path / "gt.json").write_text(json.dumps({"images": {}}))
    (tmp_path / "sub.csv").write_text("filename,polygons\na.jpg,1 2 3\n")
    proc = _run(tmp_path, "gt=gt.json", "pred=sub.csv")
    assert proc.returncode == 1
    assert "sub.csv:2: polygon 0" in proc.stdout
    # Our own error: the message alone, no "Error executing job" and traceback from Hydra.
    assert "Traceback" not in proc.stdout + proc.stderr and "Error executing job" not in proc.stderr


def pytest_approx(value: float):
    import pytest

    return pytest.approx(value, abs=1e-9)


def _one_word_gt(tmp_path: Path, names: list[str]) -> np.ndarray:
    word = [[10, 10], [110, 10], [110, 30], [10, 30]]
    gt = {"images": {name: {"words": {"0001": {"points": word}}} for name in names}}
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    return np.array(word)


def test_evaluate_matches_prediction_names_after_stripping_folders(tmp_path: Path) -> None:
    word = _one_word_gt(tmp_path, ["a.jpg", "b.jpg"])
    write_submission_csv(tmp_path / "sub.csv", {"images/test/a.jpg": [word], "images/test/b.jpg": [word]})
    proc = _run(tmp_path, "gt=gt.json", "pred=sub.csv")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "precision": 1.0,
        "recall": 1.0,
        "hmean": 1.0,
        "num_images": 2,
    }
    assert "2 prediction names match GT names only without their folders" in proc.stdout
    assert "'images/test/a.jpg' (sub.csv) -> 'a.jpg' (gt.json)" in proc.stdout


def test_evaluate_fails_when_no_prediction_name_matches(tmp_path: Path) -> None:
    word = _one_word_gt(tmp_path, ["a.jpg", "b.jpg"])
    write_submission_csv(tmp_path / "sub.csv", {"images/test/x.png": [word], "y.png": []})
    proc = _run(tmp_path, "gt=gt.json", "pred=sub.csv")
    assert proc.returncode == 1
    assert (
        "pred=sub.csv: none of its 2 image names matches one of the 2 in gt=gt.json, even without "
        "folders: e.g. 'images/test/x.png' in the predictions, 'a.jpg' in the ground truth"
    ) in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_evaluate_names_two_predictions_that_match_one_gt_image_only_without_folders(tmp_path: Path) -> None:
    """a/x.jpg and b/x.jpg both became x.jpg: the GT image was then scored as missed, without a word."""
    word = _one_word_gt(tmp_path, ["x.jpg", "y.jpg"])
    write_submission_csv(tmp_path / "sub.csv", {"a/x.jpg": [word], "b/x.jpg": [word], "y.jpg": [word]})
    proc = _run(tmp_path, "gt=gt.json", "pred=sub.csv")
    assert proc.returncode == 1
    assert (
        "pred=sub.csv: 1 image name(s) match only without their folders, and not one to one: e.g. "
        "prediction(s) 'a/x.jpg', 'b/x.jpg' and GT image(s) 'x.jpg' in gt=gt.json"
    ) in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_evaluate_runs_with_the_default_run_dir_and_without_torch(tmp_path: Path) -> None:
    """No ``hydra.run.dir=``: the default run dir uses ``${first_set:}``, which evaluate must register."""
    _one_word_gt(tmp_path, ["a.jpg"])
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, str(REPO_ROOT / "runners" / "evaluate.py"), "gt=gt.json", "pred=gt.json"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["hmean"] == 1.0
    assert list((tmp_path / "outputs" / "evaluate").glob("*/cleval_per_image.csv"))
    # evaluate stays light: loading the runner (resolvers included) imports no torch
    check = (
        "import runpy, sys; runpy.run_path(sys.argv[1], run_name='probe'); "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    light = subprocess.run([sys.executable, "-c", check, str(REPO_ROOT / "runners" / "evaluate.py")], env=env)
    assert light.returncode == 0, "runners/evaluate.py imports torch"


def test_evaluate_names_the_file_and_row_or_key_of_an_unusable_input(tmp_path: Path) -> None:
    """A 1e39 coordinate, a 2-point prediction and an out_dir that is a file ended in tracebacks; one image
    under two names (read by the one annotation reader, for GT and training too) was scored twice."""
    _one_word_gt(tmp_path, ["a.jpg"])
    (tmp_path / "big.csv").write_text("filename,polygons\na.jpg,10 10 1e39 10 110 30 10 30\n")
    two_points = {"images": {"a.jpg": {"words": {"0007": {"points": [[10, 10], [110, 10]]}}}}}
    (tmp_path / "two.json").write_text(json.dumps(two_points))
    (tmp_path / "taken").write_text("")
    twice = {"images": {"a.jpg": {"words": {}}, "sub/../a.jpg": {"words": {}}}}  # was scored twice
    (tmp_path / "twice.json").write_text(json.dumps(twice))
    cases = {
        "pred=big.csv": "big.csv:2: polygon 0: expected an even count >= 6 of finite numbers within float32",
        "pred=two.json": 'pred=two.json: images["a.jpg"].words["0007"].points: expected >= 3 finite [x, y] '
        "points, got 2 point(s)",
        f"pred=gt.json out_dir={tmp_path / 'taken'}": f"out_dir={tmp_path / 'taken'}: expected a folder",
        "pred=twice.json": 'twice.json: images["a.jpg"] and images["sub/../a.jpg"] name the same file',
    }
    for overrides, message in cases.items():
        proc = _run(tmp_path, "gt=gt.json", *overrides.split())
        console = proc.stdout + proc.stderr
        assert proc.returncode == 1, console
        assert message in console and "Traceback" not in console, console
