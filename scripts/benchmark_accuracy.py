"""Accuracy of the README recipe's fine-tune over seeds: step 2 as written from one pretrained network;
each checkpoint it leaves scored on test and a photographed proxy in both CLEval modes; the peer beside.

    uv run python scripts/benchmark_accuracy.py --init-from <pretrain run>/checkpoints/<best>.ckpt \
        --proxy-root data/generated/sroie-compact-photo-s0 --peer-python <peer venv>/bin/python

Per seed (its own processes): ``runners/train.py experiment=receipts_finetune data.root=<root>
model.init_from=<init> seed=<seed>`` (``--steps``, ``--override`` make a variant), then
``runners/predict.py`` and ``runners/evaluate.py`` for each candidate: ``kept`` (``last.ckpt``, what the
recipe keeps: the weight average), ``raw`` (that step's trained weights) and ``best_val``. A seed with a
``figures.json`` is not run again; one with a ``trained.json`` (its finished fine-tune) is only scored
again. Writes ``<out>/<variant>/results.*``.
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
TRAINED = "trained.json"
PEER = "peer"
CANDIDATES = ("kept", "raw", "best_val")


@dataclass(frozen=True)
class Protocol:
    """One variant's protocol (everything but the seed)."""

    init_from: Path
    data_root: Path
    out: Path  # the variant's folder
    steps: int | None
    python: str = sys.executable
    hardware: str | None = None
    overrides: tuple[str, ...] = ()
    eval_overrides: tuple[str, ...] = ()
    extra_train_roots: tuple[Path, ...] = ()
    proxy_root: Path | None = None
    proxy_split: str = "test"
    splits: tuple[str, ...] = ("test",)
    candidates: tuple[str, ...] = CANDIDATES

    def eval_sets(self, train_root: Path) -> dict[str, tuple[Path, str]]:
        """Evaluation name -> (dataset root, split): the data root's splits, then the proxy's."""
        sets = {split: (train_root, split) for split in self.splits}
        if self.proxy_root is not None:
            sets["proxy"] = (self.proxy_root, self.proxy_split)
        return sets


@dataclass
class SeedResult:
    """One seed's figures: ``scores["<candidate> <eval set>"][<mode>]`` (hmean, precision, recall) and the
    training run's wall seconds."""

    seed: int
    train_seconds: float
    scores: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    commands: list[list[str]] = field(default_factory=list)


def _hardware(protocol: Protocol) -> list[str]:
    return [] if protocol.hardware is None else [f"hardware={protocol.hardware}"]


def train_command(protocol: Protocol, train_root: Path, seed: int, run_dir: Path) -> list[str]:
    """README step 2 for ``seed`` (its own test after the fit is left to the scoring that follows)."""
    command = [
        *(protocol.python, "runners/train.py", "experiment=receipts_finetune", f"data.root={train_root}"),
        *(f"model.init_from={protocol.init_from}", f"seed={seed}", "test_after_fit=false"),
        *(f"hydra.run.dir={run_dir}", *_hardware(protocol)),
    ]
    if protocol.steps is not None:
        command.append(f"trainer.max_steps={protocol.steps}")
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


def candidates(run_dir: Path) -> dict[str, Path]:
    """The checkpoints a fine-tune leaves: ``kept`` (last.ckpt), ``raw`` (its trained weights, written
    beside it, when last.ckpt holds a weight average) and ``best_val``."""
    from ocr.checkpoints.reading import load_checkpoint
    from ocr.utils.io import atomic_write_bytes

    folder = run_dir / "checkpoints"
    found = {"kept": folder / "last.ckpt"}
    if not found["kept"].is_file():
        raise FileNotFoundError(f"{found['kept']}: the training run wrote no last.ckpt")
    checkpoint = load_checkpoint(found["kept"])
    if "current_model_state" in checkpoint:  # Lightning's WeightAveraging keeps the trained weights here
        import io

        import torch

        trained = checkpoint.pop("current_model_state")
        raw = {**checkpoint, "state_dict": trained}
        buffer = io.BytesIO()
        torch.save(raw, buffer)
        found["raw"] = atomic_write_bytes(run_dir.parent / "raw_last.ckpt", buffer.getvalue())
    best = sorted(folder.glob("best_*.ckpt"))
    if best:
        found["best_val"] = best[-1]
    return found


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, mean, standard error of the mean (sample sd / sqrt(n)), sample sd and minimum; None where
    undefined."""
    n = len(values)
    sd = statistics.stdev(values) if n > 1 else None
    return {
        "n": n,
        "mean": statistics.fmean(values) if n else None,
        "se": None if sd is None else sd / math.sqrt(n),
        "sd": sd,
        "min": min(values) if n else None,
    }


def columns(results: Sequence[SeedResult]) -> list[tuple[str, str]]:
    """("<candidate> <eval set>", mode) pairs present in every seed's scores, in first-seen order."""
    if not results:
        return []
    first = [(name, mode) for name, modes in results[0].scores.items() for mode in modes]
    return [c for c in first if all(c[1] in r.scores.get(c[0], {}) for r in results)]


