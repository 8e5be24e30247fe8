"""ONNX export (parity with PyTorch at export) and prediction with backend=onnx."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import cv2
import numpy as np
import pytest
import torch
from omegaconf import DictConfig

from ocr.checkpoints.reading import load_checkpoint
from ocr.inference.onnx_export import (
    ParityReport,
    ProbabilityMapNet,
    check_parity,
    parity_batch,
)
from ocr.inference.onnx_runtime import OnnxProbabilityMap, sidecar_path
from ocr.lightning_modules.restore import module_from_loaded

Compose = Callable[[str, list[str], Path], DictConfig]
Runner = Callable[[str], ModuleType]


@pytest.fixture(scope="module")
def exported(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_checkpoint: Path,
    small_images: Path,
    compose_cfg: Compose,
    runner_module: Runner,
) -> Path:
    """The tiny checkpoint exported by runners/export.py (parity checked on ``small_images``)."""
    run = tmp_path_factory.mktemp("export")
    cfg = compose_cfg("export", [f"ckpt={tiny_checkpoint}", f"parity.image_dir={small_images}"], run)
    return Path(runner_module("export").export(cfg)["model"])


def test_export_writes_the_model_and_a_sidecar_with_the_parity_figures(exported: Path) -> None:
    sidecar = json.loads(sidecar_path(exported).read_text())
    assert sidecar["data"]["eval_transform"]["long_side"] == 96
    assert sidecar["parity"]["ok"] and sidecar["parity"]["prob_max_abs_diff"] <= 1e-3
    assert sidecar["parity"]["polygons_torch"] == sidecar["parity"]["polygons_onnx"] > 0


def test_the_exported_model_takes_any_batch_height_and_width(exported: Path, tiny_checkpoint: Path) -> None:
    net = module_from_loaded(load_checkpoint(tiny_checkpoint), tiny_checkpoint, None).net
    images = torch.randn(2, 3, 64, 160)
    with torch.no_grad():
        expected = ProbabilityMapNet(net.eval())(images)
    actual = OnnxProbabilityMap(exported)(images)
    assert actual.shape == (2, 1, 64, 160)
    assert float((expected - actual).abs().max()) < 1e-4


def test_export_refuses_an_unknown_key_and_format(
    tmp_path: Path, tiny_checkpoint: Path, compose_cfg: Compose, runner_module: Runner
) -> None:
    with pytest.raises(Exception, match="parity.tolerance"):
        compose_cfg("export", [f"ckpt={tiny_checkpoint}", "parity.tolerance=1"], tmp_path)
    cfg = compose_cfg("export", [f"ckpt={tiny_checkpoint}", "format=tflite"], tmp_path)
    with pytest.raises(ValueError, match="format: expected one of \\('onnx',\\), got 'tflite'"):
        runner_module("export").export(cfg)


def test_predict_with_onnx_writes_what_the_pytorch_backend_writes(
    tmp_path: Path,
    exported: Path,
    tiny_checkpoint: Path,
    small_images: Path,
    tiny_run: list[str],
    compose_cfg: Compose,
    runner_module: Runner,
) -> None:
    predict = runner_module("predict").predict
    common = [*tiny_run, f"data.root={tmp_path / 'unused'}", f"image_dir={small_images}"]
    torch_paths = predict(compose_cfg("predict", [*common, f"ckpt={tiny_checkpoint}"], tmp_path / "torch"))
    onnx_paths = predict(
        compose_cfg("predict", [*common, "backend=onnx", f"onnx_model={exported}"], tmp_path / "onnx")
    )
    torch_csv = Path(torch_paths["submission"]).read_text()
    assert Path(onnx_paths["submission"]).read_text() == torch_csv
    rows = torch_csv.splitlines()[1:]
    assert len(rows) == 3 and all(row.split(",")[1] for row in rows)  # polygons compared, not empty rows


def test_backend_onnx_without_onnxruntime_says_how_to_install_it(
    tmp_path: Path,
    exported: Path,
    small_images: Path,
    tiny_run: list[str],
    compose_cfg: Compose,
    runner_module: Runner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    overrides = [*tiny_run, f"data.root={tmp_path}", f"image_dir={small_images}", "backend=onnx"]
    cfg = compose_cfg("predict", [*overrides, f"onnx_model={exported}"], tmp_path / "run")
    with pytest.raises(ModuleNotFoundError, match="uv sync --group onnx"):
        runner_module("predict").predict(cfg)


def test_onnx_matches_pytorch_on_real_receipts(
    sroie_root: Path, exported: Path, tiny_checkpoint: Path
) -> None:
    from ocr.data.transforms import EvalTransform
    from ocr.models.postprocess import DBPostProcessor

    postprocess = DBPostProcessor(
        thresh=0.3, box_thresh=0.5, unclip_ratio=1.5, max_candidates=1000, min_size=3, output="box"
    )
    net = module_from_loaded(load_checkpoint(tiny_checkpoint), tiny_checkpoint, None).net
    transform = EvalTransform(
        long_side=256, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), fill=0, pad_multiple=None
    )
    batch = parity_batch(sroie_root / "images" / "test", transform, 3)
    report = check_parity(net, exported, batch, postprocess, prob_tol=1e-3, polygon_tol_px=1.0)
    assert report.ok, report.summary()
    assert report.polygons_torch > 0


def test_a_parity_check_that_compared_no_polygon_fails(
    tmp_path: Path, exported: Path, tiny_checkpoint: Path
) -> None:
    """ "0 vs 0 polygons" used to pass: it checks nothing of the post-processing."""
    from ocr.data.transforms import EvalTransform
    from ocr.models.postprocess import DBPostProcessor

    blank = tmp_path / "blank"
    blank.mkdir()
    cv2.imwrite(str(blank / "white.png"), np.full((80, 60, 3), 255, np.uint8))
    postprocess = DBPostProcessor(
        thresh=0.3, box_thresh=1.0, unclip_ratio=1.5, max_candidates=1000, min_size=3, output="box"
    )
    net = module_from_loaded(load_checkpoint(tiny_checkpoint), tiny_checkpoint, None).net
    transform = EvalTransform(
        long_side=96, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), fill=0, pad_multiple=None
    )
    report = check_parity(
        net, exported, parity_batch(blank, transform, 3), postprocess, prob_tol=1e-3, polygon_tol_px=1.0
    )
    assert (report.polygons_torch, report.polygons_onnx) == (0, 0) and report.prob_max_abs_diff <= 1e-3
    assert not report.ok and "compared no image or no polygon" in str(report.problem)
    nothing = ParityReport(
        images=[],
        prob_max_abs_diff=0.0,
        polygons_torch=0,
        polygons_onnx=0,
        polygon_max_dist_px=0.0,
        prob_tol=1e-3,
        polygon_tol_px=1.0,
        min_polygons=0,
    )
    assert not nothing.ok  # no image compared: never a pass


def test_predict_with_onnx_takes_the_exports_settings_and_names_the_source_of_a_difference(
    tmp_path: Path,
    exported: Path,
    small_images: Path,
    compose_cfg: Compose,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from ocr.inference.onnx_runtime import onnx_settings

    overrides = ["backend=onnx", f"onnx_model={exported}", f"image_dir={small_images}", "hardware=cpu"]
    cfg = compose_cfg("predict", overrides, tmp_path)
    assert cfg.data.eval_transform.long_side != 96  # the export's (the tiny run's) is 96
    onnx_settings(cfg)
    assert cfg.data.eval_transform.long_side == 96
    given = ["data.eval_transform.long_side=128", "postprocess.thresh=0.4"]
    cfg = compose_cfg("predict", [*overrides, *given], tmp_path)
    with caplog.at_level(logging.INFO):
        onnx_settings(cfg)
    assert (cfg.data.eval_transform.long_side, cfg.postprocess.thresh) == (128, 0.4)
    assert (
        "data.eval_transform.long_side=128 (command line) differs from 96 in the ONNX export "
        "(model.onnx.json)" in caplog.text
    )
