"""Submission CSV: round trip, one row per image, clear errors for malformed rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ocr.utils.submission import SubmissionError, read_submission_csv, write_submission_csv


def test_round_trip_rounds_to_integers_and_keeps_empty_images(tmp_path: Path) -> None:
    quad = np.array([[10.4, 10.6], [110.5, 10.0], [110.0, 30.2], [9.6, 30.0]], dtype=np.float32)
    hexagon = np.array([[0, 0], [5, -2], [10, 0], [10, 5], [5, 7], [0, 5]], dtype=np.float32)
    path = write_submission_csv(
        tmp_path / "out" / "submission.csv",
        {"a.jpg": [quad, hexagon], "b, with comma.jpg": [], "c.jpg": [quad]},
    )
    lines = path.read_text().splitlines()
    assert lines[0] == "filename,polygons"
    assert lines[1] == "a.jpg,10 11 110 10 110 30 10 30|0 0 5 -2 10 0 10 5 5 7 0 5"
    assert lines[2] == '"b, with comma.jpg",'
    back = read_submission_csv(path)
    assert list(back) == ["a.jpg", "b, with comma.jpg", "c.jpg"]
    assert back["b, with comma.jpg"] == []
    np.testing.assert_array_equal(back["a.jpg"][1], hexagon)
    assert back["a.jpg"][0].dtype == np.float32 and back["a.jpg"][0].shape == (4, 2)


def test_write_rejects_bad_polygons(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="x.jpg: polygon 0"):
        write_submission_csv(tmp_path / "s.csv", {"x.jpg": [np.array([[0, 0], [1, np.nan], [2, 2]])]})
    assert not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("name,polys\na.jpg,\n", r"s.csv:1: expected header"),
        ("filename,polygons\na.jpg,1 2 3 4 5\n", r"s.csv:2: polygon 0: expected an even count"),
        ("filename,polygons\na.jpg,1 2 3 4 5 6|1 2 x 4 5 6\n", r"s.csv:2: polygon 1: expected numbers"),
        ("filename,polygons\na.jpg,1 2 3 4 5 6\na.jpg,\n", r"s.csv:3: duplicate filename"),
        ("filename,polygons\na.jpg,1 2 3 4 5 6,extra\n", r"s.csv:2: expected 2 fields"),
        ("filename,polygons\na.jpg,1 2 3 4 nan 6\n", r"s.csv:2: polygon 0"),
    ],
)
def test_read_names_file_and_row_of_malformed_input(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "s.csv"
    path.write_text(content)
    with pytest.raises(SubmissionError, match=match):
        read_submission_csv(path)


def test_read_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        read_submission_csv(tmp_path / "nope.csv")
