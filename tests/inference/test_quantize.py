"""int8 export (runners/export.py quantize=int8): the quantised model, its sidecar, the refusal of a model
that loses more hmean than the limit, and prediction with it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import onnx
import pytest
from omegaconf import DictConfig

from ocr.inference.onnx_runtime import sidecar_path
from ocr.inference.quantize import AccuracyError, AccuracyReport, CalibrationSettings
from ocr.utils.errors import ConfigValueError
from tests.helpers.receipt_fixtures import make_root

Compose = Callable[[str, list[str], Path], DictConfig]
Runner = Callable[[str], ModuleType]


def _int8_overrides(ckpt: Path, images: Path, root: Path, *more: str) -> list[str]:
    return [
        f"ckpt={ckpt}",
        f"parity.image_dir={images}",
        "quantize=int8",
        f"data_root={root}",
        "calibration.num_images=2",
        *more,
    ]


# An export (the dynamo exporter, quantisation, CLEval on the val split): about a minute on 2 busy cores.
slow = pytest.mark.slow


@pytest.fixture(scope="module")
def int8_model(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_checkpoint: Path,
    small_images: Path,
    compose_cfg: Compose,
    runner_module: Runner,
) -> Path:
    """The tiny checkpoint exported in int8, calibrated on 2 train images of a block-image dataset."""
    run = tmp_path_factory.mktemp("int8")
    root = make_root(tmp_path_factory.mktemp("blocks"))
    # Random weights: the check is the plumbing, so any drop passes here (the refusal is tested below).
    overrides = _int8_overrides(tiny_checkpoint, small_images, root, "parity.max_hmean_drop=1.0")
    return Path(runner_module("export").export(compose_cfg("export", overrides, run))["model"])


@slow
def test_int8_export_writes_a_qdq_model_and_records_quantisation_and_calibration(int8_model: Path) -> None:
    ops = {node.op_type for node in onnx.load(int8_model).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    assert sorted(p.name for p in int8_model.parent.iterdir() if "onnx" in p.name) == [
        "model.onnx",
        "model.onnx.json",
    ]  # the fp32 intermediate is gone
    sidecar = json.loads(sidecar_path(int8_model).read_text())
    quantization = sidecar["quantization"]
    assert (quantization["type"], quantization["format"]) == ("int8", "QDQ")
    assert "per channel" in quantization["weights"]
    calibration = quantization["calibration"]
    assert (calibration["images"], calibration["split"], calibration["method"]) == (2, "train", "minmax")
    accuracy = sidecar["parity"]["accuracy"]
    assert accuracy["split"] == "val" and accuracy["images"] == 3 and accuracy["ok"]
    assert set(accuracy["hmean_fp32"]) == set(accuracy["hmean_int8"]) == {"competition", "upstream"}
    assert accuracy["max_hmean_drop"] == 1.0
    assert sidecar["parity"]["ok"]  # the fp32 export's map check ran first


@slow
def test_predict_backend_onnx_runs_the_int8_model_as_it_is(
    tmp_path: Path,
    int8_model: Path,
    small_images: Path,
    tiny_run: list[str],
    compose_cfg: Compose,
    runner_module: Runner,
) -> None:
    overrides = [*tiny_run, f"data.root={tmp_path / 'unused'}", f"image_dir={small_images}"]
    cfg = compose_cfg("predict", [*overrides, "backend=onnx", f"onnx_model={int8_model}"], tmp_path)
    paths = runner_module("predict").predict(cfg)
    assert len(Path(paths["submission"]).read_text().splitlines()) == 4  # header and 3 images


@slow
def test_an_int8_model_that_loses_more_than_the_limit_is_refused_and_the_previous_one_kept(
    tmp_path: Path,
    tiny_checkpoint: Path,
    small_images: Path,
    compose_cfg: Compose,
    runner_module: Runner,
) -> None:
    root = make_root(tmp_path / "blocks")
    run = tmp_path / "run"
    run.mkdir()
    previous = {"model.onnx": b"previous model", "model.onnx.json": b"{}"}
    for name, data in previous.items():
        (run / name).write_bytes(data)
    # A negative limit: even a model that loses nothing loses more than that.
    overrides = _int8_overrides(tiny_checkpoint, small_images, root, "parity.max_hmean_drop=-0.5")
    cfg = compose_cfg("export", overrides, run)
    pattern = r"loses -?[\d.]+ hmean .*not written \(a previous model stays\): 3 val images: hmean"
    with pytest.raises(AccuracyError, match=pattern):
        runner_module("export").export(cfg)
    # The previous export stays whole; neither the int8 model nor its fp32 intermediate is left.
    assert {p.name: p.read_bytes() for p in run.iterdir() if "onnx" in p.name} == previous


def test_the_accuracy_report_refuses_a_drop_beyond_the_limit_in_either_mode() -> None:
    report = AccuracyReport(
        split="val",
        images=50,
        hmean_reference={"competition": 0.90, "upstream": 0.80},
        hmean_model={"competition": 0.91, "upstream": 0.79},
        polygons_reference=10,
        polygons_model=10,
        max_hmean_drop=0.005,
    )
    assert report.drop == pytest.approx(0.01)
    assert report.problem is not None and "loses 0.0100 hmean" in report.problem
    within = AccuracyReport(**{**report.__dict__, "max_hmean_drop": 0.02})
    assert within.problem is None and within.record()["ok"]
    assert AccuracyReport(**{**within.__dict__, "images": 0}).problem is not None


def test_calibration_settings_name_the_bad_key() -> None:
    with pytest.raises(ConfigValueError, match="calibration.split: expected one of"):
        CalibrationSettings(num_images=4, split="test", method="minmax")
    with pytest.raises(ConfigValueError, match="calibration.method"):
        CalibrationSettings(num_images=4, split="train", method="kl")
    with pytest.raises(ConfigValueError, match="calibration.num_images"):
        CalibrationSettings(num_images=0, split="train", method="minmax")
