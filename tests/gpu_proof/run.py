"""One command that proves the CUDA paths on a GPU machine: ``scripts/gpu_proof.sh [options]``.

The plan (``tests.gpu_proof.steps``), in phases ordered by value, the steps of a phase side by side:

1. ``doctor`` (exit 0, the GPU rows ok); ``bad_index`` (``callbacks.inject.kind=bad_index``: the device-side
   assert ends the run by itself within 10 s, exit 84, our explanation last, ``.FAILURE`` and the crash
   bundle); ``nan_loss`` (``NonFiniteLossError`` naming the step, ``nonfinite.json``, no CUDA fault);
   ``proof_run`` (50 compiled steps of ``hardware=h100_80gb`` on real receipts under
   ``debug=gpu_probe``: sync debug mode, peak memory of train/val/test, recompiles, then the test);
   ``sanitizer_memcheck`` (5 steps under compute-sanitizer memcheck: 0 errors) and ``sanitizer_bad_index``
   (the injected assert under memcheck: the error and its kernel named).
2. ``benchmark``: ``scripts/benchmark_gpu.py`` (ceiling against pipeline, fp32, bf16 + channels_last,
   compile), alone: it is a timing.
3. ``train_bf16``: receipts training sized by ``--train-minutes`` (2), alone.
4. ``train_fp32``: the same in fp32, ``--fp32-minutes`` (1), alone.
5. Both trainings' tests on the test split, CLEval ``competition`` and ``upstream``, side by side.

The whole proof is bounded by ``--budget-minutes`` (9 on a GPU): a step's timeout is cut to the time left,
a training shrinks to fit what is left, a step that cannot start fails as not run, and a step killed by
its timeout fails whatever it left. ``proof.json`` and ``summary.md`` are rewritten after every phase;
at the end ``proof_files.tar.gz`` packs the step logs and the small files each step left (reports,
figures, crash records; no checkpoints or images), and ``--copy-to DIR`` copies those three files there.
Exit status 0 when the proof passed. ``--cpu`` (automatic without a CUDA GPU) runs the same plan at tiny
sizes on synthetic data with the sanitizer steps skipped, to test the script; ``--dry-run`` prints the
plan (the GPU one unless ``--cpu``) with its commands and estimated times, and runs nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ocr.utils.io import atomic_write_json, atomic_write_text
from tests.gpu_proof import checks
from tests.gpu_proof.checks import StepResult
from tests.gpu_proof.steps import (
    GPU_ESTIMATE_S,
    PHASES,
    STEPS,
    TESTS,
    TINY_CPU_RUN,
    TRAIN_OVERHEAD_S,
    Plan,
    Step,
    StepRun,
)

__all__ = ["STEPS", "TINY_CPU_RUN", "main", "run_phases"]

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "datasets" / "sroie-compact"
GPU_BUDGET_MINUTES = 9.0  # one call of a rented GPU: the whole proof in 9 minutes
MIN_STEP_S = 30.0  # a step started with less time left than this could not finish: not run
POLL_S = 0.2
TARBALL = "proof_files.tar.gz"
PACKED_SUFFIXES = (".log", ".json", ".md", ".txt", ".png", ".csv", ".yaml", ".FAILURE", ".SUCCESS")
PACKED_MAX_BYTES = 2 * 2**20
NOT_PACKED = ("synthetic", "report_files", "prob_cache", "checkpoints")  # folders of data, not evidence


class Runner:
    """Runs phases of steps as processes, each with its own log, process group and deadline."""

    def __init__(self, out: Path, deadline: float | None) -> None:
        """``deadline``: ``time.monotonic()`` by which every step must have ended (None: no bound)."""
        self.out = out
        self.deadline = deadline
        python_path = os.environ.get("PYTHONPATH")
        self.env = {
            **os.environ,
            "PYTHON": sys.executable,  # debug_cuda.sh then uses this interpreter, not uv
            "PYTHONPATH": str(REPO) + (os.pathsep + python_path if python_path else ""),
            "WANDB_MODE": "offline",
            "NO_ALBUMENTATIONS_UPDATE": "1",
            "HF_HUB_OFFLINE": "1",
        }

    def time_left(self) -> float:
        """Seconds left before the deadline (infinite without one)."""
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def run(self, steps: Sequence[Step]) -> list[StepRun]:
        """Start every step, wait for all; a step past its timeout (cut to the time left) is killed."""
        started, processes, files, limits = time.monotonic(), [], [], []
        try:
            for step in steps:
                log_path = self.out / "logs" / f"{step.name}.log"
                log_path.parent.mkdir(parents=True, exist_ok=True)
                _say(f"{step.name}: {' '.join(step.argv)}  (log: {log_path})")
                files.append(log_path.open("w"))
                # Its own process group: a timeout ends the step's DataLoader workers and the program under
                # compute-sanitizer too, so nothing keeps the GPU busy into the next phase.
                processes.append(
                    subprocess.Popen(
                        step.argv,
                        cwd=REPO,
                        env={**self.env, **step.env},
                        stdout=files[-1],
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
                limits.append(min(step.timeout_s, self.time_left()))
            return self._wait(steps, processes, files, limits, started)
        except BaseException:  # Ctrl-C reaches only this process: end the steps' groups with it
            for process in processes:
                _kill_group(process)
            raise
        finally:
            for handle in files:
                handle.close()

    def _wait(
        self,
        steps: Sequence[Step],
        processes: list[subprocess.Popen[bytes]],
        files: list[Any],
        limits: list[float],
        started: float,
    ) -> list[StepRun]:
        ended: dict[int, StepRun] = {}
        while len(ended) < len(steps):
            for i, process in enumerate(processes):
                if i in ended:
                    continue
                elapsed = time.monotonic() - started
                code, timed_out = process.poll(), False
                if code is None and elapsed > limits[i]:
                    _kill_group(process)
                    files[i].write(f"\n[gpu_proof] timed out after {limits[i]:.0f} s: killed\n")
                    code, timed_out = process.wait(), True
                if code is not None:
                    log = self.out / "logs" / f"{steps[i].name}.log"
                    ended[i] = StepRun(code, round(elapsed, 1), timed_out, time.time(), log)
            time.sleep(POLL_S)
        return [ended[i] for i in range(len(steps))]


def judge(step: Step, done: StepRun) -> StepResult:
    """The step's result: its check, failed in any case when its timeout killed it."""
    passed, details = step.check(done)
    if done.timed_out:
        passed = False
        details = {
            **details,
            "problem": f"killed by its timeout after {done.seconds:.0f} s (log: {done.log})",
        }
    result = StepResult(
        name=step.name,
        title=step.title,
        status="pass" if passed else "fail",
        seconds=done.seconds,
        exit_code=done.exit_code,
        run_dir=str(step.where),
        log=str(done.log),
        command=" ".join(step.argv),
        details=details,
    )
    _say(f"{step.name}: {result.status.upper()} {checks.figures(details)}")
    return result


