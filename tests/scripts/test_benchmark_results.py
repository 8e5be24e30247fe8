"""Benchmark figures as data: ``write_result`` writes what ``read_result`` and the results page read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scripts.benchmark_results import QUESTIONS, machine_name, read_result, table_cells, write_result


def test_write_result_round_trips_through_read_result(tmp_path: Path) -> None:
    path = write_result(
        "cleval",
        "CLEval speed",
        "One core, best of 3.",
        "uv run python scripts/benchmark_cleval.py",
        ["mode", "boxes/image", "CPU ms/image"],
        [("competition", 50, 1.89), ["upstream", 50, None]],
        machine="cpu-2core-avx2",
        measured="2026-11-22",
        directory=tmp_path / "results",
    )
    assert path == tmp_path / "results" / "cleval-cpu-2core-avx2.json"
    assert read_result(path) == {
        "benchmark": "cleval",
        "question": "CLEval speed",
        "machine": "cpu-2core-avx2",
        "command": "uv run python scripts/benchmark_cleval.py",
        "protocol": "One core, best of 3.",
        "measured": "2026-11-22",
        "columns": ["mode", "boxes/image", "CPU ms/image"],
        "rows": [["competition", 50, 1.89], ["upstream", 50, None]],
    }
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


def test_write_result_names_this_machine_and_today(tmp_path: Path) -> None:
    path = write_result("t", QUESTIONS[0], "p", "c", ["a"], [[1]], directory=tmp_path)
    record = json.loads(path.read_text())
    assert re.fullmatch(r"cpu-\d+core-[\w]+", record["machine"]), record["machine"]
    assert record["machine"] == machine_name("cpu") and path.name == f"t-{record['machine']}.json"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", record["measured"])


def test_write_result_refuses_an_unknown_question_and_a_ragged_row(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="question must be one of"):
        write_result("t", "How fast?", "p", "c", ["a"], [[1]], directory=tmp_path)
    with pytest.raises(ValueError, match=r"row 1 has 1 cells, expected 2"):
        write_result("t", QUESTIONS[0], "p", "c", ["a", "b"], [[1, 2], [3]], directory=tmp_path)
    assert not list(tmp_path.iterdir())


def test_read_result_names_the_missing_keys(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"benchmark": "x", "question": QUESTIONS[0]}))
    with pytest.raises(ValueError, match=r"x\.json: missing keys \['machine', 'command'"):
        read_result(path)


def test_table_cells_reads_a_printed_table() -> None:
    text = "machine line\n\n| a | b |\n| ---: | --- |\n| 1.0 | x |\n| 2.0 | y |\n"
    assert table_cells(text) == (["a", "b"], [["1.0", "x"], ["2.0", "y"]])
    with pytest.raises(ValueError, match="expected a Markdown table"):
        table_cells("no table")
