"""runners/predict.py on awkward input and under DDP, from the shared tiny trained checkpoint."""

from __future__ import annotations

import csv
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from omegaconf import DictConfig

from ocr.data.dataset import IMAGE_SUFFIXES
from tests.helpers.paths import REPO_ROOT
from tests.helpers.report_cases import report_data
from tests.helpers.scripts import receipt_images

pytestmark = pytest.mark.slow  # end to end: real runners on tiny runs, a minute or more on 2 cores

Compose = Callable[[str, list[str], Path], DictConfig]
Runner = Callable[[str], ModuleType]
PredictCfg = Callable[..., DictConfig]
RANKS_TIMEOUT_S = 300


@pytest.fixture
def predict_cfg(trained_run: tuple[Path, Path], tiny_run: list[str], compose_cfg: Compose) -> PredictCfg:
    """``predict_cfg(image_dir, out_dir, *overrides)``: the predict config for the shared checkpoint."""
    ckpt = trained_run[0] / "checkpoints" / "last.ckpt"

    def make(image_dir: Path, out: Path, *extra: str) -> DictConfig:
        overrides = [*tiny_run, f"ckpt={ckpt}", f"image_dir={image_dir}", "overlays=true", *extra]
        return compose_cfg("predict", overrides, out)

    return make


def _rows(path: str | Path) -> dict[str, str]:
    with open(path, newline="") as f:
        return {row["filename"]: row["polygons"] for row in csv.DictReader(f)}


def test_predict_refuses_a_folder_without_images(
    predict_cfg: PredictCfg, tmp_path: Path, runner_module: Runner
) -> None:
    image_dir = tmp_path / "empty"
    image_dir.mkdir()
    (image_dir / "notes.txt").write_text("not an image")
    cfg = predict_cfg(image_dir, tmp_path / "out")
    with pytest.raises(FileNotFoundError) as err:
        runner_module("predict").predict(cfg)
    assert f"image_dir={image_dir}: no images found" in str(err.value)
    assert all(suffix in str(err.value) for suffix in IMAGE_SUFFIXES)
    assert not (tmp_path / "out" / "submission.csv").exists()
    assert (tmp_path / "out" / ".FAILURE").is_file()


def test_predict_overlays_skip_unreadable_images_and_mirror_subfolders(
    predict_cfg: PredictCfg,
    trained_run: tuple[Path, Path],
    tmp_path: Path,
    runner_module: Runner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = sorted((trained_run[1] / "images" / "test").iterdir())
    image_dir = tmp_path / "images"
    for folder, image in zip(("a", "b"), source, strict=False):  # same base name in two folders
        (image_dir / folder).mkdir(parents=True)
        shutil.copy(image, image_dir / folder / "receipt.jpg")
    (image_dir / "a" / "broken.jpg").write_bytes(source[0].read_bytes()[:100])  # a truncated JPEG
    cfg = predict_cfg(image_dir, tmp_path / "out")
    with caplog.at_level(logging.WARNING):
        paths = runner_module("predict").predict(cfg)
    assert set(_rows(paths["submission"])) == {"a/broken.jpg", "a/receipt.jpg", "b/receipt.jpg"}
    overlays = tmp_path / "out" / "overlays"
    assert sorted(p.relative_to(overlays).as_posix() for p in overlays.rglob("*.png")) == [
        "a/receipt.jpg.png",
        "b/receipt.jpg.png",
    ]
    assert "overlays: 1 of 3 images could not be read and have no overlay: a/broken.jpg" in caplog.text


def _predict_on_rank(
    rank: int, world: int, predict: Callable[[DictConfig], dict], cfg: DictConfig, out: str
) -> None:
    from lightning.pytorch.utilities import rank_zero_only

    # libgomp's thread pool does not survive fork: the parent's pool would hang the child's first op.
    torch.set_num_threads(1)
    # What a DDP launcher sets before the program starts; the group rendezvous through a file, as in
    # the metric's DDP test, so no TCP port can be taken in between.
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), NODE_RANK="0")
    rank_zero_only.rank = rank
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=world)
    paths = predict(cfg)
    Path(out, f"rank{rank}.json").write_text(json.dumps(paths))
    dist.destroy_process_group()


