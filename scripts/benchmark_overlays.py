"""Benchmark the validation overlays' cost against the validation they come from (the CPU preset).

    uv run python scripts/benchmark_overlays.py [--ckpt CKPT] [--repeats 3] [--logger tensorboard] [--record]

``trainer.validate`` on the ``hardware=cpu`` preset's synthetic val split with ``callbacks.val_overlays``
and the logger, after a warm-up. The cost: the callback's own time plus the workers' ``box_outcomes``
(timed again here on the same matches); the share is that cost over the validation's wall time.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback

from ocr.evaluation.host_work import ImageOutcome
from ocr.lightning_modules.build import build_module
from ocr.metrics.cleval.evaluate import match_image
from ocr.metrics.cleval.outcomes import box_outcomes
from ocr.reporting.overlays import ValOverlays
from ocr.run.config import compose_config
from ocr.run.entry import instantiate_all
from scripts.benchmark_results import benchmark_parser, command_line, markdown_table, write_result

COLUMNS = ["pass", "images", "validation s", "overlay callback s", "box outcomes s", "overlay share %"]


class OutcomeTimer(Callback):
    """A second sink of the pipeline: times ``box_outcomes`` on each val image's match, as the workers do."""

    preview_long_side = 0

    def __init__(self, options: Any) -> None:
        self.options = options
        self.seconds = 0.0

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        pl_module.pipeline.sinks.append(self)

    def add(self, outcome: ImageOutcome) -> None:
        gt, polygons = outcome.job.gt, outcome.prediction["polygons"]
        if gt is None:
            return
        match = match_image(polygons, gt.polygons, gt.ignore, gt.texts, self.options)
        started = time.perf_counter()
        box_outcomes(match, len(gt.polygons), len(polygons))
        self.seconds += time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--ckpt", type=Path, help="network weights (model.init_from); default: random")
    parser.add_argument("--repeats", type=int, default=3, help="timed validation passes")
    parser.add_argument("--logger", default="tensorboard", help="the logger config the overlays go to")
    args = parser.parse_args(argv)
    out = Path(tempfile.mkdtemp(prefix="benchmark_overlays_"))
    weights = [f"model.init_from={args.ckpt}"] if args.ckpt else []
    cfg = compose_config("train", ["hardware=cpu", f"logger={args.logger}", *weights], out)
    datamodule = instantiate(cfg.data)
    module = build_module(cfg)
    overlays: ValOverlays = instantiate(cfg.callbacks.val_overlays)
    timer = OutcomeTimer(module.val_metric.options)
    logger = instantiate_all(cfg.logger) or False
    quiet = {"enable_checkpointing": False, "enable_progress_bar": False}
    trainer = instantiate(cfg.trainer, callbacks=[overlays, timer], logger=logger, **quiet)
    rows: list[list[Any]] = []
    for index in range(args.repeats + 1):
        callback_before, outcomes_before = overlays.seconds, timer.seconds
        started = time.perf_counter()
        trainer.validate(module, datamodule=datamodule, verbose=False)
        wall = time.perf_counter() - started
        if index == 0:  # warm-up: the worker pool starts, files are read for the first time
            continue
        callback_s, outcomes_s = overlays.seconds - callback_before, timer.seconds - outcomes_before
        share = round(100 * (callback_s + outcomes_s) / wall, 2)
        images = module.pipeline.times.images
        rows.append([index, images, round(wall, 2), round(callback_s, 3), round(outcomes_s, 4), share])
    mean = [statistics.mean(float(row[i]) for row in rows) for i in range(2, 6)]
    rows.append(["mean", rows[0][1], *[round(v, 4) for v in mean]])
    print(markdown_table(COLUMNS, rows))
    if args.record is not None:
        sizes = cfg.callbacks.val_overlays
        protocol = (
            f"trainer.validate on the hardware=cpu preset's synthetic val split, {args.repeats} passes "
            f"after a warm-up, overlays {sizes.num_fixed} fixed + {sizes.num_worst} worst at long side "
            f"{sizes.long_side} to logger={args.logger}, weights {args.ckpt or 'random'}; cost = the "
            "callback's time + box_outcomes on the same matches"
        )
        command = command_line(__file__, argv)
        path = write_result(
            "overlays", "Training throughput", protocol, command, COLUMNS, rows, directory=args.record
        )
        print(f"Recorded {path}")


if __name__ == "__main__":
    main()
