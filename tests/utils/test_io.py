"""Atomic writes: parents created first; a failed write leaves the old file and no temp file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ocr.utils.io import atomic_write_json, atomic_write_text


def test_creates_missing_parent_directories(tmp_path: Path) -> None:
    path = atomic_write_text(tmp_path / "a" / "b" / "report.txt", "hello")
    assert path.read_text() == "hello"
    assert [p.name for p in path.parent.iterdir()] == ["report.txt"]


def test_json_stringifies_paths_and_numpy_values(tmp_path: Path) -> None:
    path = atomic_write_json(tmp_path / "m.json", {"p": tmp_path, "x": np.float32(0.5), "v": np.arange(2)})
    assert json.loads(path.read_text()) == {"p": str(tmp_path), "x": 0.5, "v": [0, 1]}


def test_failed_rename_keeps_the_old_file_and_removes_the_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = atomic_write_text(tmp_path / "m.json", "old")

    def fail(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("ocr.utils.io.os.replace", fail)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]
