"""Triage end to end on the CPU with the real runner: injected faults, crash bundles, replay, profiling."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from omegaconf import DictConfig

from ocr.debug import replay
from ocr.debug.inject import InjectedFaultError
from ocr.models.loss.checks import LossInputError
from ocr.utils.errors import NonFiniteLossError

pytestmark = pytest.mark.slow  # end to end: real runners on tiny runs, a minute or more on 2 cores

EXTRA = [
    "logger=csv",
    "trainer.limit_val_batches=1",
    "test_after_fit=false",
]


@pytest.fixture(scope="module")
def runner(runner_module: Callable[[str], ModuleType]) -> ModuleType:
    return runner_module("train")


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("triage_data") / "synthetic"


@pytest.fixture
def make_cfg(
    compose_cfg: Callable[[str, list[str], Path], DictConfig], tiny_run: list[str], data_root: Path
) -> Callable[[Path, list[str]], DictConfig]:
    def make(run: Path, overrides: list[str]) -> DictConfig:
        return compose_cfg("train", [*tiny_run, *EXTRA, f"data.root={data_root}", *overrides], run)

    return make


def _assert_bundle(run: Path, exception_name: str) -> dict:
    assert exception_name in (run / ".FAILURE").read_text()
    crash = run / "crash"
    for name in ("batch.pt", "config.yaml", "environment.json", "traceback.txt", "rng.pt"):
        assert (crash / name).is_file(), name
    assert json.loads((run / "preflight.json").read_text())["verdict"] in ("ok", "warn")
    state = json.loads((crash / "state.json").read_text())
    assert state["exception_type"].endswith(exception_name)
    return state


def test_injected_exception_bundle_and_replay(
    runner: ModuleType, make_cfg: Callable[[Path, list[str]], DictConfig], tmp_path: Path
) -> None:
    cfg = make_cfg(tmp_path, ["trainer.max_steps=3", "debug=inject", "callbacks.inject.kind=exception"])
    with pytest.raises(InjectedFaultError):
        runner.train(cfg)
    state = _assert_bundle(tmp_path, "InjectedFaultError")
    assert state["global_step"] == 1 and state["batch_shapes"]["images"] == [2, 3, 64, 64]
    assert replay.main([str(tmp_path / "crash"), "--device", "cpu"]) == replay.EXIT_REPRODUCED


def test_nan_loss_bundle_names_step_and_replay_reproduces(
    runner: ModuleType, make_cfg: Callable[[Path, list[str]], DictConfig], tmp_path: Path
) -> None:
    cfg = make_cfg(
        tmp_path,
        [
            "trainer.max_steps=3",
            "debug=inject",
            "callbacks.inject.kind=nan_loss",
            "callbacks.inject.step=1",
            "callbacks.guard.check_every_n_steps=1",
        ],
    )
    with pytest.raises(NonFiniteLossError):
        runner.train(cfg)
    state = _assert_bundle(tmp_path, "NonFiniteLossError")
    assert state["first_bad_step"] == 1
    assert replay.main([str(tmp_path), "--device", "cpu"]) == replay.EXIT_REPRODUCED


def test_a_divergence_from_a_huge_learning_rate_replays_from_the_kept_weights(
    runner: ModuleType,
    make_cfg: Callable[[Path, list[str]], DictConfig],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """optimizer.lr=1e6: the bundle replayed as NOT REPRODUCED from fresh weights; it keeps the run's."""
    cfg = make_cfg(tmp_path, ["trainer.max_steps=4", "optimizer.lr=1e6"])
    with pytest.raises((NonFiniteLossError, LossInputError)):  # on the CPU the loss's own check sees it
        runner.train(cfg)
    state = json.loads((tmp_path / "crash" / "state.json").read_text())
    assert state["weights_file"] == "weights.pt"
    capsys.readouterr()
    assert replay.main([str(tmp_path), "--device", "cpu"]) == replay.EXIT_REPRODUCED
    assert "model: the weights the run had at the failure" in capsys.readouterr().out
    assert replay.main([str(tmp_path), "--device", "cpu", "--weights", "fresh"]) == replay.EXIT_CLEAN


def test_stall_dumps_stacks_and_run_finishes(
    runner: ModuleType, make_cfg: Callable[[Path, list[str]], DictConfig], tmp_path: Path
) -> None:
    cfg = make_cfg(
        tmp_path,
        [
            "trainer.max_steps=2",
            "debug=inject",
            "callbacks.inject.kind=stall",
            "callbacks.inject.stall_s=3",
            "callbacks.stall_watchdog.timeout_s=1",
        ],
    )
    runner.train(cfg)
    assert (tmp_path / ".SUCCESS").is_file()
    # Start-up (data generation) may already exceed the 1 s timeout: look for the dump of the stalled step.
    dumps = [p.read_text() for p in sorted(tmp_path.glob("stall-*.txt"))]
    assert any("last progress: train step 1" in d and "apply_fault" in d for d in dumps), dumps


def test_profile_writes_trace_and_table(
    runner: ModuleType, make_cfg: Callable[[Path, list[str]], DictConfig], tmp_path: Path
) -> None:
    # Fewer steps than the overlay's default schedule, to keep the test short.
    runner.train(
        make_cfg(
            tmp_path,
            [
                "debug=profile",
                "trainer.max_steps=3",
                "trainer.profiler.wait=0",
                "trainer.profiler.warmup=1",
                "trainer.profiler.active=2",
            ],
        )
    )
    profile = tmp_path / "profile"
    traces = list(profile.glob("*.pt.trace.json"))
    assert traces and json.loads(traces[0].read_text())["traceEvents"]
    table = (profile / "top_ops.txt").read_text()
    assert "by CPU time" in table and "by CPU memory" in table and "aten::" in table
