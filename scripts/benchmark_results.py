"""Benchmark figures as data: one JSON per benchmark and machine under ``docs/results/``.

A benchmark script run with ``--record`` writes its table through :func:`write_result` into
``docs/results/<benchmark>-<machine>.json`` (a newer run replaces the file: history lives in git), and
``scripts/results_page.py`` renders docs/results.md from those files.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ocr.utils.io import atomic_write_json

RESULTS_DIR = Path(__file__).resolve().parents[1] / "docs" / "results"
# The questions docs/results.md answers, in its order; every result answers one of them.
QUESTIONS = (
    "Recipe accuracy",
    "The variants: DBNet++, PAN, encoders",
    "Training throughput",
    "Predict and deployment speed",
    "The data pipeline",
    "CLEval speed",
    "The peer",
)
KEYS = ("benchmark", "question", "machine", "command", "protocol", "measured", "columns", "rows")


def cpu_model_and_flags() -> tuple[str, set[str]]:
    """The CPU model and feature flags of /proc/cpuinfo (else the platform's processor, no flags); read
    here, not by ``ocr``, so that a benchmark run on an older checkout's package still describes the CPU."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in lines)}
    model = fields.get("model name", platform.processor() or "unknown CPU")
    return model, set(fields.get("flags", "").split())


def machine_name(device: str = "cpu") -> str:
    """``h200`` for a CUDA device (its name, less "NVIDIA"); else ``cpu-<n>core-<isa>`` from /proc/cpuinfo.
    ``auto``: the CUDA device where one is visible (for scripts whose runners pick the device)."""
    if device.startswith("cuda") or device == "auto":
        import torch

        if device == "auto":
            return machine_name("cuda" if torch.cuda.is_available() else "cpu")
        name = torch.cuda.get_device_name(torch.device(device)).lower().removeprefix("nvidia ")
        return re.sub(r"[^a-z0-9]+", "-", name).strip("-")
    isas = (("avx512_bf16", "avx512bf16"), ("avx512f", "avx512"), ("avx2", "avx2"))
    flags = cpu_model_and_flags()[1]
    isa = next((name for flag, name in isas if flag in flags), platform.machine().lower())
    return f"cpu-{os.cpu_count()}core-{isa}"


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """The command that ran ``script`` (a ``__file__``) with ``argv`` (None: this process's arguments)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return shlex.join(["uv", "run", "python", f"scripts/{Path(script).name}", *args])


def benchmark_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's parser: ``doc`` (its usage lines) as --help, and ``--record [DIR]`` (default
    docs/results/) to also write the figures as data."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--record",
        nargs="?",
        const=RESULTS_DIR,
        type=Path,
        metavar="DIR",
        help="also write the figures to DIR/<benchmark>-<machine>.json (default DIR: docs/results/)",
    )
    return parser


def worker_overrides(workers: int | None) -> list[str]:
    """``data.num_workers`` (persistent where there are any); None: the config's."""
    if workers is None:
        return []
    return [f"data.num_workers={workers}", f"data.persistent_workers={workers > 0}"]


def machine_line(device: str = "cpu") -> str:
    """Platform, CPU model and SIMD flags, logical CPUs, load, torch and (``cuda``) the GPU, for a report."""
    import torch

    model, flags = cpu_model_and_flags()
    simd = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags] or ["no AVX2"]
    parts = [platform.platform(), f"{model} ({', '.join(simd)})", f"{os.cpu_count()} logical CPUs"]
    parts += [f"load average {os.getloadavg()[0]:.1f}", f"torch {torch.__version__}"]
    if device.startswith("cuda"):
        parts.append(torch.cuda.get_device_name(torch.device(device)))
    return ", ".join(parts)


def timed(fn: Callable[[], object], cpu_clock: Callable[[], float] = time.process_time) -> tuple[float, ...]:
    """CPU (``cpu_clock``) and wall seconds of one call of ``fn``."""
    cpu, wall = cpu_clock(), time.perf_counter()
    fn()
    return cpu_clock() - cpu, time.perf_counter() - wall


def markdown_row(cells: Sequence[Any]) -> str:
    """One row of a Markdown table (None: ``-``)."""
    return "| " + " | ".join("-" if cell is None else str(cell) for cell in cells) + " |"


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """``columns`` and ``rows`` as a Markdown table, what :func:`table_cells` reads back."""
    return "\n".join(markdown_row(line) for line in [columns, ["---"] * len(columns), *rows])


def table_cells(markdown: str) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of the Markdown table in ``markdown`` (a script's printed table)."""
    lines = [line.strip() for line in markdown.splitlines() if line.strip().startswith("|")]
    if len(lines) < 2:
        raise ValueError(f"expected a Markdown table (a header, a rule, rows), got {markdown!r}")
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return cells[0], cells[2:]


def write_result(
    benchmark: str,
    question: str,
    protocol: str,
    command: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    device: str = "cpu",
    machine: str | None = None,
    measured: str | None = None,
    directory: Path = RESULTS_DIR,
) -> Path:
    """Write one benchmark's figures to ``directory/<benchmark>-<machine>.json`` atomically."""
    if question not in QUESTIONS:
        raise ValueError(f"benchmark {benchmark!r}: question must be one of {QUESTIONS}, got {question!r}")
    for index, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(
                f"benchmark {benchmark!r}: row {index} has {len(row)} cells, expected {len(columns)} "
                f"(columns {list(columns)})"
            )
    machine = machine or machine_name(device)
    # A cell as JSON keeps it: numbers and text as they are, anything else as text.
    cells = [[v if v is None or isinstance(v, str | int | float) else str(v) for v in row] for row in rows]
    values = (benchmark, question, machine, command, protocol, measured or datetime.date.today().isoformat())
    record = dict(zip(KEYS, (*values, list(columns), cells), strict=True))
    return atomic_write_json(directory / f"{benchmark}-{machine}.json", record)


def read_result(path: Path) -> dict[str, Any]:
    """A result file's record, checked for the keys :func:`write_result` writes."""
    record = json.loads(path.read_text())
    missing = [key for key in KEYS if key not in record]
    if missing:
        raise ValueError(f"{path}: missing keys {missing} (a result holds {list(KEYS)})")
    if record["question"] not in QUESTIONS:
        raise ValueError(f"{path}: question must be one of {QUESTIONS}, got {record['question']!r}")
    return dict(record)
