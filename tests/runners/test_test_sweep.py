"""runners/test.py -m over postprocess.*: one forward pass per image for the whole sweep, a table sorted by
hmean with the best overrides, and cached scores equal to uncached ones."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from ocr.lightning_modules.detection_module import DetectionModule
from tests.helpers.tiny_checkpoint import tiny_checkpoint

Compose = Callable[[str, list[str], Path], DictConfig]
Runner = Callable[[str], ModuleType]

SWEEP = ["postprocess.thresh=0.2,0.6", "postprocess.box_thresh=0.3,0.7"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_run: list[str]) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt"), tiny_run)


def _count_forward(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Images passed through the network, one entry per forward call."""
    calls: list[int] = []
    forward = DetectionModule.forward

    def counting(self: DetectionModule, images):  # type: ignore[no-untyped-def]
        calls.append(int(images.shape[0]))
        return forward(self, images)

    monkeypatch.setattr(DetectionModule, "forward", counting)
    return calls


def _multirun(runner_module: Runner, monkeypatch: pytest.MonkeyPatch, overrides: list[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["runners/test.py", "-m", *overrides])
    main = runner_module("test").evaluate.main  # the run shell's process: Hydra's command line, then the run
    GlobalHydra.instance().clear()
    try:
        main()
    finally:
        GlobalHydra.instance().clear()


def test_a_2x2_sweep_runs_the_network_once_per_image_and_ranks_the_settings(
    tmp_path: Path,
    checkpoint: Path,
    tiny_run: list[str],
    compose_cfg: Compose,
    runner_module: Runner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = [*tiny_run, f"data.root={tmp_path / 'data'}", f"ckpt={checkpoint}", "split=val"]
    sweep_dir = tmp_path / "sweep"
    calls = _count_forward(monkeypatch)
    _multirun(
        runner_module, monkeypatch, [*data, *SWEEP, f"hydra.sweep.dir={sweep_dir}", "report.enabled=false"]
    )

    num_val = 3  # TINY_RUN: data.synthetic.num_val=3
    assert sum(calls) == num_val, f"forward passes per batch: {calls}"
    summary = json.loads((sweep_dir / "sweep_summary.json").read_text())
    rows = summary["rows"]
    assert len(rows) == 4 and all(r["status"] == "completed" for r in rows)
    hmeans = [r["hmean"] for r in rows]
    assert hmeans == sorted(hmeans, reverse=True)
    assert summary["swept"] == ["postprocess.thresh", "postprocess.box_thresh"]
    best = summary["best_command"]
    # The best settings on the test split: the sweep's split=val and report.enabled=false are left out.
    kept = [o for o in rows[0]["overrides"] if not o.startswith(("split=", "report.enabled="))]
    assert best.startswith("uv run runners/test.py ") and all(o in best for o in kept)
    assert " split=" not in best and "report.enabled" not in best
    # The log is named after the runner's module: test.log from the command line, here the imported name.
    logs = [next((sweep_dir / str(job)).glob("*.log")).read_text() for job in range(4)]
    assert "prob cache miss: 0 images read, 3 computed" in logs[0]
    assert all("prob cache hit: 3 images read, 0 computed" in log for log in logs[1:])
    table = (sweep_dir / "sweep_summary.md").read_text()
    assert table.count("| completed |") == 4 and "Best: `uv run runners/test.py" in table

    # The same setting without the cache scores the same.
    best_settings = [o for o in rows[0]["overrides"] if o.startswith("postprocess.")]
    cfg = compose_cfg("test", [*data, *best_settings], tmp_path / "single")
    calls.clear()
    metrics = runner_module("test").evaluate(cfg)
    assert sum(calls) == num_val  # a single run leaves the cache off by default
    assert metrics["val/hmean"] == rows[0]["hmean"]
    assert metrics["val/precision"] == rows[0]["precision"] and metrics["val/recall"] == rows[0]["recall"]
    # The run's breakdown of the score (errors.json) agrees with the metric.
    errors = json.loads((tmp_path / "single" / "errors.json").read_text())
    assert errors["totals"]["hmean"] == pytest.approx(metrics["val/hmean"], abs=1e-6)
    assert len(errors["images"]) == num_val and (tmp_path / "single" / "errors_buckets.csv").is_file()
