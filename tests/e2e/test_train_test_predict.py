"""End to end: train a few steps on a tiny synthetic set, then test and predict from the checkpoint."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "data.synthetic.num_train=6",
    "data.synthetic.num_val=3",
    "data.synthetic.num_test=3",
    "data.synthetic.long_side=128",
    "data.train_transform.crop_size=96",
    "data.train_transform.train_long_side=128",
    "data.eval_transform.long_side=128",
    "data.batch_size=2",
    "data.eval_batch_size=2",
    "data.num_workers=0",
    "data.persistent_workers=false",
    "data.pin_memory=false",
    "hardware=cpu",
    "data.num_workers=0",
]


def _runner(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"runner_{name}", REPO / "runners" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compose(name: str, overrides: list[str], output_dir: Path):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose(config_name=name, overrides=overrides)
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
    return cfg


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("e2e")
    data_root = tmp / "synthetic"
    run = tmp / "train"
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline"}
    cmd = [
        sys.executable,
        "runners/train.py",
        *TINY,
        f"data.root={data_root}",
        f"hydra.run.dir={run}",
        "trainer.max_steps=3",
        "trainer.max_epochs=3",
        "trainer.check_val_every_n_epoch=1",
        "trainer.log_every_n_steps=1",
        "logger=csv",
    ]
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert f"Run directory: {run}" in result.stdout
    return run, data_root


def test_train_leaves_checkpoints_metadata_and_success(trained_run: tuple[Path, Path]) -> None:
    run, _ = trained_run
    assert (run / ".SUCCESS").is_file() and not (run / ".FAILURE").exists()
    assert (run / "config.yaml").is_file()
    last = run / "checkpoints" / "last.ckpt"
    assert last.is_file()
    best = [p for p in (run / "checkpoints").glob("best-hmean=*-epoch=*.ckpt")]
    assert len(best) == 1
    meta = json.loads(Path(f"{best[0]}.json").read_text())
    assert {"config", "metrics", "git_commit", "data_fingerprint", "epoch"} <= set(meta)
    assert "val/hmean" in meta["metrics"]
    metrics = (run / "csv" / "metrics.csv").read_text()
    assert "train/loss" in metrics and "val/hmean" in metrics and "lr-AdamW" in metrics
    assert json.loads((run / "metrics.json").read_text())["metrics"]["test/hmean"] >= 0.0


def test_test_runner_scores_the_checkpoint(trained_run: tuple[Path, Path], tmp_path: Path) -> None:
    run, data_root = trained_run
    cfg = _compose(
        "test", [*TINY, f"data.root={data_root}", f"ckpt={run / 'checkpoints' / 'last.ckpt'}"], tmp_path
    )
    metrics = _runner("test").evaluate(cfg)
    assert set(metrics) >= {"test/hmean", "test/precision", "test/recall"}
    assert json.loads((tmp_path / "metrics.json").read_text())["metrics"] == metrics


def test_predict_runner_writes_a_row_per_image(trained_run: tuple[Path, Path], tmp_path: Path) -> None:
    run, data_root = trained_run
    image_dir = data_root / "images" / "test"
    cfg = _compose(
        "predict",
        [
            *TINY,
            f"data.root={data_root}",
            f"ckpt={run / 'checkpoints' / 'last.ckpt'}",
            f"image_dir={image_dir}",
            "overlays=true",
        ],
        tmp_path,
    )
    paths = _runner("predict").predict(cfg)
    with open(paths["submission"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["filename"] for r in rows) == sorted(p.name for p in image_dir.iterdir())
    predictions = json.loads(Path(paths["predictions"]).read_text())
    assert set(predictions["images"]) == {r["filename"] for r in rows}
    assert len(list((tmp_path / "overlays").glob("*.png"))) == len(rows)


def test_resume_continues_from_the_saved_step(trained_run: tuple[Path, Path], tmp_path: Path) -> None:
    import torch

    run, data_root = trained_run
    overrides = [
        *TINY,
        f"data.root={data_root}",
        f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
        "trainer.max_steps=6",
        "trainer.max_epochs=3",
        "trainer.check_val_every_n_epoch=1",
        "test_after_fit=false",
        "logger=csv",
        "callbacks=none",
    ]
    _runner("train").train(_compose("train", overrides, tmp_path))
    assert (tmp_path / ".SUCCESS").is_file()
    with open(tmp_path / "csv" / "metrics.csv", newline="") as f:
        steps = [int(row["step"]) for row in csv.DictReader(f) if row["step"]]
    assert steps and min(steps) >= 3, f"resumed run restarted from step {min(steps, default=None)}"
    saved = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert saved["global_step"] == 3 and "rng_states" in saved
    assert saved["lr_schedulers"][0]["last_epoch"] == 3
