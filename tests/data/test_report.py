"""Data report: statistics, PNGs and the CLI on a tiny fixture."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import pytest

from ocr.data.report import format_stats, main, write_report
from tests.helpers.receipt_fixtures import make_root, write_split


def test_write_report_stats_and_pngs(tmp_path: Path) -> None:
    root = make_root(tmp_path / "data", num_images=3)
    write_split(
        root,
        "val",
        {"val_0.png": [{"points": [[30, 40], [110, 40], [110, 70], [30, 70]]}], "ghost.png": []},
        create=False,
    )
    stats = write_report(root, "val", tmp_path / "out", num_images=4, long_side=80, exif_mode="rotated")
    assert (stats["images"], stats["words"], stats["ignore"], stats["missing"]) == (1, 1, 0, ["ghost.png"])
    assert stats["unannotated"] == ["val_1.png", "val_2.png"]  # left on disk by make_root
    assert "unannotated 2  img_w/img_h mismatch 0" in format_stats(stats)
    assert stats["box_width"] == {"min": 80.0, "median": 80.0, "max": 80.0}
    assert stats["box_short_side_at_80"]["median"] == pytest.approx(15.0, abs=0.1)  # 30 px * 80 / 160
    pngs = sorted((tmp_path / "out").glob("*.png"))
    assert [p.name for p in pngs] == ["val_val_0.png"]
    image = cv2.imread(str(pngs[0]))
    assert image.shape == (60, 3 * 80, 3)  # 160x120 letterboxed to 80 -> 80x60 image area, 3 panels
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["words"] == 1


def test_cli_prints_counts_by_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_root(tmp_path / "data", num_images=2)
    assert (
        main(
            [
                str(root),
                "--split",
                "train",
                "--out",
                str(tmp_path / "out"),
                "--num-images",
                "1",
                "--long-side",
                "64",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "images 2  words 4  ignore 2" in printed and "too_few_points=2" in printed
    assert "box_short_side" in printed and len(list((tmp_path / "out").glob("*.png"))) == 1
    assert format_stats(write_report(root, "train", tmp_path / "o2", 0, 64, "rotated")).count("\n") >= 8
