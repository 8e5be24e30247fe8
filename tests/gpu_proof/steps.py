"""The steps of ``scripts/gpu_proof.sh`` and the plan that runs them (``tests.gpu_proof.run`` drives it).

Each step is a command, the folder it writes into, a timeout and a check (``tests.gpu_proof.checks``).
The plan is a list of phases, run one after the other, ordered by value; the steps of a phase run side by
side. A step whose result is a timing, or is sized by time, runs alone in its phase: the benchmark, each
training. The others (doctor, the injected faults, the compiled proof run, the sanitizer runs, the tests)
share phases, so that on a GPU the whole plan fits one 9-minute call.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.gpu_proof import checks
from tests.gpu_proof.checks import StepResult

__all__ = ["PHASES", "STEPS", "TINY_CPU_RUN", "Plan", "Step", "StepRun", "inject_overrides"]

STEPS = (  # what --steps selects, by value; a training's two tests come with it
    "doctor",
    "bad_index",
    "nan_loss",
    "proof_run",
    "benchmark",
    "sanitizer_memcheck",
    "sanitizer_bad_index",
    "train_bf16",
    "train_fp32",
)
TEST_MODES = ("competition", "upstream")
TESTS = tuple(f"{run}_test_{mode}" for run in ("train_bf16", "train_fp32") for mode in TEST_MODES)
PHASES: tuple[tuple[str, ...], ...] = (
    # No timing among them: side by side (the sanitizer runs take no wall time beyond the proof run's).
    ("doctor", "bad_index", "nan_loss", "proof_run", "sanitizer_memcheck", "sanitizer_bad_index"),
    ("benchmark",),  # a timing: alone
    ("train_bf16",),  # sized by time: alone
    ("train_fp32",),
    TESTS,
)
# Seconds each step is expected to take on an H100/H200 (estimates: the plan's arithmetic, --dry-run),
# and the most it may take (its timeout). The training runs take their minutes plus TRAIN_OVERHEAD_S.
GPU_ESTIMATE_S = {
    "doctor": 40,
    "bad_index": 45,
    "nan_loss": 45,
    "proof_run": 150,
    "sanitizer_memcheck": 90,
    "sanitizer_bad_index": 60,
    "benchmark": 90,
    **{name: 45 for name in TESTS},
}
GPU_TIMEOUT_S = {
    "doctor": 240,
    "bad_index": 180,
    "nan_loss": 180,
    "proof_run": 360,
    "sanitizer_memcheck": 240,
    "sanitizer_bad_index": 240,
    "benchmark": 300,
    **{name: 180 for name in TESTS},
}
CPU_TIMEOUT_S = 900
# A training run's time budget (time_budget_minutes) counts from its process start and keeps a reserve
# for the last checkpoint: what it takes beyond its minutes is the process's exit.
TRAIN_OVERHEAD_S = 20.0
START_UP_S = 60.0  # before fit starts (imports, data scan): what max_time does not count
TESTS_S = 60.0  # the last phase: every test side by side
NAN_STEP = {"gpu": 3, "cpu": 1}
SANITIZER_STEPS = {"sanitizer_memcheck": 5, "sanitizer_bad_index": 3}  # the smallest useful runs
BENCHMARK_GPU_ARGS = ("--steps", "30", "--warmup", "10")  # 3 timed epochs of sroie-compact at batch 16
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


def inject_overrides(kind: str, step: int) -> list[str]:
    """Overrides that inject fault ``kind`` at global step ``step`` (``configs/debug/inject.yaml``)."""
    return ["debug=inject", f"callbacks.inject.kind={kind}", f"callbacks.inject.step={step}"]


@dataclass(frozen=True)
class StepRun:
    """How one step's process ended."""

    exit_code: int
    seconds: float
    timed_out: bool
    ended_unix_s: float
    log: Path


@dataclass
class Step:
    """A command of the proof, where it writes, its timeout and its check (given the process's end)."""

    name: str
    title: str
    argv: list[str]
    where: Path
    check: Callable[[StepRun], tuple[bool, dict[str, Any]]]
    timeout_s: float
    env: dict[str, str] = field(default_factory=dict)


Built = Step | StepResult  # a step to run, or the result of one that cannot run (skipped, not run)


def skipped(name: str, title: str, why: str) -> StepResult:
    """A step left out, with the reason (on a GPU a skipped step fails the proof)."""
    return StepResult(name=name, title=title, status="skipped", details={"skipped": why})


