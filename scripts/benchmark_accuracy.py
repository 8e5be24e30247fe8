"""Accuracy of a training variant as mean ± standard error over seeds: a fixed fine-tuning protocol run
through the real runners, scored on val, test and (optionally) a photographed proxy, in both CLEval modes.

    uv run python scripts/benchmark_accuracy.py --init-from <pretrain run>/checkpoints/<best>.ckpt \
        [--data-root ../shared/datasets/sroie-compact] [--seeds 0 1 2] [--steps 150] [--crop 320] \
        [--variant NAME] [--override model=dbnetpp_resnet18 ...] [--eval-override postprocess.thresh=0.25] \
        [--label-subset 50] [--extra-train-root <pseudo-labelled dataset> ...] [--proxy-root <dataset>] \
        [--splits val test] [--jobs 1] [--python python3] [--hardware cpu|h100_80gb|...] \
        [--out outputs/benchmark_accuracy]

Per seed (its own processes): ``runners/train.py experiment=receipts_finetune`` for exactly ``--steps``
steps without validation, then ``runners/predict.py`` of ``last.ckpt`` on each split and
``runners/evaluate.py`` in both modes. ``--label-subset N``: the first N train images' labels (the others
under ``unlabelled/``). A seed with a ``figures.json`` is not run again. Writes ``<out>/<variant>/results.*``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.benchmark_results import benchmark_parser, command_line, table_cells, write_result

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = REPO.parent / "shared" / "datasets" / "sroie-compact"
MODES = ("upstream", "competition")
FIGURES = "figures.json"


@dataclass(frozen=True)
class Protocol:
    """One variant's protocol (everything but the seed)."""

    init_from: Path
    data_root: Path
    out: Path  # the variant's folder
    steps: int
    crop: int | None
    python: str = sys.executable
    hardware: str | None = None
    overrides: tuple[str, ...] = ()
    eval_overrides: tuple[str, ...] = ()
    extra_train_roots: tuple[Path, ...] = ()
    proxy_root: Path | None = None
    proxy_split: str = "test"
    splits: tuple[str, ...] = ("val", "test")

    def eval_sets(self, train_root: Path) -> dict[str, tuple[Path, str]]:
        """Evaluation name -> (dataset root, split): the data root's splits, then the proxy's."""
        sets = {split: (train_root, split) for split in self.splits}
        if self.proxy_root is not None:
            sets["proxy"] = (self.proxy_root, self.proxy_split)
        return sets


@dataclass
class SeedResult:
    """One seed's figures: ``hmean[<eval set>][<mode>]`` (also precision and recall), training seconds."""

    seed: int
    train_seconds: float
    scores: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    commands: list[list[str]] = field(default_factory=list)


def _hardware(protocol: Protocol) -> list[str]:
    return [] if protocol.hardware is None else [f"hardware={protocol.hardware}"]


def train_command(protocol: Protocol, train_root: Path, seed: int, run_dir: Path) -> list[str]:
    command = [
        *(protocol.python, "runners/train.py", "experiment=receipts_finetune", f"data.root={train_root}"),
        *(f"model.init_from={protocol.init_from}", f"seed={seed}", f"trainer.max_steps={protocol.steps}"),
        *("trainer.max_epochs=-1", "time_budget_minutes=null", "test_after_fit=false"),
        *("trainer.limit_val_batches=0", f"hydra.run.dir={run_dir}", *_hardware(protocol)),
    ]
    if protocol.crop is not None:
        command.append(f"data.train_transform.crop_size={protocol.crop}")
    if protocol.extra_train_roots:
        command.append(f"data.extra_train_roots=[{','.join(str(r) for r in protocol.extra_train_roots)}]")
    return command + list(protocol.overrides)


def predict_command(protocol: Protocol, ckpt: Path, root: Path, split: str, run_dir: Path) -> list[str]:
    return [
        *(protocol.python, "runners/predict.py", f"ckpt={ckpt}", "data=receipts", f"data.root={root}"),
        *(f"image_dir={root / 'images' / split}", "report.enabled=false", f"hydra.run.dir={run_dir}"),
        *_hardware(protocol),
        *protocol.eval_overrides,
    ]


def evaluate_command(protocol: Protocol, gt: Path, pred: Path, mode: str, run_dir: Path) -> list[str]:
    return [
        *(protocol.python, "runners/evaluate.py", f"gt={gt}", f"pred={pred}", f"mode={mode}"),
        *(f"out_dir={run_dir}", f"hydra.run.dir={run_dir}"),
    ]


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, mean, standard error of the mean (sample sd / sqrt(n)) and sample sd; None where undefined."""
    n = len(values)
    sd = statistics.stdev(values) if n > 1 else None
    mean = statistics.fmean(values) if n else None
    return {"n": n, "mean": mean, "se": None if sd is None else sd / math.sqrt(n), "sd": sd}


def columns(results: Sequence[SeedResult]) -> list[tuple[str, str]]:
    """(eval set, mode) pairs present in every seed's scores, in first-seen order."""
    if not results:
        return []
    first = [(name, mode) for name, modes in results[0].scores.items() for mode in modes]
    return [c for c in first if all(c[1] in r.scores.get(c[0], {}) for r in results)]


