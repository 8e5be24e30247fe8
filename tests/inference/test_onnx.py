"""ONNX export (parity with PyTorch at export) and prediction with backend=onnx."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from omegaconf import DictConfig

from ocr.inference.onnx_export import ParityError, ProbabilityMapNet, check_parity, parity_batch
from ocr.inference.onnx_runtime import OnnxProbabilityMap, sidecar_path
from ocr.lightning_modules.loading import module_from_checkpoint

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
    net = module_from_checkpoint(tiny_checkpoint).net
    images = torch.randn(2, 3, 64, 160)
    with torch.no_grad():
        expected = ProbabilityMapNet(net.eval())(images)
    actual = OnnxProbabilityMap(exported)(images)
    assert actual.shape == (2, 1, 64, 160)
    assert float((expected - actual).abs().max()) < 1e-4


def test_a_failed_parity_check_removes_the_model(
    tmp_path: Path, tiny_checkpoint: Path, small_images: Path, compose_cfg: Compose, runner_module: Runner
) -> None:
    overrides = [f"ckpt={tiny_checkpoint}", f"parity.image_dir={small_images}", "parity.prob_tol=-1"]
    cfg = compose_cfg("export", overrides, tmp_path)
    with pytest.raises(ParityError, match="ONNX output differs from PyTorch's, model removed: 3 images"):
        runner_module("export").export(cfg)
    assert not (tmp_path / "model.onnx").exists()


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
    net = module_from_checkpoint(tiny_checkpoint).net
    transform = EvalTransform(
        long_side=256, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), fill=0, pad_multiple=None
    )
    batch = parity_batch(sroie_root / "images" / "test", transform, 3)
    report = check_parity(net, exported, batch, postprocess, prob_tol=1e-3, polygon_tol_px=1.0)
    assert report.ok, report.summary()
    assert report.polygons_torch > 0
