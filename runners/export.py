"""Export a checkpoint to ONNX and check it against PyTorch (probability maps and polygons).

uv run runners/export.py ckpt=outputs/train/<run>/checkpoints/best.ckpt [format=onnx] [long_side=1024]

The input side, mean/std and post-processing that the parity check runs with and the sidecar records for
``predict.py backend=onnx`` are the checkpoint's unless given on the command line (``long_side=``,
``postprocess.*``). Writes ``model.onnx`` (dynamic batch, height and width) and ``model.onnx.json`` into
the run directory; ``runners/predict.py backend=onnx onnx_model=<file.onnx>`` predicts with it. A failed
parity check, or one that compared no image or no polygon, removes the model and exits 1 with the figures.

``quantize=int8`` writes a statically quantised model instead (ONNX Runtime, QDQ, per-channel weights),
calibrated on ``calibration.num_images`` images of the checkpoint's ``calibration.split``; the fp32 export
is checked as above first, then the int8 model is scored against the fp32 network with CLEval on the val
split, and refused (removed, exit 1 with the figures) if it loses more than ``parity.max_hmean_drop``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ocr.checkpoints.inference_settings import apply_stored_settings, export_long_side, stored_setting_keys
from ocr.machine.hardware import register_resolvers
from ocr.utils.cli import lightning_runner
from ocr.utils.config_types import check_config_types
from ocr.utils.errors import ConfigValueError
from ocr.utils.runner import quiet_third_party, run_dir, save_config, task_wrapper

register_resolvers()
quiet_third_party()

FORMATS = ("onnx",)
QUANTIZE = (None, "int8")
log = logging.getLogger(__name__)


@task_wrapper
def export(cfg: DictConfig) -> dict[str, str]:
    """Export ``cfg.ckpt``; returns the paths written (model, sidecar)."""
    from ocr.checkpoints.reading import load_checkpoint
    from ocr.inference.onnx_export import ParityError, check_parity, export_onnx, parity_batch, write_sidecar
    from ocr.lightning_modules.restore import CHECKPOINT_SOURCE, module_from_loaded

    check_config_types(cfg)
    if cfg.format not in FORMATS:
        raise ConfigValueError(f"format: expected one of {FORMATS}, got {cfg.format!r}")
    if cfg.quantize not in QUANTIZE:
        raise ConfigValueError(f"quantize: expected null or 'int8', got {cfg.quantize!r}")
    directory = run_dir(cfg)
    checkpoint = load_checkpoint(cfg.ckpt)
    run_config = checkpoint["ocr_config"]
    apply_stored_settings(cfg, run_config, stored_setting_keys(cfg), CHECKPOINT_SOURCE)
    save_config(cfg, directory)
    postprocess = instantiate(cfg.postprocess)
    module = module_from_loaded(checkpoint, cfg.ckpt, None)
    data = OmegaConf.create(run_config).data
    transform = _transform(cfg, data, pad_multiple=None)  # the parity batch stacks images: one square size
    image_dir = cfg.parity.image_dir or str(Path(data.root) / "images" / data.test_split)
    output = Path(cfg.output)
    fp32_path = output if cfg.quantize is None else output.with_name(f".{output.name}.fp32.onnx")
    model_path = export_onnx(module.net, fp32_path, sample_size=transform.long_side, opset=cfg.opset)
    report = check_parity(
        module.net,
        model_path,
        parity_batch(image_dir, transform, cfg.parity.num_images),
        postprocess,
        prob_tol=cfg.parity.prob_tol,
        polygon_tol_px=cfg.parity.polygon_tol_px,
        min_polygons=cfg.parity.min_polygons,
    )
    _refuse(report, model_path, ParityError)
    log.info("Parity: %s", report.summary())
    quantization = accuracy = None
    if cfg.quantize == "int8":
        quantization, accuracy = _quantize(cfg, module.net, model_path, output, data, postprocess)
        model_path = output
    sidecar = write_sidecar(
        model_path,
        transform=transform,
        postprocess=cast(dict[str, Any], OmegaConf.to_container(cfg.postprocess, resolve=True)),
        checkpoint=str(Path(cfg.ckpt).resolve()),
        parity=report,
        opset=cfg.opset,
        quantization=quantization,
        accuracy=accuracy,
    )
    print(f"parity: {report.summary()}")
    if accuracy is not None:
        print(f"int8 accuracy: {accuracy['summary']}")
    print(f"model: {model_path}\nsidecar: {sidecar}")
    return {"model": str(model_path), "sidecar": str(sidecar)}


def _quantize(
    cfg: DictConfig, net: Any, fp32_path: Path, output: Path, data: DictConfig, postprocess: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Quantise the checked fp32 export ``fp32_path`` (removed here) into ``output`` and score it against
    ``net``; returns the sidecar's ``quantization`` block and ``parity.accuracy`` block.

    Raises:
        AccuracyError: the int8 model loses more than ``parity.max_hmean_drop`` (it is removed).
    """
    from ocr.inference.onnx_runtime import INPUT_NAME
    from ocr.inference.quantize import (
        AccuracyError,
        CalibrationSettings,
        accuracy_parity,
        calibration_inputs,
        quantize_int8,
    )

    calibration = CalibrationSettings(
        num_images=cfg.calibration.num_images, split=cfg.calibration.split, method=cfg.calibration.method
    )
    root = Path(cfg.data_root or data.root)
    # Calibration and scoring see the inputs prediction makes: the checkpoint's padding rule, one image each.
    transform = _transform(cfg, data, pad_multiple=data.eval_transform.pad_multiple)
    split_dir = root / "images" / data[f"{calibration.split}_split"]
    try:
        inputs = calibration_inputs(split_dir, transform, calibration.num_images)
        quantize_int8(
            fp32_path,
            output,
            inputs,
            method=calibration.method,
            reduce_range=cfg.int8.reduce_range,
            input_name=INPUT_NAME,
        )
    finally:
        fp32_path.unlink(missing_ok=True)
    report = accuracy_parity(
        net,
        output,
        root=root,
        split=data.val_split,
        transform=transform,
        postprocess=postprocess,
        options=instantiate(cfg.metric),
        min_polygon_size=data.min_polygon_size,
        max_hmean_drop=cfg.parity.max_hmean_drop,
        num_images=cfg.parity.accuracy_images,
    )
    _refuse(report, output, AccuracyError)
    log.info("int8 accuracy: %s", report.summary())
    quantization = {
        "type": "int8",
        "tool": "onnxruntime.quantization.quantize_static",
        "format": "QDQ",
        "weights": "int8, per channel, symmetric, "
        + ("7-bit (reduce_range)" if cfg.int8.reduce_range else "8-bit"),
        "activations": "uint8, per tensor, asymmetric",
        "calibration": {
            "images": len(inputs),
            "split": calibration.split,
            "image_dir": str(split_dir.resolve()),
            "method": calibration.method,
        },
    }
    return quantization, {**report.record(), "summary": report.summary()}


def _transform(cfg: DictConfig, data: DictConfig, pad_multiple: int | None) -> Any:
    """The checkpoint's evaluation transform at the export's long side."""
    from ocr.data.transforms import EvalTransform

    return EvalTransform(
        long_side=export_long_side(cfg.long_side, data.eval_transform.long_side),
        mean=data.eval_transform.mean,
        std=data.eval_transform.std,
        fill=data.eval_transform.fill,
        pad_multiple=pad_multiple,
    )


def _refuse(report: Any, model_path: Path, error: type[Exception]) -> None:
    """Remove ``model_path`` and raise ``error`` with the figures when the check ``report`` failed."""
    if report.problem is not None:
        model_path.unlink()
        raise error(f"{model_path}: {report.problem}, model removed: {report.summary()}")


@hydra.main(config_path="../configs", config_name="export", version_base="1.3")
@lightning_runner
def main(cfg: DictConfig) -> None:
    export(cfg)


if __name__ == "__main__":
    main()
