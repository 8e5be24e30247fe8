"""Training throughput on one device, in ONE process: the model ceiling against the real pipeline.

    python3 scripts/benchmark_gpu.py --device cuda --json outputs/benchmark_gpu.json   # PYTHONPATH=.
    uv run python scripts/benchmark_gpu.py --device cpu --size 128 --batch 2 --steps 4 --variants fp32

Variants ``fp32``, ``bf16_cl`` (bf16 autocast + channels_last) and ``compile`` (``bf16_cl`` +
torch.compile) of configs/train.yaml's module. Ceiling: forward, loss, backward and optimizer step on a
few real batches already on the device. Pipeline: the configured Trainer on the train loader, without
validation, logger or callbacks; data wait is ``LoaderWait``'s share. Steps are whole epochs.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from hydra.utils import instantiate
from lightning import Callback, LightningModule, Trainer
from omegaconf import DictConfig

from ocr.data.datamodule import ReceiptDataModule
from ocr.lightning_modules.build import build_module
from ocr.lightning_modules.detection_module import DetectionModule
from ocr.machine.hardware import autocast_dtype, cpu_has_native_bf16, cuda_has_native_bf16
from ocr.run.config import compose_config
from ocr.run.entry import quiet_third_party
from ocr.types import Batch
from ocr.utils.io import atomic_write_json
from scripts import benchmark_results as results

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "datasets" / "sroie-compact"
GOAL_RATIO = 0.95  # issue 14: the real pipeline at 95 % or more of the ceiling on a GPU
CEILING_BATCHES = 4  # real batches kept on the device for the ceiling
COLUMNS = ("variant", "ceiling img/s", "pipeline img/s", "ratio", "data wait")


class Variant(NamedTuple):
    name: str
    precision: str
    channels_last: bool
    compile: bool


VARIANTS = {
    "fp32": Variant("fp32", "32-true", channels_last=False, compile=False),
    "bf16_cl": Variant("bf16_cl", "bf16-mixed", channels_last=True, compile=False),
    "compile": Variant("compile", "bf16-mixed", channels_last=True, compile=True),
}


def skip_reason(variant: Variant, device: torch.device) -> str | None:
    """Why ``variant`` is not measured on ``device`` (None: it is)."""
    if variant.compile and device.type == "cpu":
        return "torch.compile is measured on CUDA only (the CPU presets do not compile; it takes minutes)"
    if variant.precision == "bf16-mixed":
        if device.type == "cpu" and not cpu_has_native_bf16():
            return "this CPU has no native bf16 (AVX512-BF16/AMX): emulated bf16 is slower than fp32"
        if device.type == "cuda" and not cuda_has_native_bf16():
            return "this GPU has no native bf16 (pre-Ampere)"
    return None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def variant_config(args: argparse.Namespace, variant: Variant, work: Path) -> DictConfig:
    """The train config of ``variant`` (the last overrides: the variant's precision and module settings)."""
    preset = "hardware=h100_80gb" if args.device == "cuda" else "hardware=cpu"
    overrides = [preset, f"data={args.data}", f"data.root={args.data_root}", f"data.batch_size={args.batch}"]
    overrides += [f"data.train_transform.crop_size={args.size}", *results.worker_overrides(args.workers)]
    overrides += [*args.overrides, f"trainer.precision={variant.precision}"]
    overrides += [f"module.channels_last={variant.channels_last}", f"module.compile={variant.compile}"]
    return compose_config("train", overrides, work)


def time_ceiling(
    module: DetectionModule,
    datamodule: ReceiptDataModule,
    cpu_batches: Sequence[Batch],
    device: torch.device,
    precision: str,
    steps: int,
    warmup: int,
) -> float:
    """img/s of forward + loss + backward + optimizer step on batches already on ``device``."""
    module.to(device)
    module.setup("fit")  # channels_last and compile, as Lightning does before training
    module.train()
    batches = [
        datamodule.on_after_batch_transfer(datamodule.transfer_batch_to_device(b, device, 0), 0)
        for b in cpu_batches
    ]
    optimizer = module.optimizer_factory(params=module.parameters())
    dtype = autocast_dtype(precision)
    autocast = torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()

    def step(batch: Batch) -> None:
        with autocast:
            losses = module.loss(module(batch["images"]), batch)
        losses["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for index in range(warmup):
        step(batches[index % len(batches)])
    timed_batches = [batches[index % len(batches)] for index in range(warmup, warmup + steps)]
    _sync(device)
    start = time.perf_counter()
    for batch in timed_batches:
        step(batch)
    _sync(device)
    return sum(b["images"].shape[0] for b in timed_batches) / (time.perf_counter() - start)


class EpochClock(Callback):
    """Images and (time, the loader's total wait) at synced epoch ends: the warm-up's last and the latest."""

    def __init__(self, warmup_epochs: int, device: torch.device) -> None:
        self.warmup_epochs, self.device = warmup_epochs, device
        self.images = 0
        self.marks: list[tuple[float, float]] = []

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Batch, batch_idx: int
    ) -> None:
        if trainer.current_epoch >= self.warmup_epochs:
            self.images += batch["images"].shape[0]

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.current_epoch + 1 >= self.warmup_epochs:
            _sync(self.device)
            waited = trainer.datamodule.loader_wait.seconds  # type: ignore[attr-defined]
            self.marks = [*self.marks[:1], (time.perf_counter(), waited)]


def time_pipeline(
    cfg: DictConfig, datamodule: ReceiptDataModule, device: torch.device, epochs: int, warmup_epochs: int
) -> tuple[float, float]:
    """img/s of ``trainer.fit`` over ``epochs`` after ``warmup_epochs``, and the data-wait share."""
    clock = EpochClock(warmup_epochs, device)
    settings = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_steps=-1)
    settings |= dict(enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0)
    trainer = instantiate(cfg.trainer, callbacks=[clock], max_epochs=warmup_epochs + epochs, **settings)
    trainer.fit(build_module(cfg), datamodule=datamodule)
    if len(clock.marks) < 2:
        raise RuntimeError(f"pipeline clock: no timed epoch after {warmup_epochs} warm-up epoch(s)")
    (start, waited_start), (stop, waited_stop) = clock.marks
    return clock.images / (stop - start), (waited_stop - waited_start) / (stop - start)


