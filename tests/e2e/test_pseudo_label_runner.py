"""runners/pseudo_label.py on a tiny checkpoint: the dataset it writes is one data.root reads, every
detection is counted once, and the thresholds (not the checkpoint's box_thresh) decide; it destroys no
data it did not make (an existing dataset, the images it reads) and labels no image it could not read."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import cv2
import numpy as np
import pytest
import yaml
from omegaconf import DictConfig

from ocr.data.annotations import load_annotations
from tests.helpers.file_hashes import tree_hashes
from tests.helpers.paths import REPO_ROOT
from tests.helpers.receipt_fixtures import eval_transform, labelled_dataset, make_root
from tests.helpers.scripts import receipt_images
from tests.helpers.tiny_checkpoint import tiny_checkpoint

pytestmark = pytest.mark.slow  # a tiny network over a few images, twice: over 20 s on 2 busy cores

Compose = Callable[[str, list[str], Path], DictConfig]
Runner = Callable[[str], ModuleType]


def test_pseudo_labels_form_a_dataset_split_by_the_score_thresholds(
    tmp_path: Path,
    tiny_run: list[str],
    compose_cfg: Compose,
    runner_module: Runner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    (tmp_path / "ckpt").mkdir()
    # The checkpoint's box_thresh (0.95) would drop most detections; the runner keeps every candidate.
    ckpt = tiny_checkpoint(tmp_path / "ckpt", [*tiny_run, "postprocess.box_thresh=0.95"])
    images = receipt_images(tmp_path / "unlabelled", 3, 96, 10)

    def run(name: str, text: float, ignore: float) -> dict:
        out = tmp_path / name
        overrides = [
            *tiny_run,
            f"ckpt={ckpt}",
            f"image_dir={images}",
            f"output={out}",
            f"pseudo.text_score={text}",
            f"pseudo.ignore_score={ignore}",
        ]
        with caplog.at_level(logging.INFO):
            summary = runner_module("pseudo_label").pseudo_label(
                compose_cfg("pseudo_label", overrides, out / "run")
            )
        assert json.loads((out / "pseudo_labels.json").read_text()) == summary
        assert yaml.safe_load((out / "run" / "config.yaml").read_text())["postprocess"]["box_thresh"] == 0.0
        return summary

    everything = run("all", text=1.0, ignore=0.0)  # every detection kept, as don't-care
    counts = everything["counts"]
    total = counts["ignored"]
    assert counts["images"] == 3 and counts["text"] == 0 and counts["dropped"] == 0 and total >= 3
    records = load_annotations(tmp_path / "all" / "jsons" / "train.json")
    scores = sorted(w.extra["score"] for r in records.values() for w in r.words)
    assert len(scores) == total and all(w.ignore for r in records.values() for w in r.words)
    assert (records["r0.png"].img_w, records["r0.png"].img_h) == (60, 96)
    assert "postprocess.box_thresh=0 (was 0.95)" in caplog.text

    # Thresholds half-way between stored scores (rounded to 4 decimals): one detection in each class.
    assert scores[0] < scores[1] < scores[-1]
    low, high = round((scores[0] + scores[1]) / 2, 5), round((scores[-2] + scores[-1]) / 2, 5)
    split = run("split", text=high, ignore=low)["counts"]
    assert split["text"] == sum(s >= high for s in scores)
    assert split["ignored"] == sum(low <= s < high for s in scores)
    assert split["dropped"] == sum(s < low for s in scores)
    assert min(split["text"], split["ignored"], split["dropped"]) > 0
    assert split["text"] + split["ignored"] + split["dropped"] == total
    assert f"Pseudo-labels (text_score={high}, ignore_score={low}): 3 images" in caplog.text

    # The folder is a dataset root: its train split loads, don't-care boxes kept as ignored.
    dataset = labelled_dataset(tmp_path / "split", "train", eval_transform(96))
    assert len(dataset) == 3 and (tmp_path / "split" / "images" / "train" / "r1.png").is_symlink()


def _pseudo_label(tmp_path: Path, overrides: list[str]) -> tuple[int, str]:
    """Run the runner as a user does (its own process, console captured)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    command = [sys.executable, "runners/pseudo_label.py", *overrides, f"hydra.run.dir={tmp_path / 'run'}"]
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout + result.stderr


def _truncated_jpeg(path: Path) -> None:
    """A JPEG whose header reads (its size is known) but whose image data ends half-way."""
    image = np.full((96, 70, 3), 255, np.uint8)
    cv2.rectangle(image, (5, 10), (50, 18), (0, 0, 0), -1)
    data = cv2.imencode(".jpg", image)[1].tobytes()
    path.write_bytes(data[: len(data) // 2])


def test_an_output_holding_a_dataset_is_refused_and_overwrite_keeps_a_backup(
    tmp_path: Path, tiny_run: list[str], tiny_checkpoint: Path
) -> None:
    """output=<a labelled dataset> used to overwrite its jsons/train.json without a word; a truncated
    image used to be written into the set as a receipt without text."""
    dataset = make_root(tmp_path / "labelled")
    before = tree_hashes(dataset)
    images = receipt_images(tmp_path / "unlabelled", 2, 96, 10)
    _truncated_jpeg(images / "broken.jpg")
    common = [*tiny_run, f"ckpt={tiny_checkpoint}", f"image_dir={images}", f"output={dataset}"]
    code, console = _pseudo_label(tmp_path, common)
    assert code == 1 and "Traceback" not in console, console
    refusal = f"output={dataset}: expected a folder without a dataset, but it holds {dataset / 'jsons'}"
    assert len([line for line in console.splitlines() if refusal in line]) == 1, console
    assert "overwrite=true" in console and "Pseudo-labels" not in console  # refused before predicting
    assert tree_hashes(dataset) == before

    code, console = _pseudo_label(tmp_path, [*common, "overwrite=true"])
    assert code == 0 and "Traceback" not in console, console
    annotations = dataset / "jsons" / "train.json"
    (backup,) = annotations.parent.glob("train.json.*.bak")
    after = tree_hashes(dataset)
    assert after.pop(f"jsons/{backup.name}") == before["jsons/train.json"]  # the labels replaced, kept
    assert after.pop("jsons/train.json") != before["jsons/train.json"]
    kept = {k: v for k, v in before.items() if k != "jsons/train.json"}
    assert {k: after[k] for k in kept} == kept  # every other file of the labelled set as it was
    assert set(load_annotations(annotations)) == {"r0.png", "r1.png"}  # broken.jpg left out, not "no text"
    assert "1 images do not decode (truncated or corrupt) and are left out: broken.jpg" in console
    assert json.loads((dataset / "pseudo_labels.json").read_text())["counts"]["unreadable"] == 1


def test_an_image_dir_inside_output_is_refused_even_with_overwrite(
    tmp_path: Path, tiny_run: list[str], tiny_checkpoint: Path
) -> None:
    """image_dir=<D>/images/train output=<D> used to replace every image by a link to itself."""
    dataset = make_root(tmp_path / "labelled")
    before = tree_hashes(dataset)
    image_dir = dataset / "images" / "train"
    overrides = [*tiny_run, f"ckpt={tiny_checkpoint}", f"image_dir={image_dir}", f"output={dataset}"]
    code, console = _pseudo_label(tmp_path, [*overrides, "overwrite=true"])
    assert code == 1 and "Traceback" not in console, console
    assert (
        f"image_dir={image_dir}: expected a folder outside output={dataset}, but it is inside it" in console
    )
    assert tree_hashes(dataset) == before
