"""scripts/gpu_proof.sh: its CPU mode end to end, the GPU plan (dry run, composed configs, its time), and
the driver's own verdicts (a step killed by its timeout fails; a spent budget fails what it leaves out)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from ocr.run.config import compose_config
from ocr.run.faults import EXIT_CUDA_FAULT
from tests.gpu_proof import run as gpu_proof
from tests.gpu_proof.checks import StepResult
from tests.gpu_proof.steps import GPU_ESTIMATE_S, PHASES, STEPS, TESTS, Plan, Step, StepRun
from tests.helpers.paths import REPO_ROOT

MINUTES = {"train_bf16": 2.0, "train_fp32": 1.0}


@pytest.mark.slow  # over 20 s on 2 busy cores
def test_cpu_mode_writes_the_proof(tmp_path: Path) -> None:
    steps = "sanitizer_memcheck,sanitizer_bad_index,nan_loss,bad_index,benchmark"
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(
        [
            "bash",
            str(REPO_ROOT / "scripts" / "gpu_proof.sh"),
            *(
                "--cpu",
                "--steps",
                steps,
                "--out",
                str(tmp_path / "proof"),
                "--copy-to",
                str(tmp_path / "back"),
            ),
        ],
        cwd=tmp_path,  # the script finds the repository itself
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (out,) = (tmp_path / "proof").glob("*/proof.json")
    report = json.loads(out.read_text())
    assert report["mode"] == "cpu" and report["verdict"] == "pass" and report["budget_minutes"] is None
    steps_run = {step["name"]: step for step in report["steps"]}
    assert {name: step["status"] for name, step in steps_run.items()} == {
        "bad_index": "pass",
        "nan_loss": "pass",
        "sanitizer_memcheck": "skipped",
        "sanitizer_bad_index": "skipped",
        "benchmark": "pass",
    }
    assert "needs a CUDA GPU" in steps_run["sanitizer_memcheck"]["details"]["skipped"]
    nan = steps_run["nan_loss"]
    assert (
        nan["details"]["exception"].endswith("NonFiniteLossError") and nan["details"]["first_bad_step"] == 1
    )
    assert nan["details"]["cuda_fault"] is False and nan["exit_code"] == 1
    bad = steps_run["bad_index"]  # the cuda_fault injection stands for the device-side assert on a CPU
    assert bad["exit_code"] == EXIT_CUDA_FAULT and bad["details"]["exit_s_after_fault"] <= 10
    assert bad["details"]["last_line_ours"] and bad["details"]["batch_saved"]
    bench = steps_run["benchmark"]
    assert bench["exit_code"] == 0 and "| variant | ceiling img/s |" in Path(bench["log"]).read_text()
    assert bench["details"]["fp32"].startswith("ceiling ") and "CUDA only" in bench["details"]["compile"]
    summary = (out.parent / "summary.md").read_text()
    assert "callbacks.inject.kind=nan_loss | pass |" in summary and "SKIPPED" in result.stdout
    assert "| callbacks.inject.kind=cuda_fault | pass | 84 |" in summary
    assert sorted(p.name for p in (tmp_path / "back").iterdir()) == [
        "proof.json",
        "proof_files.tar.gz",
        "summary.md",
    ]
    with tarfile.open(tmp_path / "back" / "proof_files.tar.gz") as archive:
        names = archive.getnames()
    assert {"logs/bad_index.log", "bad_index/crash/fault.json", "benchmark/benchmark_gpu.json"} <= set(names)
    assert not [n for n in names if n.endswith((".ckpt", ".pt", ".jpg"))]


def test_a_spent_budget_fails_the_steps_it_leaves_out(tmp_path: Path) -> None:
    # --cpu: no torch import in this process; a zero budget runs no step, so this takes no time.
    code = gpu_proof.main(
        ["--cpu", "--steps", "doctor,train_fp32", "--budget-minutes", "0", "--out", str(tmp_path)]
    )
    assert code == 1
    (out,) = tmp_path.glob("*/proof.json")
    report = json.loads(out.read_text())
    assert report["verdict"] == "fail" and report["budget_minutes"] == 0 and report["finished"]
    problems = {step["name"]: (step["status"], step["details"].get("problem")) for step in report["steps"]}
    assert problems["doctor"][0] == "fail" and "left of the --budget-minutes budget" in problems["doctor"][1]
    assert problems["train_fp32"][0] == "fail"
    assert not (out.parent / "logs").exists()  # nothing was started
    summary = (out.parent / "summary.md").read_text()
    assert "(tiny, CPU) | fail |" in summary and "it proves nothing about a GPU" in summary


def test_a_training_budget_over_ten_minutes_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        gpu_proof.main(["--cpu", "--train-minutes", "12"])
    assert exit_info.value.code == 2
    assert "--train-minutes: expected 1 to 10 minutes, got 12" in capsys.readouterr().err


def _check_passes(done: StepRun) -> tuple[bool, dict]:
    return True, {"figure": 1}


def test_a_step_killed_by_its_timeout_fails_whatever_it_left(tmp_path: Path) -> None:
    runner = gpu_proof.Runner(tmp_path, deadline=None)
    sleeper = Step(
        "sleeper", "t", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, _check_passes, 1
    )
    quick = Step("quick", "t", [sys.executable, "-c", "print('done')"], tmp_path, _check_passes, 60)
    start = time.monotonic()
    slow_run, quick_run = runner.run([sleeper, quick])  # side by side
    assert time.monotonic() - start < 30
    assert slow_run.timed_out and not quick_run.timed_out and quick_run.exit_code == 0
    assert "timed out after 1 s: killed" in (tmp_path / "logs" / "sleeper.log").read_text()
    killed = gpu_proof.judge(sleeper, slow_run)
    assert killed.status == "fail" and "killed by its timeout" in killed.details["problem"]
    assert gpu_proof.judge(quick, quick_run).status == "pass"


def test_the_gpu_plan_fits_nine_minutes_in_value_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_proof.main(["--dry-run", "--out", "/nonexistent"]) == 0  # runs nothing, writes nothing
    text = capsys.readouterr().out
    estimated = float(text.split("estimated: ")[1].split(" min")[0])
    assert estimated <= 9 and "of a 9-minute budget" in text
    # By value: a step runs before a more valuable one only side by side with steps that take longer
    # (the sanitizer runs beside the proof run), so it never delays the more valuable one.
    value = {name: i for i, name in enumerate(STEPS)}
    for k, phase in enumerate(PHASES):
        later = [value[n] for p in PHASES[k + 1 :] for n in p if n in value]
        early = [n for n in phase if later and value.get(n, -1) > min(later)]
        in_order = [n for n in phase if n in value and n not in early]
        if early:
            assert max(GPU_ESTIMATE_S[n] for n in early) < max(GPU_ESTIMATE_S[n] for n in in_order), phase
    for timing in ("benchmark", "train_bf16", "train_fp32"):  # alone: nothing distorts them
        assert (timing,) in PHASES
    plan = Plan(Path("/proof"), True, Path("/receipts"), MINUTES)
    bench = plan.build("benchmark", {}, 540)
    assert isinstance(bench, Step) and "--workers" not in bench.argv  # the preset's, as a user runs it
    sanitizer = plan.build("sanitizer_memcheck", {}, 540)
    assert isinstance(sanitizer, Step) and int(sanitizer.env["DEBUG_STEPS"]) <= 5
    train = plan.build("train_bf16", {}, 540)
    assert isinstance(train, Step) and "time_budget_minutes=2.0" in train.argv
    # 200 s left: 60 s for the tests, 20 s after each training; bf16 gets 2/3 of the other 100 s.
    short = plan.build("train_bf16", {}, 200)
    assert isinstance(short, Step) and "time_budget_minutes=1.11" in short.argv


def test_every_gpu_runner_command_composes(tmp_path: Path) -> None:
    """The GPU plan's training and test commands are valid Hydra overrides of their runners' configs."""
    plan = Plan(tmp_path, True, tmp_path / "receipts", MINUTES)
    trained = {
        name: StepResult(name=name, title=name, status="pass", details={"kept_checkpoint": "x.ckpt"})
        for name in MINUTES
    }
    for name in [n for phase in PHASES for n in phase]:
        step = plan.build(name, trained, 540)
        assert isinstance(step, Step), name
        runner = next((a for a in step.argv if a.startswith("runners/")), None)
        if runner is None:
            continue
        overrides = [a for a in step.argv[step.argv.index(runner) + 1 :] if not a.startswith("hydra.")]
        cfg = compose_config(Path(runner).stem, overrides, tmp_path)
        assert cfg.trainer.accelerator == "gpu", name
    assert set(TESTS) <= {n for phase in PHASES for n in phase}


def test_the_tarball_holds_the_evidence_not_the_weights(tmp_path: Path) -> None:
    for name, size in [
        ("logs/train_bf16.log", 10),
        ("train_bf16/metrics.json", 10),
        ("train_bf16/curves.png", 10),
        ("train_bf16/.SUCCESS", 1),
        ("train_bf16/checkpoints/last.ckpt", 10),
        ("bad_index/crash/batch.pt", 10),
        ("train_bf16/synthetic/jsons/train.json", 10),
        ("big/huge.log", 3 * 2**20),
    ]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * size)
    with tarfile.open(gpu_proof.pack(tmp_path)) as archive:
        names = sorted(archive.getnames())
    assert names == [
        "logs/train_bf16.log",
        "train_bf16/.SUCCESS",
        "train_bf16/curves.png",
        "train_bf16/metrics.json",
    ]