def run_phases(
    plan: Plan, runner: Runner, selected: Sequence[str], on_phase: Callable[[list[StepResult]], object]
) -> list[StepResult]:
    """Run the selected steps phase by phase; ``on_phase(results so far)`` after each phase."""
    results: dict[str, StepResult] = {}
    for phase in PHASES:
        names = [n for n in phase if n in selected or (n in TESTS and n.split("_test_")[0] in selected)]
        to_run: list[Step] = []
        for name in names:
            left = runner.time_left()
            built = plan.build(name, results, left)
            if isinstance(built, Step) and left < MIN_STEP_S:
                why = f"not run: {max(left, 0):.0f} s left of the --budget-minutes budget"
                built = StepResult(name=name, title=built.title, status="fail", details={"problem": why})
            if isinstance(built, StepResult):
                _say(f"{name}: {built.status.upper()} {checks.figures(built.details)}")
                results[name] = built
            else:
                to_run.append(built)
        for step, done in zip(to_run, runner.run(to_run) if to_run else [], strict=True):
            results[step.name] = judge(step, done)
        if names:
            on_phase([results[n] for p in PHASES for n in p if n in results])
    return [results[n] for p in PHASES for n in p if n in results]


def plan_text(plan: Plan, selected: Sequence[str], budget_minutes: float | None) -> str:
    """The plan as text: phases, each step's command and timeout, and the estimated time (GPU)."""
    lines, total = [], 0.0
    for number, phase in enumerate(PHASES, 1):
        names = [n for n in phase if n in selected or (n in TESTS and n.split("_test_")[0] in selected)]
        if not names:
            continue
        estimates = [_estimate(plan, n) for n in names]
        total += max(estimates)
        together = "side by side" if len(names) > 1 else "alone"
        lines.append(f"phase {number}: {', '.join(names)} ({together}; about {max(estimates):.0f} s)")
        for name in names:
            built = plan.build(name, _trained(), float("inf"))
            command = " ".join(built.argv) if isinstance(built, Step) else f"({built.status})"
            timeout = f", timeout {built.timeout_s:.0f} s" if isinstance(built, Step) else ""
            lines.append(f"  {name}{timeout}: {command}")
    bound = "" if budget_minutes is None else f" of a {budget_minutes:g}-minute budget"
    lines.append(f"estimated: {total / 60:.1f} min{bound} (estimates for an H100/H200, not measured)")
    return "\n".join(lines)


