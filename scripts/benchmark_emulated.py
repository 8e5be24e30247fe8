"""The GPU training regime emulated on a small CPU: the real data pipeline and Lightning loop, sleeps for
the network and for the workers' per-sample cost.

    uv run python scripts/benchmark_emulated.py --workers 15 --sample-ms 30 --step-ms 29.7 --json out.json

Real (configs/train.yaml, ``hardware=cpu``, ``data=synthetic``): the datamodule and its loader, the
training step, the run's callbacks and validation cadence. Emulated: the network and loss as
``--step-ms`` of device time per step (29.7 ms = r18-FPN, 640 px, batch 16, bf16 on an H200), queued at
most ``QUEUE_STEPS`` ahead (``--device async``) or slept through (``sync``); each sample's worker cost as
``--sample-ms`` on a per-batch timeline. So the figures show how the pipeline schedules work, not how
fast this CPU is (sleeping workers cost no CPU). Reports the ceiling (batch / step time), the pipeline's
img/s, their ratio and the data-wait share.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from lightning import Callback, LightningModule, Trainer
from torch import Tensor, nn
from torch.utils.data import Dataset

from ocr.lightning_modules.build import build_module
from ocr.run.config import compose_config
from ocr.run.entry import instantiate_all, quiet_third_party
from ocr.types import DBOutput, Sample
from ocr.utils.io import atomic_write_json
from scripts import benchmark_results as results

QUEUE_STEPS = 2  # steps the host may run ahead of the emulated device
SYNC_EVERY_N_STEPS = 50  # configs/callbacks/triage.yaml: nonfinite_guard.check_every_n_steps
BUILT_SAMPLES = 16  # real samples built in this process: the real work per sample, replayed by sleep
# The arguments the report repeats, in its order.
SETTING_KEYS = "samples batch workers sample_ms step_ms image_px crop_px device sample_work val_every".split()


class EmulatedDevice:
    """A device timeline: the host waits when more than ``queue_steps`` pieces are unfinished, or at sync."""

    def __init__(self, queue_steps: int) -> None:
        self.queue_steps = queue_steps
        self._ends: list[float] = []  # when each queued piece finishes

    def run(self, seconds: float) -> None:
        now = time.perf_counter()
        self._ends.append(max(now, self._ends[-1] if self._ends else now) + seconds)
        while len(self._ends) > self.queue_steps:
            _sleep_until(self._ends.pop(0))

    def synchronize(self) -> None:
        if self._ends:
            _sleep_until(self._ends[-1])
        self._ends.clear()


def _sleep_until(moment: float) -> None:
    rest = moment - time.perf_counter()
    if rest > 0:
        time.sleep(rest)


class SleepNet(nn.Module):
    """``seconds`` of device time per call, then "no text" logits (of one parameter) everywhere."""

    def __init__(self, seconds: float, device: EmulatedDevice) -> None:
        super().__init__()
        self.seconds, self.device = seconds, device
        self.logit = nn.Parameter(torch.full((), -10.0))

    def forward(self, images: Tensor) -> DBOutput:
        self.device.run(self.seconds)
        logits = self.logit.expand(images.shape[0], 1, *images.shape[2:])
        return DBOutput(logits, logits, logits)


class ZeroLoss(nn.Module):
    """A loss with a gradient and no cost (the device time is in :class:`SleepNet`)."""

    def forward(self, output: DBOutput, batch: Any) -> dict[str, Tensor]:
        return {"loss": output.prob_logits.mean() * 0.0}


class PacedSamples(Dataset[Sample]):
    """The train dataset, each sample taking ``seconds`` of the worker: one of ``built`` (None: built for
    real), then a sleep to the end of its slot on a timeline restarted each batch (no drift adds up)."""

    def __init__(self, dataset: Any, seconds: float, built: list[Sample] | None, batch_size: int) -> None:
        self.dataset, self.seconds, self.built = dataset, seconds, built
        self.batch_size = batch_size  # the train stream's batches are all full
        self.transform = dataset.transform  # re-seeded per sample by the train stream
        self._calls = 0
        self._busy_until = 0.0

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Sample:
        batch_start = self._calls % self.batch_size == 0
        self._calls += 1
        self._busy_until = (time.perf_counter() if batch_start else self._busy_until) + self.seconds
        sample = self.dataset[index] if self.built is None else self.built[index % len(self.built)]
        _sleep_until(self._busy_until)
        return sample


class StepClock(Callback):
    """img/s from the end of step ``start`` to that of ``stop`` (synchronised), and the loader's wait; the
    host waits for the device where training syncs: each epoch end and ``SYNC_EVERY_N_STEPS``."""

    def __init__(self, start: int, stop: int, device: EmulatedDevice) -> None:
        self.start, self.stop, self.device = start, stop, device
        self.marks: dict[str, tuple[float, float, float]] = {}
        self.images = 0

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step % SYNC_EVERY_N_STEPS == 0:
            self.device.synchronize()
        if self.start < step <= self.stop:
            self.images += int(batch["images"].shape[0])
        for name, at in (("start", self.start), ("stop", self.stop)):
            if step == at and name not in self.marks:
                self.device.synchronize()
                waited = trainer.datamodule.loader_wait.seconds  # type: ignore[attr-defined]
                self.marks[name] = (time.perf_counter(), waited, time.process_time())

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.device.synchronize()

    def figures(self) -> dict[str, float]:
        """img/s, data-wait share, seconds, and the main process's CPU ms per step (load-independent)."""
        (t0, w0, c0), (t1, w1, c1) = self.marks["start"], self.marks["stop"]
        seconds, cpu_ms = t1 - t0, 1000 * (c1 - c0) / (self.stop - self.start)
        figures = {"pipeline_img_s": self.images / seconds, "data_wait": (w1 - w0) / seconds}
        return figures | {"seconds": seconds, "host_cpu_ms_per_step": cpu_ms}


