"""Prediction throughput of runners/predict.py's path (``prepare``), PyTorch vs ONNX Runtime; or, with
``--emulate-ms``, the overlap of post-processing with a network of a given speed.

    uv run python scripts/benchmark_predict.py --ckpt <run>/checkpoints/best.ckpt            # CPU
    uv run python scripts/benchmark_predict.py --device cuda --ckpt ... --backends torch     # a GPU
    uv run python scripts/benchmark_predict.py --ckpt ... --emulate-ms 29.9 --batches 16 \
        pipeline.kind=process pipeline.workers=2                                              # emulated

Rows (backends x models x batch sizes x long sides x ``--variant``s) are timed one pass each per round,
so a shared machine's load falls on all alike; writing is not timed. ``--gt`` (default
``<images>/../../jsons/<split>.json``) scores each row in both CLEval modes; the peer (rapidocr in its own
venv) runs one pass after each of our rounds. ``--emulate-ms``: the network is a sleep per batch returning
its real maps, to show how much of ``min(network rate, workers / post-processing per image)`` is reached.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from itertools import product
from pathlib import Path
from typing import Any, NamedTuple
from unittest import mock

import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn
from torch.utils.data import DataLoader

from ocr.data.coding import decode_batch, move_batch
from ocr.evaluation import pipeline as pipeline_module
from ocr.evaluation.device_maps import HostMaps, maps_to_host
from ocr.evaluation.host_work import HostWork, ImageJob
from ocr.evaluation.pipeline import EvalPipeline, PipelineSettings
from ocr.lightning_modules.build import build_module
from ocr.lightning_modules.prob_cache import ProbCache
from ocr.run.config import compose_config
from ocr.run.entry import load_runner
from ocr.types import BATCH_TENSOR_KEYS, Batch, DBOutput
from scripts import benchmark_results as results

REPO = Path(__file__).resolve().parents[1]
DEFAULT_IMAGES = REPO.parent / "shared" / "datasets" / "sroie-compact" / "images" / "test"
PEER_SCRIPT = REPO / "scripts" / "peer_rapidocr.py"
PEER_ENV = "RAPIDOCR_PYTHON"
MODES = ("upstream", "competition")
COLUMNS = (
    *("backend", "model", "device", "batch", "long side", "variant", "images", "img/s per pass"),
    *("network share", "hmean upstream / competition", "model MiB", "x peer"),
)

log = logging.getLogger("benchmark_predict")


def random_checkpoint(path: Path, overrides: Sequence[str]) -> Path:
    """A run checkpoint with random weights of the train config's network (``overrides`` on top)."""
    cfg = compose_config("train", overrides, path.parent)
    state = {
        "state_dict": build_module(cfg).state_dict(),
        "ocr_config": OmegaConf.to_container(cfg, resolve=True),
    }
    torch.save(state, path)
    return path


