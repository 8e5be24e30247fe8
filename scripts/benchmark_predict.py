"""Prediction throughput of runners/predict.py's path, end to end, PyTorch vs ONNX Runtime.

    uv run python scripts/benchmark_predict.py --ckpt <run>/checkpoints/best.ckpt            # CPU
    uv run python scripts/benchmark_predict.py --device cuda --ckpt ... --backends torch     # a GPU

Times ``trainer.predict`` on the objects ``runners/predict.py`` builds (``prepare``): decode, letterbox
and normalisation in the DataLoader, the network, post-processing and polygons in original px; writing
the outputs is not timed. Each (backend, batch) runs one warm-up pass, then ``--passes`` timed passes
over the images; one Markdown row each. Without ``--ckpt`` a randomly initialised r18-FPN checkpoint is
used (its maps hold almost no text, so post-processing costs less than with a trained model). The ONNX
backend exports the checkpoint first (runners/export.py, parity checked on the same images). On CUDA
the PyTorch backend uses ``hardware=auto`` (bf16 autocast where the GPU has it, channels_last).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from ocr.lightning_modules.build import build_module
from ocr.utils import runner

REPO = Path(__file__).resolve().parents[1]
DEFAULT_IMAGES = REPO.parent / "shared" / "datasets" / "sroie-compact" / "images" / "test"

log = logging.getLogger("benchmark_predict")


def random_checkpoint(path: Path, overrides: Sequence[str]) -> Path:
    """A run checkpoint with random weights of the train config's network (``overrides`` on top)."""
    cfg = runner.compose_config("train", overrides, path.parent)
    module = build_module(cfg)
    torch.save(
        {"state_dict": module.state_dict(), "ocr_config": OmegaConf.to_container(cfg, resolve=True)}, path
    )
    return path


def time_predict(cfg: DictConfig, passes: int) -> list[float]:
    """Images per second of each timed pass of ``trainer.predict`` (after one warm-up pass)."""
    datamodule, module, trainer = runner.load_runner("predict").prepare(cfg)
    count = len(datamodule.datasets["predict"])
    rates = []
    for index in range(passes + 1):
        start = time.perf_counter()
        trainer.predict(module, datamodule=datamodule, return_predictions=True)
        if torch.cuda.is_available() and cfg.trainer.accelerator != "cpu":
            torch.cuda.synchronize()
        if index > 0:
            rates.append(count / (time.perf_counter() - start))
    return rates


def main(argv: Sequence[str] | None = None) -> str:
    """Run the benchmark; logs each row of the Markdown table when measured and returns the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ckpt", type=Path, default=None, help="checkpoint; default: random r18-FPN")
    parser.add_argument("--images", type=Path, default=DEFAULT_IMAGES, help="folder of images to predict")
    parser.add_argument("--num-images", type=int, default=32, help="first N images (sorted) of --images")
    parser.add_argument("--long-side", type=int, default=1024)
    parser.add_argument("--batches", default="8,1", help="comma-separated batch sizes")
    parser.add_argument("--backends", default="torch,onnx", help="comma-separated: torch, onnx")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--passes", type=int, default=2, help="timed passes after one warm-up pass")
    parser.add_argument("--workers", type=int, default=None, help="data.num_workers; default: the config's")
    parser.add_argument(
        "overrides", nargs="*", help="extra Hydra overrides for predict (and the random ckpt)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    with tempfile.TemporaryDirectory(prefix="benchmark_predict_") as tmp:
        work = Path(tmp)
        images = work / "images"
        images.mkdir()
        names = sorted(p.name for p in args.images.iterdir() if p.is_file())[: args.num_images]
        for name in names:
            (images / name).symlink_to(args.images.resolve() / name)
        hardware = "hardware=cpu" if args.device == "cpu" else "hardware=auto"
        data = [f"data.eval_transform.long_side={args.long_side}", f"data.root={work / 'unused'}"]
        if args.workers is not None:
            data += [f"data.num_workers={args.workers}", f"data.persistent_workers={args.workers > 0}"]
        ckpt = args.ckpt or random_checkpoint(work / "random.ckpt", [hardware, *args.overrides])
        rows = ["| backend | device | batch | long side | images | img/s per pass |", "| --- " * 6 + "|"]
        for backend in args.backends.split(","):
            model = []
            if backend == "onnx":
                # Random weights find no text: their export is checked on the probability maps alone.
                parity = [f"parity.image_dir={images}"] + (
                    ["parity.min_polygons=0"] if args.ckpt is None else []
                )
                export_cfg = runner.compose_config(
                    "export", [f"ckpt={ckpt}", f"long_side={args.long_side}", *parity], work / "export"
                )
                model = [f"onnx_model={runner.load_runner('export').export(export_cfg)['model']}"]
            for batch in (int(b) for b in args.batches.split(",")):
                overrides = [
                    hardware,
                    *data,
                    f"data.eval_batch_size={batch}",
                    f"backend={backend}",
                    f"ckpt={ckpt}",
                    f"image_dir={images}",
                    *model,
                    *args.overrides,
                ]
                cfg = runner.compose_config("predict", overrides, work / f"{backend}_{batch}")
                rates = time_predict(cfg, args.passes)
                device = "cpu" if backend == "onnx" else args.device
                per_pass = ", ".join(f"{r:.2f}" for r in rates)
                rows.append(
                    f"| {backend} | {device} | {batch} | {args.long_side} | {len(names)} | {per_pass} |"
                )
                log.info("%s", rows[-1])  # each row as soon as it is measured
    table = "\n".join(rows)
    return table


if __name__ == "__main__":
    main()