def config_overrides(args: argparse.Namespace, data_root: Path, max_steps: int) -> list[str]:
    px = args.image_px
    off = ["trainer.limit_val_batches=0", "trainer.check_val_every_n_epoch=1"]
    validation = [f"trainer.check_val_every_n_epoch={args.val_every}"] if args.val_every else off
    return [
        *("hardware=cpu", "data=synthetic", f"data.root={data_root}", "data.synthetic.num_test=1"),
        *(f"data.synthetic.num_train={args.samples}", f"data.synthetic.num_val={args.val_images}"),
        *(f"data.synthetic.long_side={px}", f"data.train_transform.train_long_side={px}"),
        *(f"data.eval_transform.long_side={px}", f"data.train_transform.crop_size={args.crop_px}"),
        *("data.targets.min_text_size=2", f"data.batch_size={args.batch}"),
        *(f"data.eval_batch_size={args.batch}", *results.worker_overrides(args.workers)),
        *("data.pin_memory=false", "trainer.precision=32-true", "trainer.enable_model_summary=false"),
        *("trainer.max_epochs=-1", f"trainer.max_steps={max_steps}", *validation),
        *("time_budget_minutes=null", "test_after_fit=false", "logger=csv"),
        *("callbacks.progress_bar.every_n_seconds=10", *args.overrides),
    ]


def emulate(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    # The main process's tensor work stands for device kernels: on one thread it neither fights the
    # workers for the cores nor stalls at a thread pool's barriers on a busy machine.
    torch.set_num_threads(1)
    per_epoch = args.samples // args.batch if args.samples > args.batch else 1
    warmup, steps = (math.ceil(n / per_epoch) * per_epoch for n in (args.warmup, args.steps))
    cfg = compose_config("train", config_overrides(args, work / "data", warmup + steps), work / "run")
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    train = datamodule.datasets["train"]
    started = time.perf_counter()
    built = [train[index] for index in range(min(BUILT_SAMPLES, len(train)))]
    real_ms = 1000 * (time.perf_counter() - started) / len(built)
    replayed = built if args.sample_work == "sleep" else None
    paced = PacedSamples(train, args.sample_ms / 1000, replayed, min(args.batch, args.samples))
    datamodule.datasets["train"] = paced
    module = build_module(cfg)
    device = EmulatedDevice(QUEUE_STEPS if args.device == "async" else 0)
    module.net, module.loss = SleepNet(args.step_ms / 1000, device), ZeroLoss()
    clock = StepClock(warmup, warmup + steps, device)
    callbacks = [*instantiate_all(cfg.callbacks), clock]
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=instantiate_all(cfg.logger))
    trainer.fit(module, datamodule=datamodule)
    ceiling = args.batch / (args.step_ms / 1000)
    figures = clock.figures()
    firsts = list(datamodule.loader_wait.first_batch)
    report = {"machine": results.machine_line(), "load_average": os.getloadavg()}
    report |= {key: getattr(args, key) for key in SETTING_KEYS} | {"real_work_ms": real_ms}
    report |= {"steps_per_epoch": per_epoch, "warmup_steps": warmup, "steps": steps, "ceiling_img_s": ceiling}
    ratio = figures["pipeline_img_s"] / ceiling
    return report | figures | {"ratio": ratio, "first_batch_wait_s": firsts}