class Peer:
    """scripts/peer_rapidocr.py in the peer's Python, warmed up on start (RuntimeError when it exits)."""

    def __init__(self, python: Path, images: list[Path], work: Path) -> None:
        listing = work / "peer_images.txt"
        listing.write_text("".join(f"{path}\n" for path in images))
        self.python = python
        command = [os.fspath(python), os.fspath(PEER_SCRIPT), os.fspath(listing)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info = self._answer()
        self.rates: list[float] = []
        self.polygons: dict[str, list[list[float]]] = {}

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            raise RuntimeError(
                f"peer {self.python} {PEER_SCRIPT.name} exited with code {code} (stderr above)"
            )
        return json.loads(line)

    def run_pass(self) -> float:
        """One timed pass over the images; keeps its detections; returns its images/s."""
        assert self.process.stdin is not None
        self.process.stdin.write("pass\n")
        self.process.stdin.flush()
        answer = self._answer()
        self.polygons = answer["polygons"]
        return answer["images"] / answer["seconds"]

    def close(self) -> None:
        if self.process.poll() is None and self.process.stdin is not None:
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
        self.process.wait(timeout=60)


def peer_python(given: Path | None) -> Path | None:
    """The peer's Python: ``--peer-python``, else ``$RAPIDOCR_PYTHON``, else None (no peer column)."""
    if given is None and os.environ.get(PEER_ENV):
        given = Path(os.environ[PEER_ENV])
    if given is not None and not given.is_file():
        raise FileNotFoundError(f"--peer-python / {PEER_ENV}: {given} is not a Python executable")
    return given


def gt_of(gt: Path, names: list[str], work: Path) -> Path:
    """``gt`` restricted to the images timed (an image not predicted is no image without detections)."""
    from ocr.data.annotations import load_annotations, save_annotations

    records = load_annotations(gt)
    if set(records) <= set(names):
        return gt
    return save_annotations(work / "gt_timed.json", {n: records[n] for n in names if n in records})


def score(gt: Path, predictions: dict[str, list[Any]], directory: Path) -> dict[str, float]:
    """CLEval hmean of ``predictions`` (polygons per image) in both modes, by runners/evaluate.py."""
    from ocr.utils.submission import write_submission_csv

    csv = write_submission_csv(directory / "submission.csv", predictions)
    evaluate = load_runner("evaluate").evaluate
    hmeans = {}
    for mode in MODES:
        overrides = [f"gt={gt}", f"pred={csv}", f"mode={mode}", f"out_dir={directory / mode}"]
        hmeans[mode] = float(evaluate(compose_config("evaluate", overrides, directory))["hmean"])
    return hmeans


class Row:
    """One timed configuration: ``labels`` (backend, model, device, batch, long_side, variant), config,
    ``prepared`` (data module, module, trainer), figures (no dataclass: a script loaded by path lacks one)."""

    def __init__(self, labels: dict[str, Any], cfg: DictConfig, size_mib: float, prepared: tuple) -> None:
        self.labels, self.cfg, self.size_mib, self.prepared = labels, cfg, size_mib, prepared
        self.rates: list[float] = []
        self.network_share = 0.0
        self.hmean: dict[str, float] = {}

    def run_pass(self, warmup_batches: int | None) -> float:
        """One pass (``warmup_batches``: a warm-up over that many batches, untimed); returns images/s."""
        datamodule, module, trainer = self.prepared
        trainer.limit_predict_batches = warmup_batches or 1.0
        start = time.perf_counter()
        trainer.predict(module, datamodule=datamodule, return_predictions=False)
        if torch.cuda.is_available() and self.cfg.trainer.accelerator != "cpu":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        trainer.limit_predict_batches = 1.0
        self.network_share = module.pipeline.times.network_share()
        return self.images / seconds

    def predictions(self) -> dict[str, list[Any]]:
        """Polygons per image of the last pass."""
        return {p["image_id"]: p["polygons"] for p in self.prepared[1].pipeline.predictions}

    def cells(self) -> list[Any]:
        labels = [value or "-" for value in self.labels.values()]
        rates, share = ", ".join(f"{r:.2f}" for r in self.rates), f"{self.network_share:.0%}"
        return [*labels, self.images, rates, share, hmean_cell(self.hmean), f"{self.size_mib:.1f}"]

    @property
    def images(self) -> int:
        return len(self.prepared[0].datasets["predict"])

    def record(self) -> dict[str, Any]:
        record = {**self.labels, "images": self.images, "img_per_s": self.rates}
        record |= {"img_per_s_median": _median(self.rates), "network_share": self.network_share}
        return record | {"hmean": self.hmean, "model_mib": self.size_mib}


class EmulatedNetwork(nn.Module):
    """Waits each batch's device time, then returns its real (B, 1, H, W) ``prob_logits``, in batch order."""

    def __init__(self, prob_logits: list[Tensor], seconds: list[float]) -> None:
        super().__init__()
        self.prob_logits, self.seconds, self.calls = prob_logits, seconds, 0

    def forward(self, images: Tensor) -> DBOutput:
        index = self.calls % len(self.prob_logits)
        time.sleep(self.seconds[index])
        self.calls += 1
        return DBOutput(self.prob_logits[index], self.prob_logits[index], self.prob_logits[index])


class MemoryBatches(L.LightningDataModule):
    """Predict batches from memory, moved as the datamodule moves them; not decoded (no pixel is read)."""

    def __init__(self, batches: list[Batch]) -> None:
        super().__init__()
        self.batches = batches

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.batches, batch_size=None, collate_fn=lambda batch: batch)  # type: ignore[arg-type]

    def transfer_batch_to_device(self, batch: Batch, device: torch.device, dataloader_idx: int) -> Batch:
        return move_batch(batch, device)


