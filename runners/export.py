"""Export a checkpoint to ONNX and check it against PyTorch (probability maps and polygons).

uv run runners/export.py ckpt=outputs/train/<run>/checkpoints/best.ckpt [format=onnx] [long_side=1024]

The input side, mean/std and post-processing that the parity check runs with and the sidecar records for
``predict.py backend=onnx`` are the checkpoint's unless given on the command line (``long_side=``,
``postprocess.*``). Writes ``model.onnx`` (dynamic batch, height and width) and ``model.onnx.json`` into
the run directory; ``runners/predict.py backend=onnx onnx_model=<file.onnx>`` predicts with it. A failed
parity check, or one that compared no image or no polygon, removes the model and exits 1 with the figures.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, cast

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ocr.checkpoints.inference_settings import apply_stored_settings, export_long_side, stored_setting_keys
from ocr.machine.hardware import register_resolvers
from ocr.utils.cli import lightning_runner
from ocr.utils.commands import accept_unquoted_paths
from ocr.utils.config_types import check_config_types
from ocr.utils.errors import ConfigValueError
from ocr.utils.runner import quiet_third_party, run_dir, save_config, task_wrapper

register_resolvers()
quiet_third_party()

FORMATS = ("onnx",)
log = logging.getLogger(__name__)


@task_wrapper
def export(cfg: DictConfig) -> dict[str, str]:
    """Export ``cfg.ckpt``; returns the paths written (model, sidecar)."""
    from ocr.checkpoints.reading import load_checkpoint
    from ocr.data.transforms import EvalTransform
    from ocr.inference.onnx_export import ParityError, check_parity, export_onnx, parity_batch, write_sidecar
    from ocr.lightning_modules.restore import CHECKPOINT_SOURCE, module_from_loaded

    check_config_types(cfg)
    if cfg.format not in FORMATS:
        raise ConfigValueError(f"format: expected one of {FORMATS}, got {cfg.format!r}")
    directory = run_dir(cfg)
    checkpoint = load_checkpoint(cfg.ckpt)
    run_config = checkpoint["ocr_config"]
    apply_stored_settings(cfg, run_config, stored_setting_keys(cfg), CHECKPOINT_SOURCE)
    save_config(cfg, directory)
    postprocess = instantiate(cfg.postprocess)
    module = module_from_loaded(checkpoint, cfg.ckpt, None)
    data = OmegaConf.create(run_config).data
    transform = EvalTransform(
        long_side=export_long_side(cfg.long_side, data.eval_transform.long_side),
        mean=data.eval_transform.mean,
        std=data.eval_transform.std,
        fill=data.eval_transform.fill,
        pad_multiple=None,  # the parity batch stacks several images: one square size
    )
    image_dir = cfg.parity.image_dir or str(Path(data.root) / "images" / data.test_split)
    model_path = export_onnx(module.net, cfg.output, sample_size=transform.long_side, opset=cfg.opset)
    report = check_parity(
        module.net,
        model_path,
        parity_batch(image_dir, transform, cfg.parity.num_images),
        postprocess,
        prob_tol=cfg.parity.prob_tol,
        polygon_tol_px=cfg.parity.polygon_tol_px,
        min_polygons=cfg.parity.min_polygons,
    )
    if report.problem is not None:
        model_path.unlink()
        raise ParityError(f"{model_path}: {report.problem}, model removed: {report.summary()}")
    log.info("Parity: %s", report.summary())
    sidecar = write_sidecar(
        model_path,
        transform=transform,
        postprocess=cast(dict[str, Any], OmegaConf.to_container(cfg.postprocess, resolve=True)),
        checkpoint=str(Path(cfg.ckpt).resolve()),
        parity=report,
        opset=cfg.opset,
    )
    print(f"parity: {report.summary()}")
    print(f"model: {model_path}\nsidecar: {sidecar}")
    return {"model": str(model_path), "sidecar": str(sidecar)}


@hydra.main(config_path="../configs", config_name="export", version_base="1.3")
@lightning_runner
def main(cfg: DictConfig) -> None:
    export(cfg)


if __name__ == "__main__":
    sys.argv = accept_unquoted_paths(sys.argv, ("ckpt",))  # old checkpoint names hold "="
    main()
