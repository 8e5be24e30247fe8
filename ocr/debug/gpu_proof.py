"""One command that proves the CUDA paths on a GPU machine: ``scripts/gpu_proof.sh [options]``.

Runs, each in its own process, and checks what each left behind (``ocr.debug.gpu_proof_checks``):

1. ``doctor``: the preflight doctor (exit 0: no check failed).
2. ``sanitizer_memcheck``: ``debug_cuda.sh sanitizer memcheck``, 20 steps: 0 errors.
3. ``sanitizer_bad_index``: the same with ``+debug.inject=bad_index``: an error naming the kernel.
4. ``proof_run``: 50 steps of ``hardware=h100_80gb`` on real receipts (their file names as image ids),
   compiled (``performance=max``), validation and test, with ``debug=gpu_probe``: ``.SUCCESS``, steady-state
   steps under ``torch.cuda.set_sync_debug_mode("error")`` except the documented syncs, peak memory of
   train/val/test, recompiles.
5. ``nan_loss``: ``+debug.inject=nan_loss``: ``NonFiniteLossError`` naming the step, ``nonfinite.json``,
   no CUDA fault.
6. ``bad_index``: ``+debug.inject=bad_index``: a crash bundle, the device-side assert seen as a CUDA fault.
7. ``benchmark``: ``scripts/benchmark_gpu.py``, the model ceiling against the real pipeline (fp32,
   bf16 + channels_last, compile) in one process: every variant measured.
8. ``train_bf16`` (``--train-minutes``, default 5) then ``runners/test.py`` on the test split in both
   CLEval modes; ``train_fp32`` (``--fp32-minutes``, default 2) and its two tests, to compare.

The whole proof is bounded by ``--budget-minutes`` (default 19 on a GPU): each step's timeout is cut to
the time left; the training runs' ``max_time`` is their minutes or, when less time is left, what remains
after their start-up and tests, shared in the ratio of their minutes; a step with no time left fails as
not run. Writes ``proof.json`` and ``summary.md`` (after every step, atomically; each step's exit status,
figures and console log) into ``<out>/<timestamp>/``, with each step's run directory. Exit status 0 when
no step failed. ``--cpu`` (automatic without a CUDA GPU) runs the same steps at tiny sizes on synthetic
data, with the sanitizer steps skipped, to test the script.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ocr.debug import gpu_proof_checks as checks
from ocr.debug.gpu_proof_checks import StepResult
from ocr.utils.io import atomic_write_json, atomic_write_text

__all__ = ["STEPS", "TINY_CPU_RUN", "main", "run_proof"]

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "datasets" / "sroie-compact"
STEPS = (
    "doctor",
    "sanitizer_memcheck",
    "sanitizer_bad_index",
    "proof_run",
    "nan_loss",
    "bad_index",
    "benchmark",
    "train_bf16",
    "train_fp32",
)
# Tiny synthetic CPU run (images <= 128 px, no workers): the --cpu variant, and the test suite's runs.
TINY_CPU_RUN = (
    "data.synthetic.num_train=6",
    "data.synthetic.num_val=3",
    "data.synthetic.num_test=3",
    "data.synthetic.long_side=96",
    "data.train_transform.crop_size=64",
    "data.train_transform.train_long_side=96",
    "data.eval_transform.long_side=96",
    "data.targets.min_text_size=2",  # text is ~3 px high at 96 px: keep it trainable
    "data.batch_size=2",
    "data.eval_batch_size=2",
    "data.num_workers=0",
    "data.persistent_workers=false",
    "data.pin_memory=false",
    "hardware=cpu",
    "trainer.precision=32-true",
    "trainer.check_val_every_n_epoch=1",
    "trainer.enable_model_summary=false",
)
NAN_STEP = {"gpu": 3, "cpu": 1}
TIMEOUT_S = 900
GPU_BUDGET_MINUTES = 19.0  # issue 14: the proof finishes in under 20 minutes on one H100/H200
MIN_STEP_S = 30.0  # a step started with less time left than this could not finish: not run
# Time kept back from a training budget (max_time) for what follows it: the process start, the data scan
# and the last checkpoint of a training run; one runners/test.py run on the test split.
TRAIN_OVERHEAD_S = 60.0
TEST_S = 60.0


class Proof:
    """Runs the steps of one proof into ``out``; ``cuda`` picks the GPU or the tiny CPU variant."""

    def __init__(
        self, out: Path, cuda: bool, data_root: Path, minutes: dict[str, float], deadline: float | None
    ) -> None:
        """``deadline``: ``time.monotonic()`` by which every step must have ended (None: no bound)."""
        self.out = out
        self.cuda = cuda
        self.data_root = data_root
        self.minutes = minutes
        self.deadline = deadline
        self.steps: list[str] = list(STEPS)  # the selected steps (run_proof sets them)
        python_path = os.environ.get("PYTHONPATH")
        self.env = {
            **os.environ,
            "PYTHON": sys.executable,  # debug_cuda.sh then uses this interpreter, not uv
            "PYTHONPATH": str(REPO) + (os.pathsep + python_path if python_path else ""),
            "WANDB_MODE": "offline",
            "NO_ALBUMENTATIONS_UPDATE": "1",
            "HF_HUB_OFFLINE": "1",
        }

    def data(self) -> list[str]:
        """Overrides every training and test run shares: the hardware preset and the data."""
        if self.cuda:
            return ["hardware=h100_80gb", "data=receipts", f"data.root={self.data_root}"]
        return [*TINY_CPU_RUN, f"data.root={self.out / 'synthetic'}"]

    def time_left(self) -> float:
        """Seconds left before the deadline (infinite without one)."""
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def _run(
        self, name: str, argv: list[str], timeout_s: float, env: dict[str, str], log_path: Path
    ) -> tuple[int, float]:
        """Run ``argv`` in the repository, console to ``log_path``: (exit status, seconds)."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        _say(f"{name}: {' '.join(argv)}  (log: {log_path})")
        start = time.perf_counter()
        with log_path.open("w") as log_file:
            # Its own process group: a timeout ends the step's DataLoader workers and the program under
            # compute-sanitizer too, so nothing keeps the GPU busy into the next step.
            process = subprocess.Popen(
                argv,
                cwd=REPO,
                env={**self.env, **env},
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                log_file.write(f"\n[gpu_proof] timed out after {timeout_s:.0f} s\n")
                code = 124
            except BaseException:  # Ctrl-C reaches only this process: the step's group is ended with it
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise
        return code, time.perf_counter() - start

    def step(
        self,
        name: str,
        title: str,
        argv: list[str],
        where: Path,
        check: Callable[[int, Path], tuple[bool, dict[str, Any]]],
        timeout_s: float = TIMEOUT_S,
        env: dict[str, str] | None = None,
    ) -> StepResult:
        """Run one step, its timeout cut to the time left, and judge it with ``check(exit status, where)``."""
        left = self.time_left()
        if left < MIN_STEP_S:
            return self.out_of_time(name, title)
        log_path = self.out / "logs" / f"{name}.log"
        code, seconds = self._run(name, argv, min(timeout_s, left), env or {}, log_path)
        passed, details = check(code, where)
        if code == 124:
            details = {
                **details,
                "problem": f"timed out after {min(timeout_s, left):.0f} s (log: {log_path})",
            }
        result = StepResult(
            name=name,
            title=title,
            status="pass" if passed else "fail",
            seconds=round(seconds, 1),
            exit_code=code,
            run_dir=str(where),
            log=str(log_path),
            command=" ".join(argv),
            details=details,
        )
        _say(f"{name}: {result.status.upper()} {checks.figures(details)}")
        return result

    def train_argv(self, run_dir: Path, overrides: list[str]) -> list[str]:
        return [
            sys.executable,
            "runners/train.py",
            f"hydra.run.dir={run_dir}",
            "logger=csv",
            *self.data(),
            *overrides,
        ]

    def out_of_time(self, name: str, title: str) -> StepResult:
        """A step that cannot run in the time left: failed, as the proof is then incomplete."""
        why = f"not run: {max(self.time_left(), 0):.0f} s left of the --budget-minutes budget"
        _say(f"{name}: FAIL ({why})")
        return StepResult(name=name, title=title, status="fail", details={"problem": why})

    def doctor(self) -> list[StepResult]:
        out = self.out / "doctor"
        argv = [sys.executable, "-m", "ocr.doctor", "--out", str(out)] + ([] if self.cuda else ["--fast"])
        return [self.step("doctor", "doctor", argv, out, checks.check_doctor, timeout_s=600)]

    def sanitizer(self, name: str, inject: bool) -> list[StepResult]:
        title = "sanitizer memcheck, 20 steps" + (", +debug.inject=bad_index" if inject else "")
        if not self.cuda:
            return [_skipped(name, title, "needs a CUDA GPU and compute-sanitizer (--cpu mode)")]
        out = self.out / name
        overrides = ["data=receipts", f"data.root={self.data_root}"]
        overrides += ["+debug.inject=bad_index", "+debug.inject_step=2"] if inject else []
        argv = ["bash", "scripts/debug_cuda.sh", "sanitizer", "memcheck", *overrides]
        env = {"DEBUG_OUT": str(out), "DEBUG_STEPS": "20"}

        def check(code: int, where: Path) -> tuple[bool, dict[str, Any]]:
            return checks.check_sanitizer(code, where, expect_errors=inject)

        return [self.step(name, title, argv, out, check, timeout_s=600, env=env)]

    def proof_run(self) -> list[StepResult]:
        run = self.out / "proof_run"
        if self.cuda:
            budget = ["trainer.max_steps=50", "trainer.check_val_every_n_epoch=5", "performance=max"]
            budget += ["callbacks.gpu_probe.warmup_steps=10"]
        else:
            budget = [
                "trainer.max_steps=4",
                "trainer.check_val_every_n_epoch=1",
                "callbacks.gpu_probe.warmup_steps=1",
            ]
        overrides = ["debug=gpu_probe", "trainer.max_epochs=-1", "test_after_fit=true", *budget]

        def check(code: int, where: Path) -> tuple[bool, dict[str, Any]]:
            return checks.check_proof_run(code, where, cuda=self.cuda)

        title = (
            "50 steps h100_80gb, real receipts, compiled, sync debug"
            if self.cuda
            else "proof run (tiny, CPU)"
        )
        return [self.step("proof_run", title, self.train_argv(run, overrides), run, check)]

    def injected(self, kind: str) -> list[StepResult]:
        run = self.out / kind
        step = NAN_STEP["gpu" if self.cuda else "cpu"]
        overrides = [
            f"+debug.inject={kind}",
            f"+debug.inject_step={step}",
            f"trainer.max_steps={step + 6}",
            "trainer.max_epochs=-1",
            "trainer.limit_val_batches=0",
            "test_after_fit=false",
            # On CUDA the NaN weights' logits reach the guard's flag: the check every 5 steps still names
            # the injected step. The CPU keeps the loss's immediate input assert, so check every step.
            f"callbacks.nonfinite_guard.check_every_n_steps={5 if self.cuda else 1}",
        ]
        if kind == "nan_loss":

            def check(code: int, where: Path) -> tuple[bool, dict[str, Any]]:
                return checks.check_nan_loss(code, where, inject_step=step)

        else:

            def check(code: int, where: Path) -> tuple[bool, dict[str, Any]]:
                return checks.check_bad_index(code, where, cuda=self.cuda)

        return [self.step(kind, f"+debug.inject={kind}", self.train_argv(run, overrides), run, check)]

    def benchmark(self) -> list[StepResult]:
        out = self.out / "benchmark"
        report = out / "benchmark_gpu.json"
        argv = [sys.executable, "scripts/benchmark_gpu.py", "--json", str(report)]
        if self.cuda:
            argv += ["--device", "cuda", "--data-root", str(self.data_root)]
        else:
            argv += ["--device", "cpu", "--data", "synthetic", "--data-root", str(self.out / "synthetic")]
            argv += ["--size", "64", "--batch", "2", "--steps", "2", "--warmup", "1", "--workers", "0"]
            argv += list(TINY_CPU_RUN)

        def check(code: int, where: Path) -> tuple[bool, dict[str, Any]]:
            return checks.check_benchmark(code, where / report.name, cuda=self.cuda)

        title = "benchmark_gpu.py: ceiling vs pipeline" + ("" if self.cuda else " (tiny, CPU)")
        return [self.step("benchmark", title, argv, out, check, timeout_s=600)]

    def training_seconds(self, name: str) -> float:
        """The ``max_time`` of training run ``name``: its ``--*-minutes``, or less when the time left minus
        the runs' overheads and tests is shorter; then the training runs still to come share what is
        left in the ratio of their minutes (the bf16 run before the fp32 one)."""
        pending = [name] + (["train_fp32"] if name == "train_bf16" and "train_fp32" in self.steps else [])
        available = self.time_left() - len(pending) * (TRAIN_OVERHEAD_S + 2 * TEST_S)
        share = self.minutes[name] / sum(self.minutes[n] for n in pending)
        return min(self.minutes[name] * 60, available * share)

    def train_and_test(self, name: str, precision: str) -> list[StepResult]:
        run = self.out / name
        if self.cuda:
            seconds = self.training_seconds(name)
            if seconds < 60:
                results = [self.out_of_time(name, f"train {precision}")]
                return results + [
                    _skipped(f"{name}_test_{mode}", f"test split, CLEval {mode}", f"{name} did not run")
                    for mode in ("competition", "upstream")
                ]
            budget = [
                "experiment=receipts_r18",
                f"+trainer.max_time=00:00:{int(seconds) // 60:02d}:{int(seconds) % 60:02d}",
            ]
        else:
            budget = ["trainer.max_steps=4", "trainer.max_epochs=-1", "trainer.check_val_every_n_epoch=1"]
        overrides = [*budget, f"trainer.precision={precision}", "test_after_fit=false"]
        if self.cuda:
            title, timeout_s = f"train {precision}, {seconds / 60:.1f} min", seconds + 2 * TRAIN_OVERHEAD_S
        else:
            title, timeout_s = f"train {precision} (tiny, CPU)", TIMEOUT_S
        trained = self.step(
            name, title, self.train_argv(run, overrides), run, checks.check_train, timeout_s=timeout_s
        )
        results = [trained]
        for mode in ("competition", "upstream"):
            test_name = f"{name}_test_{mode}"
            if trained.status != "pass":
                results.append(_skipped(test_name, f"test split, CLEval {mode}", f"{name} did not pass"))
                continue
            test_dir = self.out / test_name
            argv = [
                sys.executable,
                "runners/test.py",
                f"hydra.run.dir={test_dir}",
                f"ckpt='{trained.details['best_checkpoint']}'",  # quoted: checkpoint names hold '='
                "split=test",
                f"metric.mode={mode}",
                *self.data(),
            ]
            results.append(
                self.step(test_name, f"test split, CLEval {mode} ({name})", argv, test_dir, checks.check_test)
            )
        return results


def _say(message: str) -> None:
    sys.stdout.write(f"[gpu_proof] {message}\n")
    sys.stdout.flush()


def _skipped(name: str, title: str, why: str) -> StepResult:
    _say(f"{name}: SKIPPED ({why})")
    return StepResult(name=name, title=title, status="skipped", details={"skipped": why})


def _machine(cuda: bool) -> str:
    from ocr.doctor.environment import package_versions

    parts = [
        platform.platform(),
        f"{os.cpu_count()} logical CPUs",
        f"torch {package_versions(('torch',))['torch']}",
    ]
    if cuda:  # cpu_info and cuda_info import torch: not worth it for the CPU variant
        from ocr.doctor.environment import cpu_info, cuda_info

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


def run_proof(
    proof: Proof, steps: list[str], on_step: Callable[[list[StepResult]], object]
) -> list[StepResult]:
    """Run the selected steps in the documented order; ``on_step(results so far)`` after each."""
    plan: dict[str, Callable[[], list[StepResult]]] = {
        "doctor": proof.doctor,
        "sanitizer_memcheck": lambda: proof.sanitizer("sanitizer_memcheck", inject=False),
        "sanitizer_bad_index": lambda: proof.sanitizer("sanitizer_bad_index", inject=True),
        "proof_run": proof.proof_run,
        "nan_loss": lambda: proof.injected("nan_loss"),
        "bad_index": lambda: proof.injected("bad_index"),
        "benchmark": proof.benchmark,
        "train_bf16": lambda: proof.train_and_test("train_bf16", "bf16-mixed"),
        "train_fp32": lambda: proof.train_and_test("train_fp32", "32-true"),
    }
    proof.steps = list(steps)
    results: list[StepResult] = []
    for name in STEPS:
        if name in steps:
            results += plan[name]()
            on_step(results)
    return results


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: 0 when no step failed, 1 otherwise, 2 on bad arguments."""
    parser = argparse.ArgumentParser(
        prog="scripts/gpu_proof.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cpu", action="store_true", help="tiny CPU variant (automatic without a CUDA GPU)")
    parser.add_argument(
        "--steps", default=",".join(STEPS), help=f"comma-separated subset of {', '.join(STEPS)}"
    )
    parser.add_argument(
        "--out", type=Path, default=REPO / "outputs" / "gpu_proof", help="parent of the timestamped folder"
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="receipts root (images/, jsons/)")
    parser.add_argument("--train-minutes", type=float, default=5.0, help="bf16 receipts training budget")
    parser.add_argument("--fp32-minutes", type=float, default=2.0, help="fp32 receipts training budget")
    parser.add_argument(
        "--budget-minutes",
        type=float,
        default=None,
        help=f"bound on the whole proof (default: {GPU_BUDGET_MINUTES:g} on a GPU, none with --cpu)",
    )
    args = parser.parse_args(argv)
    started_s = time.monotonic()
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        parser.error(f"--steps: unknown {unknown}; expected a subset of {list(STEPS)}")
    for option, value in (("--train-minutes", args.train_minutes), ("--fp32-minutes", args.fp32_minutes)):
        if not 1 <= value <= 10:  # issue 14: a training run of at most 10 minutes
            parser.error(f"{option}: expected 1 to 10 minutes, got {value:g}")
    cuda = not args.cpu and _cuda_available()  # --cpu: this process never imports torch
    if not cuda and not args.cpu:
        _say(
            "no CUDA GPU visible: running the tiny CPU variant (sanitizer steps skipped); "
            "nothing here proves the GPU"
        )
    if cuda and not (args.data / "jsons").is_dir():
        parser.error(f"--data: no receipts at {args.data} (expected images/ and jsons/)")
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d_%H-%M-%S")
    out = args.out / started
    out.mkdir(parents=True, exist_ok=True)
    budget = (
        args.budget_minutes if args.budget_minutes is not None else (GPU_BUDGET_MINUTES if cuda else None)
    )
    minutes = {"train_bf16": args.train_minutes, "train_fp32": args.fp32_minutes}
    deadline = None if budget is None else started_s + budget * 60
    proof = Proof(out, cuda, args.data.resolve(), minutes, deadline)
    _say(f"output: {out}" + ("" if budget is None else f"; time budget {budget:g} min"))
    header = {
        "started": started,
        "mode": "gpu" if cuda else "cpu",
        "machine": _machine(cuda),
        "command": " ".join(["scripts/gpu_proof.sh", *(argv if argv is not None else sys.argv[1:])]),
        "budget_minutes": budget,
    }

    def write(results: list[StepResult], finished: bool) -> str:
        """proof.json and summary.md of the steps so far (verdict ``running`` until the last step)."""
        verdict = "fail" if any(r.status == "fail" for r in results) else "pass"
        report = {
            **header,
            "finished": datetime.now(timezone.utc).strftime("%Y-%m-%d_%H-%M-%S") if finished else None,
            "verdict": verdict if finished else "running",
            "minutes": round((time.monotonic() - started_s) / 60, 1),
            "steps": [r.to_dict() for r in results],
        }
        atomic_write_json(out / "proof.json", report)
        atomic_write_text(out / "summary.md", checks.markdown_summary(report))
        return verdict

    # Written after every step, so a proof stopped half-way still leaves what it found.
    verdict = write(run_proof(proof, steps, on_step=lambda results: write(results, finished=False)), True)
    _say(f"{verdict.upper()}: {out / 'summary.md'}")
    return 0 if verdict == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