def _trained() -> dict[str, StepResult]:
    """Stand-ins for passed trainings, so the plan shows their tests' commands."""
    return {
        name: StepResult(name=name, title=name, status="pass", details={"kept_checkpoint": f"<{name} best>"})
        for name in ("train_bf16", "train_fp32")
    }


def _estimate(plan: Plan, name: str) -> float:
    if name in plan.minutes:
        return plan.minutes[name] * 60 + TRAIN_OVERHEAD_S
    return float(GPU_ESTIMATE_S[name])


def pack(out: Path) -> Path:
    """``out/proof_files.tar.gz``: the step logs and the small files the steps left (no checkpoints,
    tensors or images but figures), paths relative to ``out``."""
    tarball = out / TARBALL
    tmp = tarball.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as archive:
        for path in sorted(out.rglob("*")):
            small = path.is_file() and path.stat().st_size <= PACKED_MAX_BYTES
            wanted = path.name.endswith(PACKED_SUFFIXES) and not set(NOT_PACKED) & set(path.parts)
            if small and wanted and path != tarball:
                archive.add(path, arcname=str(path.relative_to(out)))
    tmp.replace(tarball)
    return tarball


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _say(message: str) -> None:
    sys.stdout.write(f"[gpu_proof] {message}\n")
    sys.stdout.flush()


