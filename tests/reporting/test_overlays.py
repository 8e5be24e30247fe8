"""Validation overlays: a tiny training run validating at steps 2 and 4 sends its overlays to TensorBoard
(read back with TensorBoard's own event reader), to W&B offline (its media folder), or, with the CSV logger
alone, writes them as PNGs per step; the drawing uses report.html's colours."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace

import cv2
import numpy as np
from omegaconf import DictConfig
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ocr.reporting.html import write_report
from ocr.reporting.overlays import ValOverlays
from ocr.utils.visualize import OUTCOME_COLOURS, draw_outcomes, outcome_css

TAGS = ["val_overlays/fixed_0", "val_overlays/fixed_1", "val_overlays/worst_0"]
LONG_SIDE = 64  # the tiny synthetic images are 96 px: drawn smaller


def _train(
    tmp_path: Path,
    logger: str,
    tiny_run: list[str],
    compose_cfg: Callable[[str, list[str], Path], DictConfig],
    runner_module: Callable[[str], ModuleType],
) -> Path:
    run = tmp_path / "run"
    overrides = [
        *tiny_run,
        f"data.root={tmp_path / 'synthetic'}",  # 3 val images
        "trainer.max_steps=4",
        "trainer.check_val_every_n_epoch=null",
        "trainer.val_check_interval=2",
        "test_after_fit=false",
        f"logger={logger}",
        "callbacks.val_overlays.num_fixed=2",
        "callbacks.val_overlays.num_worst=1",
        f"callbacks.val_overlays.long_side={LONG_SIDE}",
    ]
    runner_module("train").train(compose_cfg("train", overrides, run))
    return run


def test_tensorboard_gets_each_overlay_at_each_validation(
    tmp_path: Path, tiny_run: list[str], compose_cfg: Callable, runner_module: Callable
) -> None:
    run = _train(tmp_path, "tensorboard", tiny_run, compose_cfg, runner_module)
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    assert sorted(events.Tags()["images"]) == TAGS
    for tag in TAGS:
        images = events.Images(tag)
        assert [image.step for image in images] == [2, 4]
        assert all(max(image.width, image.height) == LONG_SIDE for image in images)
        decoded = cv2.imdecode(np.frombuffer(images[0].encoded_image_string, np.uint8), cv2.IMREAD_COLOR)
        assert decoded is not None and max(decoded.shape[:2]) == LONG_SIDE
    assert not (run / "val_images").exists()


def test_wandb_offline_run_holds_each_overlay_in_its_media_folder(
    tmp_path: Path, tiny_run: list[str], compose_cfg: Callable, runner_module: Callable
) -> None:
    run = _train(tmp_path, "wandb", tiny_run, compose_cfg, runner_module)
    (media,) = (run / "wandb").glob("offline-run-*/files/media/images/val_overlays")
    names = sorted(p.name for p in media.glob("*.png"))
    assert len(names) == len(TAGS) * 2
    for tag in TAGS:  # <slot>_<wandb's own step>_<hash>.png: one per validation
        assert sum(name.startswith(tag.split("/")[1] + "_") for name in names) == 2, names
    image = cv2.imread(str(media / names[0]))
    assert image is not None and max(image.shape[:2]) == LONG_SIDE


def test_csv_logger_alone_gets_pngs_per_validation_step(
    tmp_path: Path, tiny_run: list[str], compose_cfg: Callable, runner_module: Callable
) -> None:
    run = _train(tmp_path, "csv", tiny_run, compose_cfg, runner_module)
    assert sorted(p.name for p in (run / "val_images").iterdir()) == ["2", "4"]
    for step in ("2", "4"):
        pngs = sorted((run / "val_images" / step).glob("*.png"))
        assert [p.name.split("-")[0] for p in pngs] == ["fixed_0", "fixed_1", "worst_0"]
        assert all(max(cv2.imread(str(p)).shape[:2]) == LONG_SIDE for p in pngs)
    assert sorted(p.name for p in (run / "val_images" / "2").glob("fixed_*")) == sorted(
        p.name for p in (run / "val_images" / "4").glob("fixed_*")
    )


def test_switched_off_it_is_no_sink_of_the_pipeline() -> None:
    module = SimpleNamespace(pipeline=SimpleNamespace(sinks=[]))
    ValOverlays(enabled=False, num_fixed=4, num_worst=4, long_side=64, png_dir="x").setup(None, module, "fit")  # type: ignore[arg-type]
    assert module.pipeline.sinks == []


def test_overlays_and_report_html_share_the_outcome_colours(tmp_path: Path) -> None:
    box = [10.0, 10.0, 50.0, 10.0, 50.0, 30.0, 10.0, 30.0]
    card = {"gt": [box], "gt_outcome": ["missed"], "det": [box], "det_outcome": ["false_positive"]}
    drawn = draw_outcomes(np.zeros((40, 80, 3), np.uint8), 1.0, card, "")
    colour = OUTCOME_COLOURS["false_positive"]
    assert tuple(drawn[30, 30]) == tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((40, 80, 3), np.uint8))
    record = {"image_id": "a.png", "polygons": [], "scores": []}
    page = write_report(tmp_path, [record], tmp_path, None, "t").read_text(encoding="utf-8")
    assert outcome_css() in page and "--false_positive: " + colour in page