class Emulation(NamedTuple):
    """The predict module and trainer, the batches (pixels dropped), their real logits and device times."""

    module: Any
    trainer: Any
    batches: list[Batch]
    logits: list[Tensor]
    device_s: list[float]

    @property
    def images(self) -> int:
        return sum(len(b["image_id"]) for b in self.batches)


def maps_cache(directory: Path, cfg: DictConfig, sources: list[str]) -> ProbCache:
    """The network's logits per image on disk, keyed by checkpoint, images and eval transform."""
    ckpt = Path(cfg.ckpt).resolve()
    key = {
        "ckpt": [str(ckpt), ckpt.stat().st_size, ckpt.stat().st_mtime_ns],
        "images": sources,
        "eval_transform": OmegaConf.to_container(cfg.data.eval_transform, resolve=True),
        "precision": str(cfg.trainer.precision),
    }
    return ProbCache(directory, lambda: key)


def prepare_emulation(
    cfg: DictConfig, ms_per_batch: float, cache: ProbCache | None, repeat: int
) -> Emulation:
    """The real network once over ``cfg``'s images (or ``cache``); ``ms_per_batch`` is a full batch's device
    time, smaller batches take it in proportion to their pixels."""
    datamodule, module, trainer = load_runner("predict").prepare(cfg)
    batches = list(datamodule.predict_dataloader())

    def forward(images: Tensor) -> Tensor:
        """(B, 1, H, W) logits of (B, 3, H, W) images, 2 per forward (16 at 1024 px: tens of GB)."""
        with torch.inference_mode():
            return torch.cat([module(images[i : i + 2]).prob_logits for i in range(0, len(images), 2)])

    decoded = map(decode_batch, batches)
    logits = [forward(d["images"]) if cache is None else cache.prob_logits(d, forward) for d in decoded]
    if cache is not None:
        log.info("%s", cache.summary())
    full = cfg.data.eval_batch_size * cfg.data.eval_transform.long_side**2
    device_s = [ms_per_batch / 1000.0 * b["images"].numel() / 3 / full for b in batches]
    module.net = EmulatedNetwork(logits, device_s)
    # The pixels and the (zero) target maps are not read any more: 1x1 placeholders keep the batches small,
    # so that the host does not decode what a GPU would (the host's share is the host's work only).
    light: list[Any] = [
        dict(b, **{k: b[k][:, :, :1, :1].contiguous() for k in BATCH_TENSOR_KEYS}) for b in batches
    ]
    # A pass over the images ``repeat`` times: a predict call's fixed start-up (Lightning's loop, the first
    # batch's network time) weighs less, as on a folder of thousands of receipts.
    return Emulation(module, trainer, light * repeat, logits * repeat, device_s * repeat)


def postprocess_seconds(emulation: Emulation) -> float:
    """Mean post-processing time per image in this thread, on the real maps."""
    postprocess = emulation.module.pipeline.postprocess
    work = HostWork(postprocess=postprocess, cleval=None, tables={})
    seconds = []
    for batch, logits in zip(emulation.batches, emulation.logits, strict=True):
        maps = maps_to_host(logits, postprocess.thresh)
        for i, (image_id, geometry) in enumerate(zip(batch["image_id"], batch["geometry"], strict=True)):
            seconds.append(work(ImageJob(image_id, geometry, None, 0), maps.image(i)).seconds)
    return statistics.fmean(seconds)


def emulated_rates(emulation: Emulation, settings: PipelineSettings, passes: int) -> tuple[list[float], Any]:
    """img/s of each timed pass after a warm-up with the pipeline ``settings``; the last pass's StageTimes."""
    module = emulation.module
    module.pipeline.close()
    module.pipeline = EvalPipeline(settings=settings, postprocess=module.pipeline.postprocess)
    data = MemoryBatches(emulation.batches)
    thresh = module.pipeline.postprocess.thresh
    made = [maps_to_host(logits, thresh) for logits in emulation.logits]
    rates = []
    for index in range(passes + 1):
        # Each pass's maps as the device's copies leave them: fresh host tensors, in batch order.
        landed: Iterator[HostMaps] = iter(
            [HostMaps(m.bitmap.clone(), m.prob.clone(), m.table, None) for m in made]
        )
        start = time.perf_counter()
        with mock.patch.object(pipeline_module, "maps_to_host", lambda _logits, _thresh, it=landed: next(it)):
            emulation.trainer.predict(module, datamodule=data, return_predictions=False)
        if index > 0:
            rates.append(emulation.images / (time.perf_counter() - start))
    return rates, module.pipeline.times


