"""scripts/make_photographed.py: a seeded photographed copy of a split, in the project's layout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from ocr.data.annotations import load_annotations
from tests.helpers.paths import REPO_ROOT
from tests.helpers.scripts import load_script

BOXES = [(20, 30, 120, 50), (30, 90, 150, 104), (40, 150, 100, 190)]  # x0, y0, x1, y1: black bars


def _dataset(root: Path) -> Path:
    (root / "images" / "test").mkdir(parents=True)
    (root / "jsons").mkdir()
    images = {}
    for i in range(2):
        page = np.full((220, 170 + 20 * i, 3), 255, np.uint8)
        words = {}
        for k, (x0, y0, x1, y1) in enumerate(BOXES):
            page[y0:y1, x0:x1] = 0
            points = [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]
            words[f"{k + 1:04d}"] = {
                "points": points,
                "text": "###" if k == 2 else "bar",
                "ignore": k == 1,
                "note": k,
            }
        cv2.imwrite(str(root / "images" / "test" / f"p{i}.png"), page)
        images[f"p{i}.png"] = {"words": words}
    (root / "jsons" / "test.json").write_text(json.dumps({"images": images}))
    return root


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_polygons_on_the_bars(tmp_path: Path) -> None:
    script = load_script("make_photographed")
    root = _dataset(tmp_path / "flat")

    def run(seed: int, out: str) -> Path:
        return script.main(["--root", str(root), "--seed", str(seed), "--out", str(tmp_path / out)])

    first, again, other = run(0, "a"), run(0, "b"), run(1, "c")
    assert _files(first) == _files(again)
    assert _files(first) != _files(other)
    assert (first / "images" / "test" / "p1.png").is_file() and (first / "manifest.json").is_file()
    records = load_annotations(first / "jsons" / "test.json")
    for name, record in records.items():
        photo = cv2.imread(str(first / "images" / "test" / name), cv2.IMREAD_GRAYSCALE)
        assert (record.img_w, record.img_h) == (photo.shape[1], photo.shape[0])
        assert [w.ignore for w in record.words] == [False, True, True]  # flags and texts kept
        assert [w.extra for w in record.words] == [{"note": k} for k in range(3)]
        for word in record.words:
            inside = np.zeros(photo.shape, np.uint8)
            cv2.fillPoly(inside, [np.round(word.points * 4).astype(np.int32)], 1, shift=2)
            core = cv2.erode(inside, np.ones((5, 5), np.uint8))
            ring = cv2.dilate(inside, np.ones((9, 9), np.uint8)) - cv2.dilate(
                inside, np.ones((5, 5), np.uint8)
            )
            dark = photo < 75
            assert dark[core > 0].mean() > 0.9  # the bar is under its polygon ...
            assert dark[ring > 0].mean() < 0.1  # ... and the page around it (a 3 px shift fails this)
            assert len(word.points) >= 4


def test_refuses_to_replace_a_foreign_folder(tmp_path: Path) -> None:
    script = load_script("make_photographed")
    root = _dataset(tmp_path / "flat")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(SystemExit, match="refusing to replace"):
        script.main(["--root", str(root), "--out", str(tmp_path / "mine")])
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        (["--quality", "500"], "--quality 500: expected a JPEG quality in 1..100"),
        (
            ["--config", "absent.yaml"],
            "--config absent.yaml: expected a photo settings YAML file, found none",
        ),
        (["--split", "val"], "--split val: expected "),
    ],
)
def test_an_unusable_argument_is_one_line_before_anything_is_written(
    tmp_path: Path, argument: list[str], message: str
) -> None:
    """A missing split or --config was a traceback; --quality 500 was recorded though 100 was written."""
    script = load_script("make_photographed")
    root = _dataset(tmp_path / "flat")
    with pytest.raises(SystemExit, match=re.escape(message)):
        script.main(["--root", str(root), "--out", str(tmp_path / "out"), *argument])
    assert not (tmp_path / "out").exists()


def test_a_missing_root_is_one_line_on_the_console(tmp_path: Path) -> None:
    script = REPO_ROOT / "scripts" / "make_photographed.py"
    command = [sys.executable, str(script), "--root", str(tmp_path / "x"), "--out", str(tmp_path / "out")]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    expected = tmp_path / "x" / "jsons" / "test.json"
    assert result.stderr.strip() == f"--root {tmp_path / 'x'} --split test: expected {expected}, found none"