class Plan:
    """Builds each step's command for the GPU or the tiny CPU variant.

    Args:
        out: the proof's folder (each step writes into ``out/<step>``).
        cuda: the GPU plan; else the tiny CPU variant (synthetic data, sanitizer steps skipped).
        data_root: the receipts (GPU plan).
        minutes: ``train_bf16`` and ``train_fp32`` minutes.
    """

    def __init__(self, out: Path, cuda: bool, data_root: Path, minutes: Mapping[str, float]) -> None:
        self.out = out
        self.cuda = cuda
        self.data_root = data_root
        self.minutes = dict(minutes)

    def build(self, name: str, results: Mapping[str, StepResult], time_left: float) -> Built:
        """Step ``name`` given the results so far and the seconds left (a training sizes itself by them)."""
        if name in ("train_bf16", "train_fp32"):
            return self.train(name, time_left)
        if name in TESTS:
            return self.test(name, results)
        builders: dict[str, Callable[[], Built]] = {
            "doctor": self.doctor,
            "bad_index": lambda: self.injected("bad_index"),
            "nan_loss": lambda: self.injected("nan_loss"),
            "proof_run": self.proof_run,
            "benchmark": self.benchmark,
            "sanitizer_memcheck": lambda: self.sanitizer("sanitizer_memcheck"),
            "sanitizer_bad_index": lambda: self.sanitizer("sanitizer_bad_index"),
        }
        return builders[name]()

    def timeout(self, name: str) -> float:
        return GPU_TIMEOUT_S[name] if self.cuda else CPU_TIMEOUT_S

    def data(self, run: Path) -> list[str]:
        """Overrides every training and test run of ``run`` shares: the hardware preset and the data (on the
        CPU each run generates its own tiny synthetic set: steps run side by side)."""
        if self.cuda:
            return ["hardware=h100_80gb", "data=receipts", f"data.root={self.data_root}"]
        return [*TINY_CPU_RUN, f"data.root={run / 'synthetic'}"]

    def train_argv(self, run: Path, overrides: list[str], data_of: Path | None = None) -> list[str]:
        return [
            sys.executable,
            "runners/train.py",
            f"hydra.run.dir={run}",
            "logger=csv",
            *self.data(data_of or run),
            *overrides,
        ]

    def doctor(self) -> Step:
        out = self.out / "doctor"
        argv = [sys.executable, "-m", "ocr.doctor", "--out", str(out)] + ([] if self.cuda else ["--fast"])

        def check(run: StepRun) -> tuple[bool, dict[str, Any]]:
            return checks.check_doctor(run.exit_code, out, cuda=self.cuda)

        return Step("doctor", "doctor", argv, out, check, self.timeout("doctor"))

    def injected(self, name: str) -> Step:
        """``nan_loss``, or ``bad_index`` (on the CPU the ``cuda_fault`` injection stands for the device-side
        assert, which a CPU turns into an IndexError)."""
        run = self.out / name
        step = NAN_STEP["gpu" if self.cuda else "cpu"]
        kind = name if self.cuda or name == "nan_loss" else "cuda_fault"
        overrides = [
            *inject_overrides(kind, step),
            f"trainer.max_steps={step + 6}",
            "trainer.max_epochs=-1",
            "trainer.limit_val_batches=0",
            "test_after_fit=false",
            # On CUDA the NaN weights' logits reach the guard's flag: the check every 5 steps still names
            # the injected step. The CPU keeps the loss's immediate input assert, so check every step.
            f"callbacks.guard.check_every_n_steps={5 if self.cuda else 1}",
        ]
        if name == "nan_loss":

            def check(done: StepRun) -> tuple[bool, dict[str, Any]]:
                return checks.check_nan_loss(done.exit_code, run, inject_step=step)

        else:

            def check(done: StepRun) -> tuple[bool, dict[str, Any]]:
                return checks.check_bad_index(done.exit_code, run, done.ended_unix_s, done.log)

        argv = self.train_argv(run, overrides)
        return Step(name, f"callbacks.inject.kind={kind}", argv, run, check, self.timeout(name))

    def proof_run(self) -> Step:
        run = self.out / "proof_run"
        if self.cuda:
            budget = ["trainer.max_steps=50", "trainer.check_val_every_n_epoch=5", "performance=max"]
            budget += ["callbacks.gpu_probe.warmup_steps=10"]
            title = "50 steps h100_80gb, real receipts, compiled, sync debug"
        else:
            budget = ["trainer.max_steps=4", "trainer.check_val_every_n_epoch=1"]
            budget += ["callbacks.gpu_probe.warmup_steps=1"]
            title = "proof run (tiny, CPU)"
        overrides = ["debug=gpu_probe", "trainer.max_epochs=-1", "test_after_fit=true", *budget]

        def check(done: StepRun) -> tuple[bool, dict[str, Any]]:
            return checks.check_proof_run(done.exit_code, run, cuda=self.cuda)

        return Step(
            "proof_run", title, self.train_argv(run, overrides), run, check, self.timeout("proof_run")
        )

    def sanitizer(self, name: str) -> Built:
        inject = name == "sanitizer_bad_index"
        steps = SANITIZER_STEPS[name]
        title = f"sanitizer memcheck, {steps} steps" + (", callbacks.inject.kind=bad_index" if inject else "")
        if not self.cuda:
            return skipped(name, title, "needs a CUDA GPU and compute-sanitizer (--cpu mode)")
        out = self.out / name
        overrides = ["data=receipts", f"data.root={self.data_root}"]
        overrides += inject_overrides("bad_index", 1) if inject else []
        argv = ["bash", "scripts/debug_cuda.sh", "sanitizer", "memcheck", *overrides]
        env = {"DEBUG_OUT": str(out), "DEBUG_STEPS": str(steps)}

        def check(done: StepRun) -> tuple[bool, dict[str, Any]]:
            return checks.check_sanitizer(done.exit_code, out, expect_errors=inject)

        return Step(name, title, argv, out, check, self.timeout(name), env)

    def benchmark(self) -> Step:
        out = self.out / "benchmark"
        report = out / "benchmark_gpu.json"
        argv = [sys.executable, "scripts/benchmark_gpu.py", "--json", str(report)]
        if self.cuda:  # default workers (the preset's), as a user runs it
            argv += ["--device", "cuda", "--data-root", str(self.data_root), *BENCHMARK_GPU_ARGS]
        else:
            argv += ["--device", "cpu", "--data", "synthetic", "--data-root", str(out / "synthetic")]
            argv += ["--size", "64", "--batch", "2", "--steps", "2", "--warmup", "1", "--workers", "0"]
            argv += list(TINY_CPU_RUN)

        def check(done: StepRun) -> tuple[bool, dict[str, Any]]:
            return checks.check_benchmark(done.exit_code, report, cuda=self.cuda)

        title = "benchmark_gpu.py: ceiling vs pipeline" + ("" if self.cuda else " (tiny, CPU)")
        return Step("benchmark", title, argv, out, check, self.timeout("benchmark"))

    def training_seconds(self, name: str, time_left: float) -> float:
        """Seconds of training for ``name``: its minutes, or less when the time left, minus the overheads
        of the training runs still to come and of the tests, is shorter; the runs still to come share it
        in the ratio of their minutes (the bf16 run comes before the fp32 one)."""
        pending = [name] + (["train_fp32"] if name == "train_bf16" and "train_fp32" in self.minutes else [])
        available = time_left - TESTS_S - len(pending) * TRAIN_OVERHEAD_S
        share = self.minutes[name] / sum(self.minutes[n] for n in pending)
        return min(self.minutes[name] * 60, available * share)

    def train(self, name: str, time_left: float) -> Built:
        precision = "bf16-mixed" if name == "train_bf16" else "32-true"
        run = self.out / name
        if self.cuda:
            seconds = self.training_seconds(name, time_left)
            if seconds < 60:
                why = f"not run: {max(time_left, 0):.0f} s left, under a minute of training"
                return StepResult(
                    name=name, title=f"train {precision}", status="fail", details={"problem": why}
                )
            minutes, cap = round(seconds / 60, 2), int(seconds)
            # The time budget plans the run from the process start; max_time (counted from the start of
            # fit, so later) stops a plan that overruns.
            budget = ["experiment=receipts_r18", f"time_budget_minutes={minutes}"]
            budget += [f"+trainer.max_time=00:00:{cap // 60:02d}:{cap % 60:02d}"]
            title = f"train {precision}, {minutes:g} min"
            timeout_s = seconds + START_UP_S + TRAIN_OVERHEAD_S
        else:
            budget = ["trainer.max_steps=4", "trainer.max_epochs=-1", "trainer.check_val_every_n_epoch=1"]
            title, timeout_s = f"train {precision} (tiny, CPU)", CPU_TIMEOUT_S
        overrides = [*budget, f"trainer.precision={precision}", "test_after_fit=false"]

        def check(done: StepRun) -> tuple[bool, dict[str, Any]]:
            return checks.check_train(done.exit_code, run)

        return Step(name, title, self.train_argv(run, overrides), run, check, timeout_s)

    def test(self, name: str, results: Mapping[str, StepResult]) -> Built:
        training, mode = name.split("_test_")
        title = f"test split, CLEval {mode} ({training})"
        trained = results.get(training)
        if trained is None or trained.status != "pass":
            return skipped(name, title, f"{training} did not pass")
        out = self.out / name
        argv = [
            sys.executable,
            "runners/test.py",
            f"hydra.run.dir={out}",
            f"ckpt='{trained.details['kept_checkpoint']}'",  # quoted: Hydra's grammar, whatever the path
            "split=test",
            f"metric.mode={mode}",
            *self.data(self.out / training),
        ]

        def check(done: StepRun) -> tuple[bool, dict[str, Any]]:
            return checks.check_test(done.exit_code, out)

        return Step(name, title, argv, out, check, self.timeout(name))