def aggregate(results: Sequence[SeedResult]) -> dict[str, dict[str, float | int | None]]:
    """``"<candidate> <eval set>/<mode>"`` -> :func:`summarize` of its hmean over the seeds, plus
    ``train_seconds``."""
    table = {
        f"{name}/{mode}": summarize([r.scores[name][mode]["hmean"] for r in results])
        for name, mode in columns(results)
    }
    table["train_seconds"] = summarize([r.train_seconds for r in results])
    return table


def markdown(variant: str, results: Sequence[SeedResult], peer: dict[str, Any] | None = None) -> str:
    """One row per candidate, eval set and mode: hmean per seed, then mean ± SE and the minimum; then the
    peer's rows (one run: no seeds) and the training time."""
    stats = aggregate(results)
    header = ["candidate", "set", "mode", *(f"seed {r.seed}" for r in results), "mean ± SE", "min"]
    lines = [f"### {variant}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def row(cells: list[str]) -> None:
        lines.append("| " + " | ".join(cells) + " |")

    for name, mode in columns(results):
        stat = stats[f"{name}/{mode}"]
        seeds = [f"{r.scores[name][mode]['hmean']:.4f}" for r in results]
        row(
            [
                *name.split(" ", 1),
                mode,
                *seeds,
                f"{_fmt(stat['mean'])} ± {_fmt(stat['se'])}",
                _fmt(stat["min"]),
            ]
        )
    for name, modes in (peer or {}).items():
        for mode, figures in modes.items():
            row([PEER, name, mode, *("-" for _ in results), f"{figures['hmean']:.4f}", "-"])
    seconds = stats["train_seconds"]
    row(
        [
            "training",
            "-",
            "wall s",
            *(f"{r.train_seconds:.0f}" for r in results),
            _fmt(seconds["mean"], ".0f"),
            "-",
        ]
    )
    return "\n".join(lines) + "\n"


def _fmt(value: float | int | None, fmt: str = ".4f") -> str:
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


def _run(command: list[str], log_path: Path, stdin: str | None = None) -> str:
    """``command``'s stdout, run in the repository and logged to ``log_path``; a failure raises."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    print("$ " + " ".join(command), flush=True)
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, input=stdin)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(result.stdout + "\n--- stderr ---\n" + result.stderr)
    if result.returncode != 0:
        raise RuntimeError(
            f"exit status {result.returncode}: {' '.join(command)}\n"
            f"(log: {log_path})\n{result.stderr[-3000:]}"
        )
    return result.stdout


def score(protocol: Protocol, gt: Path, pred: Path, work: Path) -> tuple[dict[str, dict[str, float]], list]:
    """hmean, precision and recall of the predictions file ``pred`` in both modes; the commands run."""
    figures, commands = {}, []
    for mode in MODES:
        command = evaluate_command(protocol, gt, pred, mode, work / f"eval_{mode}")
        summary = last_json_line(_run(command, work / f"eval_{mode}.log"))
        figures[mode] = {k: float(summary[k]) for k in ("hmean", "precision", "recall")}
        commands.append(command)
    return figures, commands


def run_seed(protocol: Protocol, train_root: Path, seed: int) -> SeedResult:
    """The protocol for ``seed``; its figures are also written to ``<variant>/seed<N>/figures.json``."""
    from ocr.utils.io import atomic_write_json

    seed_dir = protocol.out / f"seed{seed}"
    done = seed_dir / FIGURES
    if done.is_file():
        print(f"seed {seed}: figures from {done}", flush=True)
        return SeedResult(**json.loads(done.read_text()))
    trained = seed_dir / TRAINED
    if trained.is_file():  # its fine-tune finished: scored again only
        result = SeedResult(seed=seed, **json.loads(trained.read_text()))
    else:
        if (seed_dir / "train").exists():  # an interrupted fine-tune: start it afresh
            shutil.rmtree(seed_dir / "train")
        command = train_command(protocol, train_root, seed, seed_dir / "train")
        started = time.perf_counter()
        _run(command, seed_dir / "train.log")
        result = SeedResult(seed, time.perf_counter() - started, commands=[command])
        atomic_write_json(trained, {"train_seconds": result.train_seconds, "commands": result.commands})
    found = candidates(seed_dir / "train")
    for candidate, ckpt in ((c, found[c]) for c in protocol.candidates if c in found):
        for name, (root, split) in protocol.eval_sets(train_root).items():
            work = seed_dir / f"{candidate}_{name}"
            command = predict_command(protocol, ckpt, root, split, work / "predict")
            _run(command, work / "predict.log")
            gt = root / "jsons" / f"{split}.json"
            key = f"{candidate} {name}"
            result.scores[key], evaluations = score(protocol, gt, work / "predict" / "predictions.json", work)
            result.commands += [command, *evaluations]
            print(
                f"seed {seed} {key}: " + ", ".join(f"{m} {result.scores[key][m]['hmean']:.4f}" for m in MODES)
            )
    atomic_write_json(done, result.__dict__)
    return result


def run_peer(protocol: Protocol, train_root: Path, python: Path) -> dict[str, dict[str, dict[str, float]]]:
    """The peer's figures on each eval set: scripts/peer_rapidocr.py (one pass, its defaults) in the peer's
    own Python, its boxes written as a submission and scored as ours are."""
    from ocr.utils.io import atomic_write_json
    from ocr.utils.submission import write_submission_csv

    done = protocol.out / PEER / FIGURES
    if done.is_file():
        return json.loads(done.read_text())
    figures = {}
    for name, (root, split) in protocol.eval_sets(train_root).items():
        work = protocol.out / PEER / name
        work.mkdir(parents=True, exist_ok=True)
        listing = work / "images.txt"
        images = sorted(p for p in (root / "images" / split).iterdir() if p.is_file())
        listing.write_text("".join(f"{p}\n" for p in images))
        command = [os.fspath(python), os.fspath(REPO / "scripts" / "peer_rapidocr.py"), os.fspath(listing)]
        answer = last_json_line(_run(command, work / "peer.log", stdin="pass\nquit\n"))
        polygons = {
            Path(k).name: [[v[i : i + 2] for i in range(0, len(v), 2)] for v in boxes]
            for k, boxes in answer["polygons"].items()
        }
        csv = write_submission_csv(work / "submission.csv", polygons)
        figures[name], _ = score(protocol, root / "jsons" / f"{split}.json", csv, work)
        print(f"peer {name}: " + ", ".join(f"{m} {figures[name][m]['hmean']:.4f}" for m in MODES))
    atomic_write_json(done, figures)
    return figures


def write_results(
    protocol: Protocol, variant: str, results: Sequence[SeedResult], peer: dict[str, Any] | None
) -> tuple[Path, Path]:
    """``results.json`` and ``results.md`` in the variant's folder (atomic)."""
    from ocr.utils.io import atomic_write_json, atomic_write_text

    payload = {
        "variant": variant,
        "protocol": protocol_record(protocol),
        "summary": aggregate(results),
        "peer": peer,
        "seeds": [r.__dict__ for r in results],
    }
    json_path = atomic_write_json(protocol.out / "results.json", payload)
    md_path = atomic_write_text(protocol.out / "results.md", markdown(variant, results, peer))
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
    parser.add_argument("--steps", type=int, help="training steps per seed (default: the recipe's)")
    parser.add_argument("--variant", default="recipe", help="name of the variant's folder and table")
    parser.add_argument("--override", action="append", default=[], help="train override (repeatable)")
    parser.add_argument("--eval-override", action="append", default=[], help="predict override (repeatable)")
    parser.add_argument("--label-subset", type=int, help="keep the first N train labels")
    parser.add_argument("--extra-train-root", type=Path, action="append", default=[])
    parser.add_argument("--proxy-root", type=Path, help="photographed copy (dataset root)")
    parser.add_argument("--proxy-split", default="test")
    parser.add_argument("--splits", nargs="+", default=["test"], help="the data root's splits scored")
    parser.add_argument("--candidates", nargs="+", choices=CANDIDATES, default=list(CANDIDATES))
    parser.add_argument("--peer-python", type=Path, help="the peer's Python (rapidocr in its own venv)")
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
        python=args.python,
        hardware=args.hardware,
        overrides=tuple(args.override),
        eval_overrides=tuple(args.eval_override),
        extra_train_roots=tuple(r.resolve() for r in args.extra_train_root),
        proxy_root=None if args.proxy_root is None else args.proxy_root.resolve(),
        proxy_split=args.proxy_split,
        splits=tuple(args.splits),
        candidates=tuple(args.candidates),
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
    for flag, path in (("--init-from", protocol.init_from), ("--peer-python", args.peer_python)):
        if path is not None and not path.is_file():
            print(f"{flag} {path}: no such file", file=sys.stderr)
            return 1
    claim_variant(protocol, args.label_subset)
    root = train_root(protocol, args.label_subset)
    peer = None if args.peer_python is None else run_peer(protocol, root, args.peer_python)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:  # each seed's work is its own processes
        results = list(pool.map(lambda seed: run_seed(protocol, root, seed), args.seeds))
    json_path, md_path = write_results(protocol, args.variant, results, peer)
    print(md_path.read_text())
    print(f"results: {json_path}, {md_path}")
    if args.record:
        variant = bool(args.override or args.label_subset or args.extra_train_root or args.steps)
        write_result(
            f"accuracy-{args.variant}",
            "The variants: DBNet++, PAN, encoders" if variant else "Recipe accuracy",
            "`scripts/benchmark_accuracy.py`: from one pretrained network, each seed runs the README's "
            "step 2 as written (`experiment=receipts_finetune`, its own validation, budget and defaults"
            f"{', with the overrides in the command' if variant else ''}); `runners/predict.py` and "
            "`runners/evaluate.py` score each checkpoint the run leaves in both CLEval modes: `kept` is "
            "`last.ckpt`, the one the recipe keeps. hmean per seed, mean ± standard error, minimum; the "
            "peer once, in its own environment, scored the same way.",
            command_line(__file__, argv),
            *table_cells(markdown(args.variant, results, peer)),
            device="auto",
            directory=args.record,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