def markdown(report: dict[str, Any]) -> str:
    firsts = report["first_batch_wait_s"]
    validation = f"every {report['val_every']} epochs" if report["val_every"] else "off"
    setting = (
        f"N={report['samples']}, B={report['batch']}, W={report['workers']}, L={report['sample_ms']} ms "
        f"({report['sample_work']}; real work {report['real_work_ms']:.1f} ms per sample), "
        f"S={report['step_ms']} ms ({report['device']} device), {report['image_px']} px images, "
        f"{report['crop_px']} px crops, validation {validation}"
    )
    columns = ["ceiling img/s (B/S)", "pipeline img/s", "ratio", "data wait", "first batch: start", "later"]
    row = [f"{report['ceiling_img_s']:.1f}", f"{report['pipeline_img_s']:.1f}", f"{report['ratio']:.2f}"]
    row.append(f"{100 * report['data_wait']:.0f} %")
    row.append(f"{firsts[0]:.2f} s" if firsts else "n/a")
    row.append(f"{1000 * sum(firsts[1:]) / len(firsts[1:]):.1f} ms" if firsts[1:] else "n/a")
    return (
        f"{report['machine']}; load {report['load_average'][0]:.1f}; {setting}; {report['steps']} timed "
        f"steps after {report['warmup_steps']}\n\n"
        + results.markdown_table(
            [*columns, "host CPU ms/step"], [[*row, f"{report['host_cpu_ms_per_step']:.1f}"]]
        )
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = results.benchmark_parser(__doc__)
    parser.add_argument("--samples", type=int, default=150, help="training images (N)")
    parser.add_argument("--batch", type=int, default=16, help="batch size (B)")
    parser.add_argument("--workers", type=int, default=15, help="DataLoader workers (W)")
    parser.add_argument("--sample-ms", type=float, default=30.0, help="worker time per sample (L)")
    parser.add_argument("--step-ms", type=float, default=29.7, help="device time per training step (S)")
    parser.add_argument("--image-px", type=int, default=64, help="long side of the synthetic images (>= 64)")
    parser.add_argument("--crop-px", type=int, default=32, help="side of the training crops")
    device_help = "async: the host goes on while the device runs a step (as CUDA); sync: it sleeps"
    parser.add_argument("--device", choices=("async", "sync"), default="async", help=device_help)
    work_help = "sleep: L per sample (samples built once); real: real work topped up to L"
    parser.add_argument("--sample-work", choices=("sleep", "real"), default="sleep", help=work_help)
    parser.add_argument("--val-every", type=int, default=0, help="validate every N epochs (0: off)")
    parser.add_argument("--val-images", type=int, default=16, help="validation images")
    parser.add_argument("--steps", type=int, default=300, help="timed steps, rounded up to whole epochs")
    parser.add_argument("--warmup", type=int, default=60, help="warm-up steps, rounded up to whole epochs")
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of configs/train.yaml")
    args = parser.parse_args(argv)
    if min(args.samples, args.batch, args.steps, args.warmup) < 1 or args.workers < 0:
        parser.error("--samples, --batch, --steps and --warmup: expected >= 1; --workers: >= 0")
    with tempfile.TemporaryDirectory(prefix="benchmark_emulated_") as tmp:
        report = emulate(args, Path(tmp))
    report["table"] = markdown(report)
    print(report["table"], flush=True)
    if args.json is not None:
        atomic_write_json(args.json, report)
    if args.record:
        protocol = (
            "`scripts/benchmark_emulated.py`: the real training loop (datamodule, train stream, DataLoader "
            "workers, transfer hooks, training step, the run's callbacks) with the device emulated as "
            f"{args.step_ms} ms per step of batch {args.batch} and each of {args.workers} workers' cost as "
            f"{args.sample_ms} ms per sample ({args.sample_work}); ratio = pipeline / ceiling; "
            f"{report['steps']} timed steps after {report['warmup_steps']}."
        )
        command, (columns, rows) = results.command_line(__file__, argv), results.table_cells(report["table"])
        results.write_result(
            "emulated", "Training throughput", protocol, command, columns, rows, directory=args.record
        )
    return report


if __name__ == "__main__":
    quiet_third_party()
    main()