def _machine(cuda: bool) -> str:
    from ocr.machine.environment import package_versions

    parts = [
        platform.platform(),
        f"{os.cpu_count()} logical CPUs",
        f"torch {package_versions(('torch',))['torch']}",
    ]
    if cuda:  # cpu_info and cuda_info import torch: not worth it for the CPU variant
        from ocr.machine.environment import cpu_info, cuda_info

        info = cuda_info(query_devices=True)
        parts[1] = f"{cpu_info()['model']} ({os.cpu_count()} logical CPUs)"
        parts += [
            f"{d['name']} {d['total_memory_gib']} GiB (sm_{d['capability'].replace('.', '')})"
            for d in info["devices"]
        ]
        parts.append(f"CUDA {info['torch_cuda']}, cuDNN {info['cudnn']}")
    return ", ".join(parts)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/gpu_proof.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cpu", action="store_true", help="tiny CPU variant (automatic without a CUDA GPU)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan (GPU unless --cpu); run nothing"
    )
    parser.add_argument(
        "--steps", default=",".join(STEPS), help=f"comma-separated subset of {', '.join(STEPS)}"
    )
    parser.add_argument(
        "--out", type=Path, default=REPO / "outputs" / "gpu_proof", help="parent of the timestamped folder"
    )
    parser.add_argument(
        "--copy-to", type=Path, default=None, help="copy summary.md, proof.json and the tarball"
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="receipts root (images/, jsons/)")
    parser.add_argument("--train-minutes", type=float, default=2.0, help="bf16 receipts training budget")
    parser.add_argument("--fp32-minutes", type=float, default=1.0, help="fp32 receipts training budget")
    parser.add_argument(
        "--budget-minutes",
        type=float,
        default=None,
        help=f"bound on the whole proof (default: {GPU_BUDGET_MINUTES:g} on a GPU, none with --cpu)",
    )
    args = parser.parse_args(argv)
    args.selected = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = sorted(set(args.selected) - set(STEPS))
    if unknown:
        parser.error(f"--steps: unknown {unknown}; expected a subset of {list(STEPS)}")
    for option, value in (("--train-minutes", args.train_minutes), ("--fp32-minutes", args.fp32_minutes)):
        if not 1 <= value <= 10:  # a training run of at most 10 minutes
            parser.error(f"{option}: expected 1 to 10 minutes, got {value:g}")
    return args


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: 0 when the proof passed (or the dry run printed), 1 otherwise, 2 on bad arguments."""
    args = _arguments(argv)
    started_s = time.monotonic()
    minutes = {"train_bf16": args.train_minutes, "train_fp32": args.fp32_minutes}
    if args.dry_run:  # --cpu: this process never imports torch
        budget = (
            args.budget_minutes
            if args.budget_minutes is not None
            else (None if args.cpu else GPU_BUDGET_MINUTES)
        )
        plan = Plan(args.out / "<timestamp>", not args.cpu, args.data.resolve(), minutes)
        _say(plan_text(plan, args.selected, budget))
        return 0
    cuda = not args.cpu and _cuda_available()
    if not cuda and not args.cpu:
        _say(
            "no CUDA GPU visible: running the tiny CPU variant (sanitizer steps skipped); "
            "nothing here proves the GPU"
        )
    if cuda and not (args.data / "jsons").is_dir():
        sys.stderr.write(
            f"scripts/gpu_proof.sh: --data: no receipts at {args.data} (expected images/, jsons/)\n"
        )
        return 2
    budget = (
        args.budget_minutes if args.budget_minutes is not None else (GPU_BUDGET_MINUTES if cuda else None)
    )
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d_%H-%M-%S")
    out = args.out / started
    out.mkdir(parents=True, exist_ok=True)
    runner = Runner(out, None if budget is None else started_s + budget * 60)
    plan = Plan(out, cuda, args.data.resolve(), minutes)
    _say(f"output: {out}" + ("" if budget is None else f"; time budget {budget:g} min"))
    header = {
        "started": started,
        "mode": "gpu" if cuda else "cpu",
        "machine": _machine(cuda),
        "command": " ".join(["scripts/gpu_proof.sh", *(argv if argv is not None else sys.argv[1:])]),
        "budget_minutes": budget,
    }

    def write(results: list[StepResult], finished: bool) -> str:
        """proof.json and summary.md of the steps so far (verdict ``running`` until the end)."""
        steps = [r.to_dict() for r in results]
        verdict = checks.verdict(steps, cuda)
        report = {
            **header,
            "finished": datetime.now(timezone.utc).strftime("%Y-%m-%d_%H-%M-%S") if finished else None,
            "verdict": verdict if finished else "running",
            "minutes": round((time.monotonic() - started_s) / 60, 1),
            "steps": steps,
        }
        atomic_write_json(out / "proof.json", report)
        atomic_write_text(out / "summary.md", checks.markdown_summary(report))
        return verdict

    # Written after every phase, so a proof stopped half-way still leaves what it found.
    results = run_phases(plan, runner, args.selected, on_phase=lambda so_far: write(so_far, finished=False))
    verdict = write(results, finished=True)
    tarball = pack(out)
    if args.copy_to is not None:
        args.copy_to.mkdir(parents=True, exist_ok=True)
        for path in (out / "summary.md", out / "proof.json", tarball):
            shutil.copy2(path, args.copy_to / path.name)
    _say(f"{verdict.upper()}: {out / 'summary.md'} (files: {tarball})")
    return 0 if verdict == "pass" else 1
