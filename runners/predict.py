"""Predict a folder of images: submission CSV (one row per image), predictions JSON, report.html, overlays.

uv run runners/predict.py ckpt=outputs/train/<run>/checkpoints/last.ckpt image_dir=path/to/images
uv run runners/predict.py backend=onnx onnx_model=outputs/export/<run>/model.onnx image_dir=path/to/images

``backend=onnx`` runs the network exported by ``runners/export.py`` with ONNX Runtime on the CPU; the data
pipeline, post-processing and outputs are the same. The evaluation transform and the post-processing come
from the checkpoint (or the export's sidecar) unless given on the command line.

A folder without image files is an error (exit 1) that names it and the extensions looked for. An
unreadable image gets an empty row and no overlay. Under DDP, rank 0 gathers and writes everything.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from ocr.machine.hardware import register_resolvers
from ocr.run.entry import entry, quiet_third_party, save_config
from ocr.utils.errors import ConfigValueError

register_resolvers()
quiet_third_party()

BACKENDS = ("torch", "onnx")


def prepare(cfg: DictConfig, settle: Callable[[DictConfig], None] | None = None) -> tuple[Any, Any, Any]:
    """(datamodule, module, trainer) for ``cfg``: what ``trainer.predict`` runs, for either backend
    (``scripts/benchmark_predict.py`` times the same objects). ``settle`` has the last word on ``cfg``
    once the checkpoint's (or export's) settings are in it, before anything is built
    (``runners/pseudo_label.py`` lowers ``postprocess.box_thresh`` there)."""
    from ocr.lightning_modules.prediction_io import require_images
    from ocr.lightning_modules.restore import checkpoint_settings, restore_for_inference

    if cfg.backend not in BACKENDS:
        raise ConfigValueError(f"backend: expected one of {BACKENDS}, got {cfg.backend!r}")
    if cfg.backend == "onnx":
        from ocr.inference.onnx_runtime import onnx_for_inference, onnx_settings

        onnx_settings(cfg)
    else:
        checkpoint = checkpoint_settings(cfg, targets=False)
    if settle is not None:
        settle(cfg)
    # No synthetic generation when predicting; root is read first, as it may interpolate data.synthetic.
    datamodule = instantiate(cfg.data, root=cfg.data.root, predict_image_dir=cfg.image_dir, synthetic=None)
    datamodule.setup("predict")
    require_images(datamodule.datasets["predict"])  # before the network is built
    if cfg.backend == "onnx":
        return (datamodule, *onnx_for_inference(cfg))
    return (datamodule, *restore_for_inference(cfg, checkpoint))


def model_name(cfg: DictConfig) -> str:
    """What predicted: the ONNX model or the checkpoint."""
    return str(cfg.onnx_model if cfg.backend == "onnx" else cfg.ckpt)


@entry("predict")
def predict(cfg: DictConfig) -> dict[str, str]:
    """Run the checkpoint over ``image_dir``; returns the paths written (empty on ranks other than 0)."""
    from ocr.lightning_modules.prediction_io import gather_predictions, save_overlays, save_predictions
    from ocr.reporting.collect import attach_report_collector
    from ocr.reporting.html import write_report

    directory = Path(cfg.paths.output_dir)
    datamodule, module, trainer = prepare(cfg)
    save_config(cfg, directory)  # with the settings taken from the checkpoint
    pipeline = module.pipeline
    collector = attach_report_collector(pipeline, cfg.report.prob_long_side) if cfg.report.enabled else None
    # Under DDP each rank predicts its share of the images; rank 0 writes them all, once.
    trainer.predict(module, datamodule=datamodule, return_predictions=False)
    writing_started = time.perf_counter()
    predictions = gather_predictions(pipeline.predictions)
    records = collector.records() if collector is not None else None
    if predictions is None:
        return {}
    paths = save_predictions(predictions, directory)
    if cfg.overlays:
        report = save_overlays(predictions, cfg.image_dir, directory / "overlays", cfg.max_overlays)
        paths["overlays"] = str(report.directory)
        print(f"overlays: {report.written} written, {len(report.unreadable)} images unreadable")
    if records is not None:
        paths["report"] = str(
            write_report(directory, records, cfg.image_dir, None, f"Predictions: {model_name(cfg)}")
        )
    writing = time.perf_counter() - writing_started
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    print(pipeline.times.summary("predict", pipeline.workers, writing))
    print(f"Run directory: {directory}")
    return paths


if __name__ == "__main__":
    predict.main()