def aggregate(results: Sequence[SeedResult]) -> dict[str, dict[str, float | int | None]]:
    """``"<eval set>/<mode>"`` -> :func:`summarize` of its hmean over the seeds, plus ``train_seconds``."""
    table = {
        f"{name}/{mode}": summarize([r.scores[name][mode]["hmean"] for r in results])
        for name, mode in columns(results)
    }
    table["train_seconds"] = summarize([r.train_seconds for r in results])
    return table


def markdown(variant: str, results: Sequence[SeedResult]) -> str:
    """One row per seed (hmean per eval set and mode, training seconds), then mean, SE and sd."""
    cols = columns(results)
    stats = aggregate(results)
    header = ["seed", *(f"{name} {mode}" for name, mode in cols), "train s"]
    lines = [f"### {variant}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in results:
        cells = [str(r.seed), *(f"{r.scores[n][m]['hmean']:.4f}" for n, m in cols), f"{r.train_seconds:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    keys = [f"{n}/{m}" for n, m in cols]
    for label, stat, fmt in (("mean", "mean", ".4f"), ("SE", "se", ".4f"), ("sd", "sd", ".4f")):
        cells = [_fmt(stats[k][stat], fmt) for k in keys] + [_fmt(stats["train_seconds"][stat], ".0f")]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _fmt(value: float | int | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def last_json_line(stdout: str) -> dict[str, Any]:
    """The last stdout line that is a JSON object (``runners/evaluate.py``'s summary)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            value = json.loads(line)
            if isinstance(value, dict):
                return value
    raise ValueError(f"no JSON summary line in the output:\n{stdout[-2000:]}")


def _run(command: list[str], log_path: Path) -> str:
    """``command``'s stdout, run in the repository and logged to ``log_path``; a failure raises."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    print("$ " + " ".join(command), flush=True)
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(result.stdout + "\n--- stderr ---\n" + result.stderr)
    if result.returncode != 0:
        raise RuntimeError(
            f"exit status {result.returncode}: {' '.join(command)}\n"
            f"(log: {log_path})\n{result.stderr[-3000:]}"
        )
    return result.stdout


def run_seed(protocol: Protocol, train_root: Path, seed: int) -> SeedResult:
    """The protocol for ``seed``; its figures are also written to ``<variant>/seed<N>/figures.json``."""
    from ocr.utils.io import atomic_write_json

    seed_dir = protocol.out / f"seed{seed}"
    done = seed_dir / FIGURES
    if done.is_file():
        saved = json.loads(done.read_text())
        print(f"seed {seed}: figures from {done}", flush=True)
        return SeedResult(**saved)
    if (seed_dir / "train").exists():  # an interrupted attempt: start the seed afresh
        shutil.rmtree(seed_dir / "train")
    result = SeedResult(seed=seed, train_seconds=0.0)
    command = train_command(protocol, train_root, seed, seed_dir / "train")
    started = time.perf_counter()
    _run(command, seed_dir / "train.log")
    result.train_seconds = time.perf_counter() - started
    result.commands.append(command)
    ckpt = seed_dir / "train" / "checkpoints" / "last.ckpt"
    if not ckpt.is_file():
        raise FileNotFoundError(
            f"{ckpt}: the training run wrote no last.ckpt (log: {seed_dir / 'train.log'})"
        )
    for name, (root, split) in protocol.eval_sets(train_root).items():
        command = predict_command(protocol, ckpt, root, split, seed_dir / f"predict_{name}")
        _run(command, seed_dir / f"predict_{name}.log")
        result.commands.append(command)
        result.scores[name] = {}
        for mode in MODES:
            command = evaluate_command(
                protocol,
                root / "jsons" / f"{split}.json",
                seed_dir / f"predict_{name}" / "predictions.json",
                mode,
                seed_dir / f"eval_{name}_{mode}",
            )
            summary = last_json_line(_run(command, seed_dir / f"eval_{name}_{mode}.log"))
            result.commands.append(command)
            result.scores[name][mode] = {k: float(summary[k]) for k in ("hmean", "precision", "recall")}
        print(
            f"seed {seed} {name}: " + ", ".join(f"{m} {result.scores[name][m]['hmean']:.4f}" for m in MODES),
            flush=True,
        )
    atomic_write_json(done, result.__dict__)
    return result


def write_results(protocol: Protocol, variant: str, results: Sequence[SeedResult]) -> tuple[Path, Path]:
    """``results.json`` and ``results.md`` in the variant's folder (atomic)."""
    from ocr.utils.io import atomic_write_json, atomic_write_text

    payload = {
        "variant": variant,
        "protocol": protocol_record(protocol),
        "summary": aggregate(results),
        "seeds": [r.__dict__ for r in results],
    }
    json_path = atomic_write_json(protocol.out / "results.json", payload)
    md_path = atomic_write_text(protocol.out / "results.md", markdown(variant, results))
    return json_path, md_path


def protocol_record(protocol: Protocol, label_subset: int | None = None) -> dict[str, Any]:
    """The protocol as JSON values (and the label subset, which shapes the train root)."""
    record: dict[str, Any] = {
        k: (str(v) if isinstance(v, Path) else [str(x) for x in v] if isinstance(v, tuple) else v)
        for k, v in protocol.__dict__.items()
    }
    return record | {"label_subset": label_subset}


def claim_variant(protocol: Protocol, label_subset: int | None) -> None:
    """Record the protocol in ``<variant>/protocol.json``; refuse a folder of another protocol's seeds."""
    from ocr.utils.io import atomic_write_json

    path = protocol.out / "protocol.json"
    record = protocol_record(protocol, label_subset)
    if path.is_file():
        saved = json.loads(path.read_text())
        changed = sorted(
            k for k in record.keys() | saved.keys() if k != "python" and record.get(k) != saved.get(k)
        )
        if changed:
            raise SystemExit(
                f"{protocol.out}: holds the results of another protocol (differs in {', '.join(changed)}); "
                "choose another --variant or remove that folder"
            )
    atomic_write_json(path, record)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--init-from", type=Path, required=True, help="the pretrained checkpoint")
    parser.add_argument("--data-root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=150, help="training steps per seed")
    parser.add_argument("--crop", type=int, help="training crop (default: the preset's)")
    parser.add_argument("--variant", default="baseline", help="name of the variant's folder and table")
    parser.add_argument("--override", action="append", default=[], help="train override (repeatable)")
    parser.add_argument("--eval-override", action="append", default=[], help="predict override (repeatable)")
    parser.add_argument("--label-subset", type=int, help="keep the first N train labels")
    parser.add_argument("--extra-train-root", type=Path, action="append", default=[])
    parser.add_argument("--proxy-root", type=Path, help="photographed copy (dataset root)")
    parser.add_argument("--proxy-split", default="test")
    parser.add_argument("--splits", nargs="+", default=["val", "test"], help="the data root's splits scored")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the runners")
    parser.add_argument("--hardware", help="configs/hardware preset (default: the configs')")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "benchmark_accuracy")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run side by side")
    return parser.parse_args(argv)


def protocol_from_args(args: argparse.Namespace) -> Protocol:
    """The variant's protocol, paths absolute (the runners run in the repository)."""
    return Protocol(
        init_from=args.init_from.resolve(),
        data_root=args.data_root.resolve(),
        out=(args.out / args.variant).resolve(),
        steps=args.steps,
        crop=args.crop,
        python=args.python,
        hardware=args.hardware,
        overrides=tuple(args.override),
        eval_overrides=tuple(args.eval_override),
        extra_train_roots=tuple(r.resolve() for r in args.extra_train_root),
        proxy_root=None if args.proxy_root is None else args.proxy_root.resolve(),
        proxy_split=args.proxy_split,
        splits=tuple(args.splits),
    )


def train_root(protocol: Protocol, label_subset: int | None) -> Path:
    """The data root, or a fresh label subset of it in the variant's folder."""
    if label_subset is None:
        return protocol.data_root
    from ocr.data.layout import write_label_subset

    out = protocol.out / f"data_subset{label_subset}"
    if out.exists():  # written by this script: rewritten, so no image of an earlier subset stays
        shutil.rmtree(out)
    return write_label_subset(protocol.data_root, "train", label_subset, out)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    protocol = protocol_from_args(args)
    if not protocol.init_from.is_file():
        print(f"--init-from {protocol.init_from}: no such checkpoint", file=sys.stderr)
        return 1
    claim_variant(protocol, args.label_subset)
    root = train_root(protocol, args.label_subset)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:  # each seed's work is its own processes
        results = list(pool.map(lambda seed: run_seed(protocol, root, seed), args.seeds))
    json_path, md_path = write_results(protocol, args.variant, results)
    print(md_path.read_text())
    print(f"results: {json_path}, {md_path}")
    if args.record:
        variant = bool(args.override or args.label_subset or args.extra_train_root)
        write_result(
            f"accuracy-{args.variant}",
            "The variants: DBNet++, PAN, encoders" if variant else "Recipe accuracy",
            "`scripts/benchmark_accuracy.py`: from one pretrained network, each seed fine-tunes exactly "
            f"{args.steps} steps with validation off, and its `last.ckpt` is scored by `runners/predict.py` "
            "and `runners/evaluate.py` in both CLEval modes; hmean per seed, then mean, standard error "
            "and sd.",
            command_line(__file__, argv),
            *table_cells(markdown(args.variant, results)),
            device="auto",
            directory=args.record,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