def main(argv: Sequence[str] | None = None) -> str:
    parser = results.benchmark_parser(__doc__)
    parser.add_argument("--ckpt", type=Path, help="checkpoint; default: random r18-FPN")
    parser.add_argument("--images", type=Path, default=DEFAULT_IMAGES, help="folder of images to predict")
    parser.add_argument("--num-images", type=int, default=32, help="first N images (sorted) of --images")
    parser.add_argument("--long-side", default="1024", help="comma-separated long sides (one row each)")
    parser.add_argument("--batches", default="8,1", help="comma-separated batch sizes")
    parser.add_argument("--backends", default="torch,onnx", help="comma-separated: torch, onnx")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--passes", type=int, default=2, help="timed passes after one warm-up pass")
    parser.add_argument("--warmup-batches", type=int, help="the warm-up pass's batches (default: all)")
    parser.add_argument("--workers", type=int, help="data.num_workers; default: the config's")
    onnx_help = "an exported model to time as it is (repeatable); default: export --ckpt"
    parser.add_argument("--onnx-model", type=Path, action="append", default=[], help=onnx_help)
    variant_help = 'NAME="override ..." rows with these predict overrides (repeatable); default: one, none'
    parser.add_argument("--variant", action="append", default=[], help=variant_help)
    parser.add_argument("--gt", type=Path, help="annotations of --images to score each row and the peer")
    parser.add_argument("--json", type=Path, help="write every row and the machine here")
    parser.add_argument("--peer-python", type=Path, help=f"the peer's Python (rapidocr); else ${PEER_ENV}")
    parser.add_argument("--emulate-ms", type=float, help="emulate a network of this many ms per batch")
    parser.add_argument("--repeat", type=int, default=1, help="emulation: passes go over the images N times")
    parser.add_argument("--maps-cache", type=Path, help="emulation: the network's logits kept in this folder")
    parser.add_argument("--pools", help="emulation: pools to compare, kind:workers,...")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for predict (and the random ckpt)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    long_sides = [int(side) for side in str(args.long_side).split(",")]
    args.long_side = long_sides[0]
    python = peer_python(args.peer_python)
    beside = args.images.resolve().parents[1] / "jsons" / f"{args.images.name}.json"  # <root>/images/<split>
    gt = args.gt or (beside if beside.is_file() else None)

    with tempfile.TemporaryDirectory(prefix="benchmark_predict_") as tmp:
        work = Path(tmp)
        images = work / "images"
        images.mkdir()
        names = sorted(p.name for p in args.images.iterdir() if p.is_file())[: args.num_images]
        for name in names:
            (images / name).symlink_to(args.images.resolve() / name)
        hardware = "hardware=cpu" if args.device == "cpu" else "hardware=auto"
        data = [f"data.root={work / 'unused'}", *results.worker_overrides(args.workers)]
        backends = args.backends.split(",")
        if args.ckpt is None and args.onnx_model and "torch" not in backends:
            ckpt: Path | str = "unused"  # predict's ckpt key is required; the ONNX backend never reads it
        else:
            ckpt = args.ckpt or random_checkpoint(work / "random.ckpt", [hardware, *args.overrides])
        if args.emulate_ms is not None:
            sources = [str(args.images.resolve() / name) for name in names]
            fixed = [hardware, *data, f"data.eval_transform.long_side={args.long_side}", f"ckpt={ckpt}"]
            table = emulated_rows(args, [*fixed, f"image_dir={images}"], work, sources)
            record(args, argv, table)
            return table
        variants = [tuple(v.split("=", 1)) if "=" in v else (v, "") for v in args.variant] or [("", "")]
        rows = build_rows(args, backends, long_sides, variants, [hardware, *data], ckpt, images, work)
        peer = None if python is None else Peer(python, [images / n for n in names], work)
        try:
            for index in range(args.passes + 1):
                for row in rows:
                    rate = row.run_pass(args.warmup_batches if index == 0 else None)
                    if index > 0:
                        row.rates.append(rate)
                # The peer warmed up on start (one call); its passes follow each timed round of ours.
                if peer is not None and index > 0:
                    peer.rates.append(peer.run_pass())
                    log.info("peer pass %d: %.2f img/s", index, peer.rates[-1])
        finally:
            if peer is not None:
                peer.close()
        timed_gt = None if gt is None else gt_of(gt, names, work)
        if timed_gt is not None:
            for number, row in enumerate(rows):
                row.hmean = score(timed_gt, row.predictions(), work / f"score_{number}")
        table = results_table(rows, peer, timed_gt, work)
        if args.json is not None:
            write_json(args.json, rows, peer, names, gt)
    log.info("%s", table)
    record(args, argv, table)
    return table