def test_predict_under_ddp_writes_every_image_once_on_rank_zero(
    predict_cfg: PredictCfg,
    trained_run: tuple[Path, Path],
    tmp_path: Path,
    runner_module: Runner,
) -> None:
    image_dir = trained_run[1] / "images" / "test"
    # Thresholds of 0 turn each whole image into one box, so every row depends on its own image's size.
    boxes = ("postprocess.thresh=0", "postprocess.box_thresh=0")
    predict = runner_module("predict").predict
    single = predict(predict_cfg(image_dir, tmp_path / "single", *boxes))
    ddp = predict_cfg(image_dir, tmp_path / "ddp", *boxes, "trainer.devices=2", "trainer.strategy=ddp")
    # fork reuses this process's imported torch and Lightning (spawn would re-import them per rank)
    # and hands the ranks the runner without pickling it.
    args = (2, predict, ddp, str(tmp_path))
    ranks = mp.start_processes(_predict_on_rank, args=args, nprocs=2, join=False, start_method="fork")
    deadline = time.monotonic() + RANKS_TIMEOUT_S
    while not ranks.join(timeout=1):
        if time.monotonic() > deadline:
            for process in ranks.processes:
                process.kill()
            pytest.fail(f"the two predict ranks did not finish within {RANKS_TIMEOUT_S} s")
    expected = _rows(single["submission"])
    assert len(expected) == len(list(image_dir.iterdir())) >= 3
    assert len(set(expected.values())) == len(expected) and all(expected.values())
    got = _rows(tmp_path / "ddp" / "submission.csv")
    assert list(got) == list(expected)  # every image, in the single-process order
    assert got == expected
    predictions = json.loads((tmp_path / "ddp" / "predictions.json").read_text())
    assert set(predictions["images"]) == set(expected)
    on_rank = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert on_rank[1] == {} and set(on_rank[0]) == {"submission", "predictions", "overlays", "report"}
    cards = report_data((tmp_path / "ddp" / "report.html").read_text())["cards"]
    assert [c["name"] for c in cards] == list(expected)  # every rank's images, once, in order


def test_a_file_name_that_is_not_utf8_is_written_escaped_beside_every_other_image(
    tmp_path: Path, tiny_run: list[str], tiny_checkpoint: Path
) -> None:
    """One such name used to lose the whole predict (UnicodeEncodeError while writing submission.csv)."""
    image_dir = receipt_images(tmp_path / "images", 2, 96, 10)
    odd = os.fsdecode(b"caf\xe9.png")  # a Latin-1 name: Python holds the byte as a surrogate escape
    shutil.copy(image_dir / "r0.png", image_dir / odd)
    run = tmp_path / "run"
    command = [
        sys.executable,
        "runners/predict.py",
        *tiny_run,
        f"ckpt={tiny_checkpoint}",
        f"image_dir={image_dir}",
        f"data.root={tmp_path / 'unused'}",
        f"hydra.run.dir={run}",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    console = result.stdout + result.stderr
    assert result.returncode == 0, console
    assert "Traceback" not in console and "Logging error" not in console, console
    escaped = "caf\\xe9.png"
    warnings = [line for line in console.splitlines() if "file names are not UTF-8" in line]
    assert len(warnings) == 1 and warnings[0].endswith(
        f"1 file names are not UTF-8; written with their bytes escaped: {escaped}"
    )
    rows = _rows(run / "submission.csv")
    assert list(rows) == [escaped, "r0.png", "r1.png"] and rows[escaped] == rows["r0.png"]
    assert list(json.loads((run / "predictions.json").read_text(encoding="utf-8"))["images"]) == list(rows)
