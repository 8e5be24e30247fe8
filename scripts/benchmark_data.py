"""Per-core throughput of the training data pipeline on real receipts, with a per-stage table.

    uv run python scripts/benchmark_data.py                       # sroie-compact train, hardware=h100_80gb
    uv run python scripts/benchmark_data.py data.render_on=worker # the crop and targets in the worker
    uv run python scripts/benchmark_data.py --preset rtx3060_12gb_i5_16core data.cache_dir=null

What one DataLoader worker and the collate run, on ONE pinned core, over ``data=<data>``'s train set with
``hardware=<preset>``'s data settings; a stage is the exclusive CPU time of the functions ``STAGES``
names. The device stage is timed apart (``--device``). ``--loader`` times ``train_dataloader()`` itself
(0 workers), so another checkout can be measured the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import itertools
import math
import os
import platform
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import cv2
import numpy as np
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import OmegaConf

from ocr.data import collate  # looked up at each call, so the collate stage can wrap it
from ocr.data.coding import decode_batch
from scripts import benchmark_results as results

try:
    from ocr.machine.hardware import register_resolvers
except ImportError:  # a checkout before ocr/machine (measured with --loader for a before/after)
    from ocr.utils.hardware import register_resolvers  # type: ignore[no-redef]

# The checkout whose ``ocr`` package runs (its configs too): run from another checkout's environment, the
# script measures that checkout (a before/after of two commits is measured this way).
REPO = Path(importlib.import_module("ocr").__file__ or "").resolve().parents[1]
DEFAULT_ROOT = REPO.parent / "shared" / "datasets" / "sroie-compact"
# stage -> the functions whose exclusive time it is: "module:attribute", or "dataset:..." for attributes of
# the train dataset (its transform's photometric pipeline).
STAGES: dict[str, tuple[str, ...]] = {
    "decode/cache": ("ocr.data.dataset:load_source",),
    "augmentation draw, source region, polygon mapping": ("ocr.data.transforms:TrainTransform.crop_region",),
    "photometric draw": ("dataset:transform.photometric",),
    "warp (worker)": ("ocr.data.transforms:render_crop", "ocr.data.transforms:TrainTransform.__call__"),
    "polygon sanitation": ("ocr.data.dataset:sanitize_polygons",),
    "targets (worker)": ("ocr.data.dataset:make_db_targets",),
    "tensor conversion": (
        "ocr.data.transforms:to_chw_tensor",
        "ocr.data.dataset:encode_maps",
        "ocr.data.dataset:build_sample",
    ),
    "collate: pack regions": ("ocr.data.collate:pack_regions",),
    "collate: pack polygons": ("ocr.data.collate:pack_polygons",),
    "collate": ("ocr.data.collate:collate_batch",),
}
DEVICE_BATCHES = 4  # last batches the device stage is timed on


class StageClock:
    """Exclusive CPU time per stage: a timed call nested in another is subtracted from its caller."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._children: list[list[float]] = []

    def wrap(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with its exclusive time added to ``stage``."""

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._children.append([0.0])
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.process_time() - start
                self.seconds[stage] += elapsed - self._children.pop()[0]
                if self._children:
                    self._children[-1][0] += elapsed

        return timed


@contextlib.contextmanager
def instrument(clock: StageClock, dataset: Any) -> Iterator[None]:
    """Every function ``STAGES`` names wrapped for the block (AttributeError: update ``STAGES``)."""
    with contextlib.ExitStack() as patches:
        for stage, targets in STAGES.items():
            for target in targets:
                root, _, attribute = target.partition(":")
                *path, name = attribute.split(".")
                start = dataset if root == "dataset" else importlib.import_module(root)
                owner = functools.reduce(getattr, path, start)
                patches.enter_context(mock.patch.object(owner, name, clock.wrap(stage, getattr(owner, name))))
        yield


def run(args: argparse.Namespace) -> dict[str, Any]:
    """``args.passes`` timed passes of ``args.samples`` samples of the config's train dataset."""
    register_resolvers()
    GlobalHydra.instance().clear()
    overrides = [f"data={args.data}", f"hardware={args.preset}", f"data.root={args.root}"]
    # This process is the worker: it reads the train dataset and collates.
    overrides += ["data.num_workers=0", "data.persistent_workers=false", *args.overrides]
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    np.random.seed(args.seed)
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    # What the train stream's workers read (ocr.data.stream reseeds the transform per sample; a seeded
    # transform and order stand for it here).
    dataset, batch_size = datamodule.datasets["train"], int(datamodule.batch_size)
    common = {"overrides": overrides, "batch_size": batch_size, "images": len(dataset)}
    if args.loader:
        common["render_on"] = str(OmegaConf.select(cfg, "data.render_on", default="worker"))
        return time_loader(args, datamodule.train_dataloader(), dataset, batch_size) | common
    dataset.transform.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    epochs = math.ceil((args.warmup + args.passes * args.samples) / len(dataset))
    order = np.concatenate([rng.permutation(len(dataset)) for _ in range(epochs)])  # shuffled epochs
    for index in order[: args.warmup]:
        dataset[int(index)]
    clock, positions, batches = StageClock(), iter(range(args.warmup, len(order), args.samples)), []

    def one_pass() -> None:
        position = next(positions)
        for start in range(0, args.samples, batch_size):
            picked = order[position + start : position + min(start + batch_size, args.samples)]
            batches.append(collate.collate_batch([dataset[int(i)] for i in picked]))
            del batches[:-DEVICE_BATCHES]

    with instrument(clock, dataset):
        cpu, wall = zip(*(results.timed(one_pass) for _ in range(args.passes)), strict=True)
    return common | {
        "render_on": cfg.data.render_on,
        "samples_per_pass": args.samples,
        "cpu": cpu,
        "wall": wall,
        "stages": dict(clock.seconds),
        "wire_bytes": wire_bytes(batches[-1]) / len(batches[-1]["image_id"]),
        "device": time_device_stage(batches, torch.device(args.device)),
    }


def time_loader(args: argparse.Namespace, loader: Any, dataset: Any, batch_size: int) -> dict[str, Any]:
    """CPU and wall seconds per pass of ``args.samples`` samples from ``loader`` (0 workers)."""
    torch.manual_seed(args.seed)
    dataset.transform.set_random_seed(args.seed)
    batches = itertools.chain.from_iterable(itertools.repeat(loader))  # epoch after epoch
    for _ in range(math.ceil(args.warmup / batch_size)):
        next(batches)
    per_pass, last = math.ceil(args.samples / batch_size), []

    def one_pass() -> None:
        for _ in range(per_pass):
            last[:] = [next(batches)]

    cpu, wall = zip(*(results.timed(one_pass) for _ in range(args.passes)), strict=True)
    wire = wire_bytes(last[0]) / len(last[0]["image_id"])
    # samples_per_pass: whole batches (drop_last)
    return {"samples_per_pass": per_pass * batch_size, "cpu": cpu, "wall": wall, "wire_bytes": wire}


def wire_bytes(batch: dict[str, Any]) -> int:
    """Bytes of the batch's tensors, those in its named tuples (``warp``, ``target_polygons``) too."""
    tensors = [v for v in batch.values() if isinstance(v, torch.Tensor)]
    tensors += [t for v in batch.values() if isinstance(v, tuple) for t in v if isinstance(t, torch.Tensor)]
    return sum(t.nbytes for t in tensors)


def time_device_stage(batches: list[dict[str, Any]], device: torch.device) -> dict[str, Any]:
    """Seconds per sample of ``decode_batch`` on ``device`` (transfer excluded; first batch untimed): wall
    time on CUDA (synchronised), this process's CPU time on the CPU."""
    moved = [{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in batches]
    decode_batch(moved[0])  # type: ignore[arg-type]
    cuda = device.type == "cuda"

    def decode_rest() -> None:
        for batch in moved[1:]:
            decode_batch(batch)  # type: ignore[arg-type]
        if cuda:
            torch.cuda.synchronize(device)

    if cuda:
        torch.cuda.synchronize(device)
    cpu, wall = results.timed(decode_rest)
    samples = sum(len(batch["image_id"]) for batch in moved[1:])
    return {"device": str(device), "seconds_per_sample": (wall if cuda else cpu) / max(samples, 1)}


def stage_table(args: argparse.Namespace, result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Columns and rows: each stage's exclusive CPU ms per sample and share, "other" and the total."""
    total, cpu = result["samples_per_pass"] * args.passes, sum(result["cpu"])
    stages = dict(result["stages"]) | {"other": cpu - sum(result["stages"].values())}
    rows = [
        [name, f"{stages.get(name, 0.0) * 1e3 / total:.1f}", f"{stages.get(name, 0.0) / cpu:.0%}"]
        for name in [*STAGES, "other"]
    ]
    return ["stage", "CPU ms/sample", "share"], [*rows, ["total", f"{cpu * 1e3 / total:.1f}", "100%"]]


def report(args: argparse.Namespace, result: dict[str, Any]) -> str:
    """Markdown: the setup, img/s and ms per sample per pass, and (not ``--loader``) the stage table."""
    samples = result["samples_per_pass"]
    cpu_rates = [samples / s for s in result["cpu"]]
    lines = [
        f"machine: {results.machine_line(args.device)}; core {args.core}, python "
        f"{platform.python_version()}, opencv {cv2.__version__}; checkout {REPO}",
        f"overrides: {' '.join(result['overrides'])}; batch {result['batch_size']}, {result['images']} "
        f"images, {args.passes} passes x {samples} samples after {args.warmup} warm-up, seed {args.seed}"
        f"{', iterating train_dataloader()' if args.loader else ''}; data.render_on={result['render_on']}",
        f"img/s per core, wall: {_spread([samples / s for s in result['wall']])}",
        f"img/s per core, CPU time: {_spread(cpu_rates)}",
        f"CPU ms per sample: {_spread([1e3 / r for r in cpu_rates])}",
        f"batch bytes per sample (compact tensors): {result['wire_bytes'] / 1e6:.2f} MB",
    ]
    if args.loader:
        return "\n".join(lines)
    device = result["device"]
    lines.append(
        f"device stage (decode_batch, not in the table) on {device['device']}: "
        f"{device['seconds_per_sample'] * 1e3:.1f} ms per sample\n"
    )
    return "\n".join([*lines, results.markdown_table(*stage_table(args, result))])


def _spread(rates: Sequence[float]) -> str:
    if len(rates) == 1:
        return f"{rates[0]:.1f}"
    return f"median {statistics.median(rates):.1f} (passes: {', '.join(f'{r:.1f}' for r in rates)})"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = results.benchmark_parser(__doc__)
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="dataset folder (data.root)")
    parser.add_argument("--data", default="receipts", help="data config group")
    parser.add_argument("--preset", default="h100_80gb", help="hardware config whose data settings to use")
    parser.add_argument("--samples", type=int, default=160, help="samples per timed pass")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=8, help="untimed samples first (imports, caches)")
    parser.add_argument("--core", type=int, default=0, help="CPU core to pin to; -1 leaves affinity alone")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loader", action="store_true", help="iterate train_dataloader(); no stage table")
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="decode_batch's device"
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. data.cache_dir=/tmp/cache")
    return parser.parse_args(argv)


def record(args: argparse.Namespace, result: dict[str, Any], argv: Sequence[str] | None) -> None:
    per_sample = [1e3 * s / result["samples_per_pass"] for s in result["cpu"]]
    protocol = (
        "`scripts/benchmark_data.py`: what one DataLoader worker does for the training set of "
        f"`data={args.data} hardware={args.preset}` (batch {result['batch_size']}, "
        f"`data.render_on={result['render_on']}`), on one pinned core (torch 1 thread, OpenCV without "
        f"its pool): {args.passes} passes of {result['samples_per_pass']} samples after {args.warmup} "
        f"warm-up, seed {args.seed}; img/s per core from wall time: "
        f"{_spread([result['samples_per_pass'] / s for s in result['wall']])}."
    )
    if args.loader:
        columns = ["CPU ms per sample (median)", "passes", "batch bytes per sample"]
        passes, wire = ", ".join(f"{x:.1f}" for x in per_sample), f"{result['wire_bytes'] / 1e6:.2f} MB"
        rows, benchmark = [[f"{statistics.median(per_sample):.1f}", passes, wire]], "data-loader"
    else:
        (columns, rows), benchmark = stage_table(args, result), "data"
    command = results.command_line(__file__, argv)
    results.write_result(
        benchmark, "The data pipeline", protocol, command, columns, rows, directory=args.record
    )


def main(argv: Sequence[str] | None = None) -> str:
    args = parse_args(argv)
    if args.core >= 0:
        os.sched_setaffinity(0, {args.core})
        torch.set_num_threads(1)
        cv2.setNumThreads(0)  # as in the DataLoader workers (ocr.data.datamodule.seed_worker)
    result = run(args)
    text = report(args, result)
    print(text)
    if args.record:
        record(args, result, argv)
    return text


if __name__ == "__main__":
    main()