def record(args: argparse.Namespace, argv: Sequence[str] | None, table: str) -> None:
    if not args.record:
        return
    emulated = args.emulate_ms is not None
    protocol = (
        f"`scripts/benchmark_predict.py --emulate-ms`: the network's maps computed once and replayed at "
        f"{args.emulate_ms} ms per batch, the post-processing and CLEval real, in each pool; bound = "
        "min(network img/s, workers / post-processing time per image); ratio = median img/s per pass / bound."
        if emulated
        else "`scripts/benchmark_predict.py`: the objects `runners/predict.py` builds (decode, letterbox, "
        "network, post-processing; writing not timed), "
        f"{args.passes} timed pass(es) after a warm-up, on the first {args.num_images} images of "
        f"{args.images.name}/; the peer (rapidocr, detection only) after ours in the same run; rows scored "
        "by `runners/evaluate.py` where the images have ground truth."
    )
    name, command = "predict-emulated" if emulated else "predict", results.command_line(__file__, argv)
    columns, rows = results.table_cells(table)
    question, device = "Predict and deployment speed", args.device
    results.write_result(
        name, question, protocol, command, columns, rows, device=device, directory=args.record
    )


def build_rows(
    args: argparse.Namespace,
    backends: list[str],
    long_sides: list[int],
    variants: list[tuple[str, ...]],
    common: list[str],
    ckpt: Path | str,
    images: Path,
    work: Path,
) -> list[Row]:
    """Every row's config, prepared (data module, module, trainer) and sized."""
    from ocr.inference.onnx_runtime import read_sidecar

    exported: list[Path | None] = [None]
    if "onnx" in backends:
        exported = list(args.onnx_model) or [export_for_benchmark(args, ckpt, images, work)]
    models = [(b, m) for b in backends for m in (exported if b == "onnx" else [None])]
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    for (backend, model), batch, long_side, (name, extra) in product(models, batches, long_sides, variants):
        overrides = [
            *(*common, f"data.eval_transform.long_side={long_side}", f"data.eval_batch_size={batch}"),
            *(f"backend={backend}", f"ckpt={ckpt}", f"image_dir={images}"),
            *([f"onnx_model={model}"] if model is not None else []),
            *args.overrides,
            *extra.split(),
        ]
        cfg = compose_config("predict", overrides, work / f"{backend}_{len(rows)}")
        prepared = load_runner("predict").prepare(cfg)
        if model is None:
            size = sum(p.numel() * p.element_size() for p in prepared[1].net.parameters())
            title = Path(str(ckpt)).name
        else:
            size = model.stat().st_size
            quantized = (read_sidecar(model).get("quantization") or {}).get("type", "fp32")
            title = f"{model.parent.name}/{model.name} ({quantized})"
        device = "cpu" if backend == "onnx" else args.device
        labels = dict(backend=backend, model=title, device=device, batch=batch, long_side=long_side)
        rows.append(Row(labels | {"variant": name}, cfg, size / 2**20, prepared))
    return rows


def export_for_benchmark(args: argparse.Namespace, ckpt: Path | str, images: Path, work: Path) -> Path:
    """``ckpt`` exported by runners/export.py at the first long side, parity checked on the images."""
    # Random weights find no text: their export is checked on the probability maps alone.
    parity = [f"parity.image_dir={images}"] + (["parity.min_polygons=0"] if args.ckpt is None else [])
    export_cfg = compose_config(
        "export", [f"ckpt={ckpt}", f"long_side={args.long_side}", *parity], work / "export"
    )
    return Path(load_runner("export").export(export_cfg)["model"])


