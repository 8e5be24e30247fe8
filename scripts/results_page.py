"""Render docs/results.md from docs/results/*.json (written by the benchmarks' ``--record``).

    uv run python scripts/results_page.py    # rewrite docs/results.md (tests/test_docs.py checks it)

One section per question (``QUESTIONS``' order), in it each benchmark's figures per machine, newest first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ocr.utils.io import atomic_write_text
from scripts.benchmark_results import QUESTIONS, RESULTS_DIR, read_result

PAGE = RESULTS_DIR.parent / "results.md"
HEADER = """# Results

The newest figures of each benchmark on each machine, with the protocol, the command and the machine
(older runs: git's history of `docs/results/`). Generated: a benchmark run with `--record` writes
`docs/results/<benchmark>-<machine>.json`, then `uv run python scripts/results_page.py` rewrites this
page. `cpu-2core-*` are 2-vCPU AMD EPYC VMs, shared unless a protocol says idle; `h200` is one NVIDIA
H200 with 16 CPU cores.
"""


def render(directory: Path = RESULTS_DIR) -> str:
    """The page for the result files in ``directory``."""
    records = [read_result(path) for path in sorted(directory.glob("*.json"))]
    sections = [HEADER]
    for question in QUESTIONS:
        answers = sorted(
            (r for r in records if r["question"] == question), key=lambda r: r["measured"], reverse=True
        )
        if answers:
            sections.append(f"## {question}\n\n" + "\n".join(_result(r) for r in answers))
    return "\n".join(sections)


def _result(record: dict[str, Any]) -> str:
    lines = [
        f"### `{record['benchmark']}` on `{record['machine']}`",
        "",
        f"Measured {record['measured']}. {record['protocol']}",
        "",
        "```bash",
        record["command"],
        "```",
        "",
        "| " + " | ".join(record["columns"]) + " |",
        "|" + " --- |" * len(record["columns"]),
    ]
    lines += ["| " + " | ".join(_text(cell) for cell in row) + " |" for row in record["rows"]]
    return "\n".join(lines) + "\n"


def _text(cell: Any) -> str:
    return "-" if cell is None else str(cell).replace("|", "\\|")


if __name__ == "__main__":
    print(f"wrote {atomic_write_text(PAGE, render())}")
