"""Export a checkpoint to ONNX and check it against PyTorch (probability maps and polygons).

uv run runners/export.py ckpt=outputs/train/<run>/checkpoints/best.ckpt [format=onnx] [long_side=1024]

The input side, mean/std and post-processing that the parity check runs with and the sidecar records for
``predict.py backend=onnx`` are the checkpoint's unless given on the command line (``long_side=``,
``postprocess.*``). Writes ``model.onnx`` (dynamic batch, height and width) and ``model.onnx.json`` into
the run directory; ``runners/predict.py backend=onnx onnx_model=<file.onnx>`` predicts with it. Both are
made in a hidden folder beside ``output`` and replace a previous model only once checked: a failed parity
check (or one that compared no image or no polygon) exits 1 with the figures, and it, an error, Ctrl-C or
SIGTERM leaves a previous model and sidecar as they were.

``quantize=int8`` writes a statically quantised model instead (ONNX Runtime, QDQ, per-channel weights),
calibrated on ``calibration.num_images`` images of the checkpoint's ``calibration.split``; the fp32 export
is checked as above first, then the int8 model is scored against the fp32 network with CLEval on the val
split, and refused (not written, exit 1 with the figures) if it loses more than ``parity.max_hmean_drop``.
The calibration settings, the calibration images and a writable ``output`` folder are checked before the
export starts.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ocr.checkpoints.inference_settings import apply_stored_settings, export_long_side, stored_setting_keys
from ocr.machine.hardware import register_resolvers
from ocr.run.entry import entry, quiet_third_party, save_config
from ocr.utils.errors import ConfigValueError

register_resolvers()
quiet_third_party()

FORMATS = ("onnx",)
QUANTIZE = (None, "int8")
log = logging.getLogger(__name__)


@entry("export")
def export(cfg: DictConfig) -> dict[str, str]:
    """Export ``cfg.ckpt``; returns the paths written (model, sidecar)."""
    from ocr.run.folder import writable_dir

    # The checks' inputs before any export work: a bad value is refused in seconds, not after the export.
    if cfg.format not in FORMATS:
        raise ConfigValueError(f"format: expected one of {FORMATS}, got {cfg.format!r}")
    if cfg.quantize not in QUANTIZE:
        raise ConfigValueError(f"quantize: expected null or 'int8', got {cfg.quantize!r}")
    calibration = None
    if cfg.quantize == "int8":
        from ocr.inference.quantize import CalibrationSettings, calibration_inputs

        calibration = CalibrationSettings(
            num_images=cfg.calibration.num_images, split=cfg.calibration.split, method=cfg.calibration.method
        )
    output = Path(cfg.output)
    writable_dir(output.parent, "output", create=True)
    from ocr.checkpoints.reading import load_checkpoint
    from ocr.inference.onnx_export import (
        ParityError,
        StagedExport,
        check_parity,
        export_onnx,
        parity_batch,
        write_sidecar,
    )
    from ocr.inference.onnx_runtime import sidecar_path
    from ocr.lightning_modules.restore import CHECKPOINT_SOURCE, module_from_loaded

    directory = Path(cfg.paths.output_dir)
    checkpoint = load_checkpoint(cfg.ckpt)
    run_config = checkpoint["ocr_config"]
    apply_stored_settings(cfg, run_config, stored_setting_keys(cfg), CHECKPOINT_SOURCE)
    save_config(cfg, directory)
    postprocess = instantiate(cfg.postprocess)
    module = module_from_loaded(checkpoint, cfg.ckpt, None)
    data = OmegaConf.create(run_config).data
    transform = _transform(cfg, data, pad_multiple=None)  # the parity batch stacks images: one square size
    image_dir = cfg.parity.image_dir or str(Path(data.root) / "images" / data.test_split)
    inputs = None
    if calibration is not None:  # read before the export too: a missing split is refused in seconds
        _, split_dir, int8_transform = _int8_data(cfg, data, calibration.split)
        inputs = calibration_inputs(split_dir, int8_transform, calibration.num_images)
    with StagedExport(output, directory) as staging:
        model_path = staging.folder / output.name
        fp32_path = model_path if inputs is None else staging.folder / "fp32.onnx"
        export_onnx(module.net, fp32_path, sample_size=transform.long_side, opset=cfg.opset)
        report = check_parity(
            module.net,
            fp32_path,
            parity_batch(image_dir, transform, cfg.parity.num_images),
            postprocess,
            prob_tol=cfg.parity.prob_tol,
            polygon_tol_px=cfg.parity.polygon_tol_px,
            min_polygons=cfg.parity.min_polygons,
        )
        _refuse(report, output, ParityError)
        log.info("Parity: %s", report.summary())
        quantization = accuracy = None
        if calibration is not None and inputs is not None:
            quantization, accuracy = _quantize(
                cfg, module.net, (fp32_path, model_path), data, postprocess, calibration, inputs
            )
        write_sidecar(
            model_path,
            transform=transform,
            postprocess=cast(dict[str, Any], OmegaConf.to_container(cfg.postprocess, resolve=True)),
            checkpoint=str(Path(cfg.ckpt).resolve()),
            parity=report,
            opset=cfg.opset,
            quantization=quantization,
            accuracy=accuracy,
        )
        model_path = staging.publish(model_path)
    print(f"parity: {report.summary()}")
    if accuracy is not None:
        print(f"int8 accuracy: {accuracy['summary']}")
    sidecar = sidecar_path(model_path)
    print(f"model: {model_path}\nsidecar: {sidecar}")
    return {"model": str(model_path), "sidecar": str(sidecar)}


def _int8_data(cfg: DictConfig, data: DictConfig, split: str) -> tuple[Path, Path, Any]:
    """The data root, the calibration split's folder and the transform of ``quantize=int8``: calibration
    and scoring see the inputs prediction makes (the checkpoint's padding rule, one image each)."""
    root = Path(cfg.data_root or data.root)
    transform = _transform(cfg, data, pad_multiple=data.eval_transform.pad_multiple)
    return root, root / "images" / data[f"{split}_split"], transform


def _quantize(
    cfg: DictConfig,
    net: Any,
    paths: tuple[Path, Path],
    data: DictConfig,
    postprocess: Any,
    calibration: Any,
    inputs: list[Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Quantise the checked fp32 export ``paths[0]`` into ``paths[1]``, calibrated on ``inputs``, and score
    it against ``net``; returns the sidecar's ``quantization`` block and ``parity.accuracy`` block.

    Raises:
        AccuracyError: the int8 model loses more than ``parity.max_hmean_drop``.
    """
    from ocr.inference.onnx_runtime import INPUT_NAME
    from ocr.inference.quantize import AccuracyError, accuracy_parity, quantize_int8

    fp32_path, int8_path = paths
    root, split_dir, transform = _int8_data(cfg, data, calibration.split)
    quantize_int8(
        fp32_path,
        int8_path,
        inputs,
        method=calibration.method,
        reduce_range=cfg.int8.reduce_range,
        input_name=INPUT_NAME,
    )
    fp32_path.unlink()
    report = accuracy_parity(
        net,
        int8_path,
        root=root,
        split=data.val_split,
        transform=transform,
        postprocess=postprocess,
        options=instantiate(cfg.metric),
        min_polygon_size=data.min_polygon_size,
        max_hmean_drop=cfg.parity.max_hmean_drop,
        num_images=cfg.parity.accuracy_images,
    )
    _refuse(report, Path(cfg.output), AccuracyError)
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


def _refuse(report: Any, output: Path, error: type[Exception]) -> None:
    """Raise ``error`` with the figures when the check ``report`` failed (the staged files go with the
    staging folder; the previous ``output`` stays)."""
    if report.problem is not None:
        raise error(f"{output}: {report.problem}; not written (a previous model stays): {report.summary()}")


if __name__ == "__main__":
    export.main()
