"""DBNet++ and PAN end to end at tiny sizes: train (then test), resume, and export to ONNX with parity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from omegaconf import DictConfig

from ocr.inference.onnx_runtime import sidecar_path
from tests.helpers.paths import REPO_ROOT
from tests.helpers.tiny_budget import tiny_budget

pytestmark = pytest.mark.slow  # two tiny runs per model, a resume and an export: about a minute on 2 cores

Compose = Callable[[str, list[str], Path], DictConfig]
Runner = Callable[[str], ModuleType]
STEPS = 2
TINY_BUDGET = tiny_budget(STEPS)


@pytest.mark.parametrize("name", ["dbnetpp_resnet18", "dbnet_resnet18_pan"])
def test_the_model_trains_tests_resumes_and_exports(
    name: str, tmp_path: Path, tiny_run: list[str], compose_cfg: Compose, runner_module: Runner
) -> None:
    train = runner_module("train").train
    run = tmp_path / "run"
    data_root = tmp_path / "synthetic"
    train(compose_cfg("train", [f"model={name}", *tiny_run, f"data.root={data_root}", *TINY_BUDGET], run))
    assert 0.0 <= json.loads((run / "metrics.json").read_text())["metrics"]["test/hmean"] <= 1.0

    # The command line, as a user resumes: in this process no Hydra run would carry the override.
    command = [sys.executable, "runners/train.py", f"resume={run}", f"trainer.max_steps={2 * STEPS}"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}
    result = subprocess.run(
        [*command, "test_after_fit=false"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 2 * STEPS
    assert last["ocr_config"]["model"]["decoder"]["_target_"].endswith(("ASFDecoder", "PANDecoder"))

    # Four steps find no text: the prob head is pushed towards text, as tests/helpers/tiny_checkpoint
    # does, so the parity check may compare polygons too (PAN's map may still hold none: min_polygons=0;
    # the maps are compared either way).
    last["state_dict"]["net.head.prob_head.6.weight"].mul_(30.0)
    last["state_dict"]["net.head.prob_head.6.bias"].fill_(0.5)
    texty = tmp_path / "texty.ckpt"
    torch.save(last, texty)
    export_dir = tmp_path / "export"
    images = data_root / "images" / "test"
    overrides = [f"ckpt={texty}", f"parity.image_dir={images}", "parity.min_polygons=0"]
    cfg = compose_cfg("export", overrides, export_dir)
    model = Path(runner_module("export").export(cfg)["model"])
    parity = json.loads(sidecar_path(model).read_text())["parity"]
    assert parity["ok"] and parity["prob_max_abs_diff"] <= 1e-3
    assert parity["polygons_torch"] == parity["polygons_onnx"]