def results_table(rows: list[Row], peer: Peer | None, gt: Path | None, work: Path) -> str:
    """The rows, the peer's (scored against ``gt``), and each row's ratio to the peer."""
    peer_rate = None if peer is None else _median(peer.rates)
    cells = []
    for row in rows:
        ratio = f"{statistics.median(row.rates) / peer_rate:.2f}" if peer_rate and row.rates else "-"
        cells.append([*row.cells(), ratio])
    if peer is not None:
        if gt is not None:
            polygons = {
                name: [np.asarray(flat, dtype=np.float64).reshape(-1, 2) for flat in found]
                for name, found in peer.polygons.items()
            }
            peer.info["hmean"] = score(gt, polygons, work / "score_peer")
        rates = ", ".join(f"{r:.2f}" for r in peer.rates)
        name = f"peer: rapidocr {peer.info.get('rapidocr')} (det only)"
        hmean = hmean_cell(peer.info.get("hmean"))
        cells.append([name, "-", "cpu", 1, "its own rule", "-", len(peer.polygons), rates, "-", hmean])
        cells[-1] += ["-", "1.00"]
    return results.markdown_table(COLUMNS, cells)


def hmean_cell(hmean: dict[str, float] | None) -> str:
    return " / ".join(f"{hmean[mode]:.4f}" for mode in MODES) if hmean else "-"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def write_json(path: Path, rows: list[Row], peer: Peer | None, names: list[str], gt: Path | None) -> None:
    """Every row, the peer and the machine (CPU model, cores, load, versions)."""
    from ocr.utils.io import atomic_write_json

    cpu, load = results.cpu_model_and_flags()[0], list(os.getloadavg())
    machine = {"cpu": cpu, "cores": os.cpu_count(), "load_average": load}
    machine |= {"python": sys.version.split()[0], "torch": torch.__version__}
    peer_record = None
    if peer is not None:
        peer_record = {"info": peer.info, "img_per_s": peer.rates, "img_per_s_median": _median(peer.rates)}
    record = {"machine": machine, "images": len(names), "gt": None if gt is None else str(gt)}
    atomic_write_json(path, record | {"rows": [row.record() for row in rows], "peer": peer_record})
    log.info("wrote %s", path)


def emulated_rows(args: argparse.Namespace, overrides: list[str], work: Path, sources: list[str]) -> str:
    """The emulation's table, one row per batch size and pool; ``sources``: the images (the cache's key)."""
    columns = ["network ms/batch", "batch", "images", "network img/s"]
    columns += ["post-processing ms/image (1 thread, before/after)", "pool", "bound img/s", "img/s per pass"]
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        batch_overrides = [*overrides, f"data.eval_batch_size={batch}", *args.overrides]
        cfg = compose_config("predict", batch_overrides, work / f"emulated_{batch}")
        cache = None if args.maps_cache is None else maps_cache(args.maps_cache, cfg, sources)
        emulation = prepare_emulation(cfg, args.emulate_ms, cache, args.repeat)
        network_rate = emulation.images / sum(emulation.device_s)
        pools = args.pools.split(",") if args.pools else [f"{cfg.pipeline.kind}:{cfg.pipeline.workers}"]
        for pool in pools:
            kind, workers = pool.split(":")
            pending = cfg.pipeline.max_pending_batches
            settings = PipelineSettings(kind=kind, workers=int(workers), max_pending_batches=pending)
            # Measured right before and after the passes it bounds (the load drifts): their mean.
            before = postprocess_seconds(emulation)
            rates, times = emulated_rates(emulation, settings, args.passes)
            after = postprocess_seconds(emulation)
            bound = min(network_rate, max(1, settings.workers) / ((before + after) / 2))
            rows.append([f"{args.emulate_ms:g}", batch, emulation.images, f"{network_rate:.1f}"])
            rows[-1] += [f"{before * 1000:.1f} / {after * 1000:.1f}", f"{kind} x {workers}", f"{bound:.1f}"]
            rows[-1] += [", ".join(f"{r:.1f}" for r in rates), f"{statistics.median(rates) / bound:.3f}"]
            log.info("%s", results.markdown_row(rows[-1]))
            log.info("%s", times.summary(f"last pass, {kind} x {workers}", emulation.module.pipeline.workers))
        emulation.module.pipeline.close()
    return results.markdown_table([*columns, "ratio (median)"], rows)


if __name__ == "__main__":
    main()