def row_cells(row: dict[str, Any]) -> list[str | None]:
    if row["skipped"]:
        return [row["variant"], f"skipped: {row['skipped']}", None, None, None]
    figures = [f"{row['ceiling_img_s']:.1f}", f"{row['pipeline_img_s']:.1f}", f"{row['ratio']:.2f}"]
    return [row["variant"], *figures, f"{100 * row['data_wait']:.0f} %"]


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"{report['machine']}; {report['data']}, batch {report['batch']}, {report['size']} px crops, "
        f"{report['workers']} workers; {report['steps']} timed steps ({report['epochs']} epochs) after "
        f"{report['warmup_steps']} warm-up steps\n",
        results.markdown_table(COLUMNS, [row_cells(row) for row in report["variants"]]),
    ]
    if report["device"] == "cuda":
        lines.append(f"\nGoal on a GPU: ratio >= {GOAL_RATIO} (pipeline at 95 % of the ceiling).")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = results.benchmark_parser(__doc__)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--data", choices=("receipts", "synthetic"), default="receipts", help="data config")
    parser.add_argument("--data-root", type=Path, default=DEFAULT_DATA, help="receipts root")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=640, help="training crop size (px)")
    parser.add_argument("--steps", type=int, default=100, help="timed steps, rounded up to whole epochs")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up steps, rounded up to whole epochs")
    parser.add_argument("--workers", type=int, help="data.num_workers; default: the preset's")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of configs/train.yaml")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    if not names or set(names) - set(VARIANTS):
        parser.error(f"--variants: expected a subset of {list(VARIANTS)}, got {args.variants!r}")
    if args.steps < 1 or args.warmup < 1:
        parser.error(f"--steps and --warmup: expected >= 1, got {args.steps} and {args.warmup}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible (torch.cuda.is_available() is False)")
    device = torch.device(args.device)

    with tempfile.TemporaryDirectory(prefix="benchmark_gpu_") as tmp:
        work = Path(tmp)
        base = variant_config(args, VARIANTS["fp32"], work)
        torch.backends.cudnn.benchmark = bool(base.trainer.benchmark)  # as the Trainer sets it
        datamodule: ReceiptDataModule = instantiate(base.data)
        datamodule.prepare_data()
        datamodule.setup("fit")
        per_epoch = len(datamodule.train_dataloader())
        warmup_epochs, epochs = math.ceil(args.warmup / per_epoch), math.ceil(args.steps / per_epoch)
        cpu_batches = list(itertools.islice(datamodule.train_dataloader(), min(CEILING_BATCHES, per_epoch)))
        datamodule.teardown("fit")  # its workers stop: the ceiling is timed without them
        data = str(args.data_root) if args.data == "receipts" else "synthetic"
        report: dict[str, Any] = {"device": device.type, "machine": results.machine_line(str(device))}
        report["data"] = data
        report |= {"batch": args.batch, "size": args.size, "workers": datamodule.num_workers}
        report |= {"pin_memory": datamodule.pin_memory, "steps_per_epoch": per_epoch}
        report |= {"warmup_steps": warmup_epochs * per_epoch, "steps": epochs * per_epoch, "epochs": epochs}
        report |= {"goal_ratio": GOAL_RATIO, "variants": []}
        for name in names:
            variant = VARIANTS[name]
            row: dict[str, Any] = {"variant": name, "skipped": skip_reason(variant, device)}
            if not row["skipped"]:
                cfg = variant_config(args, variant, work / name)
                timing = (variant.precision, report["steps"], report["warmup_steps"])
                ceiling = time_ceiling(build_module(cfg), datamodule, cpu_batches, device, *timing)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                pipeline, data_wait = time_pipeline(cfg, datamodule, device, epochs, warmup_epochs)
                row |= {"ceiling_img_s": ceiling, "pipeline_img_s": pipeline, "ratio": pipeline / ceiling}
                row["data_wait"] = data_wait
            report["variants"].append(row)
            print(results.markdown_row(row_cells(row)), flush=True)  # each row as soon as it is measured
    table = markdown(report)
    print(table, flush=True)
    if args.json is not None:
        atomic_write_json(args.json, {**report, "table": table})
    if args.record:
        protocol = (
            "`scripts/benchmark_gpu.py`: the ceiling (forward, loss, backward and AdamW on real batches "
            "already on the device) against the pipeline (the configured Trainer on the train loader), on "
            f"{report['data']} (batch {args.batch}, {args.size} px crops, {report['workers']} workers), "
            f"{report['steps']} timed steps after {report['warmup_steps']}; data wait: the share of the "
            "timed epochs the loop waited for the loader."
        )
        command, rows = results.command_line(__file__, argv), [row_cells(row) for row in report["variants"]]
        question = "Training throughput"
        results.write_result(
            "gpu", question, protocol, command, COLUMNS, rows, device=args.device, directory=args.record
        )
    return report


if __name__ == "__main__":
    quiet_third_party()
    main()
