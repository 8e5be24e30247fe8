"""runners/pseudo_label.py on a tiny checkpoint: the dataset it writes is one data.root reads, every
detection is counted once, and the thresholds (not the checkpoint's box_thresh) decide."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from omegaconf import DictConfig

from ocr.data.annotations import load_annotations
from tests.helpers.receipt_fixtures import eval_transform, labelled_dataset
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
