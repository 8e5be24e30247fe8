"""Benchmark the project's CLEval on receipt-like synthetic pages (one CPU core).

    uv run python scripts/benchmark_cleval.py [--boxes 50 100 200] [--images 400] [--modes upstream]

Prints per mode the ms per image per box count and a validation set's time (``--images`` pages of 100
boxes), through ``evaluate_dataset``, the path the Metric uses.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from hydra.utils import instantiate  # noqa: E402

from ocr.metrics.cleval.evaluate import evaluate_dataset  # noqa: E402
from ocr.metrics.cleval.options import CLEvalOptions  # noqa: E402
from ocr.run.config import compose_config  # noqa: E402
from scripts import benchmark_results as results  # noqa: E402

MODES = ["competition", "upstream"]


def make_page(
    rng: np.random.Generator, num_boxes: int
) -> tuple[list[np.ndarray], list[np.ndarray], list[str]]:
    """GT word boxes on a 1000 x (lines) page and jittered, slightly rotated detections."""
    gts, preds, texts = [], [], []
    for i in range(num_boxes):
        row, col = divmod(i, 4)  # 4 words per line
        x0, y0 = 20 + col * 240 + rng.uniform(0, 20), 20 + row * 30
        w, h = rng.uniform(80, 200), rng.uniform(14, 22)
        quad = np.array([[x0, y0], [x0 + w, y0], [x0 + w, y0 + h], [x0, y0 + h]])
        gts.append(quad)
        texts.append("x" * max(1, int(w / (0.6 * h))))
        u = rng.uniform()
        if u < 0.05:
            continue
        angle = np.radians(rng.uniform(-2, 2))
        c, s = np.cos(angle), np.sin(angle)
        centre = quad.mean(axis=0)
        pred = (quad - centre) @ np.array([[c, s], [-s, c]]) + centre + rng.uniform(-2, 2, size=(4, 2))
        if u < 0.1:
            mid = (pred[0] + pred[1]) / 2, (pred[3] + pred[2]) / 2
            preds += [
                np.array([pred[0], mid[0], mid[1], pred[3]]),
                np.array([mid[0], pred[1], pred[2], mid[1]]),
            ]
        else:
            preds.append(np.round(pred))
    return preds, gts, texts


def time_dataset(pages: list, options: CLEvalOptions, repeats: int) -> tuple[float, ...]:
    """Best (CPU, wall) seconds of evaluate_dataset over ``pages``; CPU time is robust to a busy machine."""
    preds, gts, texts = ([page[i] for page in pages] for i in range(3))
    ignores = [[False] * len(gt) for gt in gts]
    runs = [
        results.timed(lambda: evaluate_dataset(preds, gts, ignores, texts, options)) for _ in range(repeats)
    ]
    return tuple(min(clock) for clock in zip(*runs, strict=True))


def main() -> None:
    parser = results.benchmark_parser(__doc__)
    parser.add_argument("--boxes", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--pages", type=int, default=50, help="pages per box count for the per-image figure")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=MODES)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    rng = np.random.default_rng(0)
    page_sets = {n: [make_page(rng, n) for _ in range(args.pages)] for n in args.boxes}
    validation = [make_page(rng, 100) for _ in range(args.images)]
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    columns, totals, rows = ["mode", "boxes/image", "CPU ms/image", "wall ms/image"], [], []
    print(f"best of 3 runs over {args.pages} pages\n{results.markdown_table(columns, [])}")
    for mode in args.modes:
        options = instantiate(compose_config("train", [f"metric.mode={mode}"]).metric)
        for n, pages in page_sets.items():
            cpu, wall = time_dataset(pages, options, repeats=3)
            rows.append([mode, n, round(1000 * cpu / len(pages), 2), round(1000 * wall / len(pages), 2)])
            print(results.markdown_row(rows[-1]), flush=True)
        totals.append((mode, *time_dataset(validation, options, repeats=3)))
    validations = "; ".join(f"{mode} CPU {cpu:.2f} s, wall {wall:.2f} s" for mode, cpu, wall in totals)
    print(f"{args.images} images x 100 boxes, best of 3: {validations}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.record:
        protocol = (
            "`scripts/benchmark_cleval.py`: synthetic receipt-like pages (4 words per line, 5 % missed, "
            "5 % split, the rest jittered ±2 px and rotated up to ±2°) scored through `evaluate_dataset`, "
            "the path of `CLEvalMetric` and `runners/evaluate.py`, on one pinned core; best of 3 runs over "
            f"{args.pages} pages per box count. A validation of {args.images} images x 100 boxes: "
            f"{validations}."
        )
        command = results.command_line(__file__, None)
        results.write_result(
            "cleval", "CLEval speed", protocol, command, columns, rows, directory=args.record
        )


if __name__ == "__main__":
    main()
