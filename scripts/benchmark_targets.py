"""Benchmark DB target generation: ``ocr.data.targets.db.make_db_targets`` vs the classic per-polygon oracle.

    uv run python scripts/benchmark_targets.py [--boxes 50 100 200] [--size 640] [--images 5]
        [--layouts words jittered]

On ONE CPU core (torch never imported) over seeded receipt-like layouts of word boxes, as exact
rectangles (``words``) or with each corner moved up to 1 px (``jittered``); prints CPU ms/image, the
speed-up and wall ms/image.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import importlib.util  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402

import cv2  # noqa: E402
import numpy as np  # noqa: E402

from ocr.data.targets.db import make_db_targets  # noqa: E402
from scripts import benchmark_results as results  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "helpers" / "db_reference.py"


def load_reference() -> ModuleType:
    """The oracle, tests/helpers/db_reference.py (the repo root is not on a script's path)."""
    spec = importlib.util.spec_from_file_location("db_reference", REFERENCE)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def time_per_image(
    build: Callable[[list[np.ndarray], list[bool], int, int], object],
    layouts: list[list[np.ndarray]],
    size: int,
    rounds: int,
) -> tuple[float, ...]:
    """Fastest of ``rounds`` passes: (this thread's CPU ms, wall ms) per image."""

    def one_pass() -> None:
        for boxes in layouts:
            build(boxes, [False] * len(boxes), size, size)

    runs = [results.timed(one_pass, time.thread_time) for _ in range(rounds)]
    return tuple(min(clock) * 1e3 / len(layouts) for clock in zip(*runs, strict=True))


def main() -> None:
    parser = results.benchmark_parser(__doc__)
    parser.add_argument("--boxes", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--size", type=int, default=640)
    parser.add_argument("--images", type=int, default=5, help="layouts per box count")
    parser.add_argument("--rounds", type=int, default=7, help="timed passes for the fast one (oracle: 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layouts", nargs="+", choices=["words", "jittered"], default=["words", "jittered"])
    args = parser.parse_args()

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    cv2.setNumThreads(1)
    reference = load_reference()
    rng = np.random.default_rng(args.seed)

    rows = []
    for kind in args.layouts:
        for count in args.boxes:
            layouts = [
                reference.receipt_word_boxes(rng, count, args.size, args.size) for _ in range(args.images)
            ]
            if kind == "jittered":
                layouts = [reference.jitter_corners(rng, boxes, 1.0) for boxes in layouts]
            make_db_targets(layouts[0], [False] * count, args.size, args.size)  # warm-up (lazy imports)
            oracle_cpu, oracle_wall = time_per_image(reference.reference_db_targets, layouts, args.size, 3)
            fast_cpu, fast_wall = time_per_image(make_db_targets, layouts, args.size, args.rounds)
            rows.append((kind, count, oracle_cpu, fast_cpu, oracle_wall, fast_wall))

    if "torch" in sys.modules:
        raise RuntimeError("torch was imported during the benchmark: expected a torch-free target path")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, opencv {cv2.__version__}, "
        f"{args.size}x{args.size} px, {args.images} layouts per row, 1 core, load average {load:.1f}"
    )
    columns = ["layout", "boxes", "classic ms/image", "make_db_targets ms/image", "speed-up"]
    table = [(k, n, round(o, 1), round(f, 2), f"{o / f:.1f}x") for k, n, o, f, _, _ in rows]
    printed = [[*row, f"{o:.1f} / {f:.2f}"] for row, (*_, o, f) in zip(table, rows, strict=True)]
    print(results.markdown_table([*columns, "wall ms/image (classic / fast)"], printed))
    if args.record:
        protocol = (
            "`scripts/benchmark_targets.py`: `ocr.data.targets.db.make_db_targets` against the classic "
            "per-polygon algorithm of MhLiao/DB (`tests/helpers/db_reference.py`) on the same seeded "
            f"receipt layouts, {args.size} px, one pinned core, CPU time of the calling thread (best of "
            f"{args.rounds} / of 3 passes). `jittered`: every corner moved by up to 1 px. Load average "
            f"{load:.1f}."
        )
        command = results.command_line(__file__, None)
        results.write_result(
            "targets", "The data pipeline", protocol, command, columns, table, directory=args.record
        )


if __name__ == "__main__":
    main()
