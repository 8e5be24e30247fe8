"""Prediction with ONNX Runtime (``backend=onnx``): the exported network replaces the PyTorch one, with
the same data module, post-processing pipeline and writers around it.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from hydra.utils import instantiate
from lightning import LightningModule
from omegaconf import DictConfig
from torch import Tensor

from ocr.checkpoints.inference_settings import apply_stored_settings, stored_setting_keys
from ocr.evaluation.pipeline import EvalPipeline, PipelineSettings
from ocr.lightning_modules.restore import inference_trainer
from ocr.models.postprocess import DBPostProcessor
from ocr.types import Batch
from ocr.utils.errors import ConfigValueError, InputNotFoundError, UsageError

__all__ = [
    "INPUT_NAME",
    "OUTPUT_NAME",
    "OnnxFileError",
    "OnnxPredictModule",
    "OnnxProbabilityMap",
    "SIDECAR_FORMAT",
    "import_onnxruntime",
    "onnx_for_inference",
    "onnx_settings",
    "read_sidecar",
    "sidecar_path",
]

SIDECAR_FORMAT = "ocr-dbnet-prob-map"  # the "format" of the sidecar runners/export.py writes
SIDECAR_KEYS = ("data.eval_transform", "postprocess")  # what prediction takes from the sidecar
INPUT_NAME = "images"
OUTPUT_NAME = "prob_map"

log = logging.getLogger(__name__)


def import_onnxruntime() -> Any:
    """The ``onnxruntime`` module (else say how to install it)."""
    try:
        import onnxruntime  # type: ignore[import-untyped]  # ships no type information
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "backend=onnx needs ONNX Runtime, which is not installed in this environment: install the "
            "optional dependency group with `uv sync --group onnx` (or `pip install onnxruntime`)"
        ) from None
    return onnxruntime


def sidecar_path(model_path: str | Path) -> Path:
    """The JSON written next to an exported model: ``model.onnx`` -> ``model.onnx.json``."""
    return Path(f"{model_path}.json")


def read_sidecar(model_path: str | Path) -> dict[str, Any]:
    """The export record of ``model_path`` (input size rule, mean/std, post-process, source, parity)."""
    model_path = Path(model_path)
    if not model_path.is_file():
        raise InputNotFoundError(
            f"onnx_model={model_path}: expected an .onnx file written by runners/export.py"
        )
    path = sidecar_path(model_path)
    if not path.is_file():
        raise InputNotFoundError(
            f"onnx_model={model_path}: its sidecar {path.name} is missing (runners/export.py writes both; "
            "export the checkpoint again)"
        )
    again = f"export the checkpoint again (runners/export.py writes {model_path.name} and {path.name})"
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise OnnxFileError(
            f"{path}: the ONNX model's sidecar is not readable JSON ({exc}); {again}"
        ) from None
    if not isinstance(record, dict) or record.get("format") != SIDECAR_FORMAT:
        found = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise OnnxFileError(
            f"{path}: expected the sidecar runners/export.py writes (format {SIDECAR_FORMAT!r}, with "
            f"data.eval_transform and postprocess), got {found}; {again}"
        )
    missing = [key for key in SIDECAR_KEYS if not isinstance(_select(record, key), dict)]
    if missing:
        raise OnnxFileError(f"{path}: the sidecar lacks {', '.join(missing)}; {again}")
    return record


def _select(record: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        record = record.get(part) if isinstance(record, dict) else None  # type: ignore[assignment]
    return record


class OnnxFileError(UsageError, ValueError):
    """An ``.onnx`` model or its sidecar that cannot be used (truncated, not JSON, another tool's)."""


class OnnxProbabilityMap:
    """An exported network in an ONNX Runtime CPU session with ``threads`` intra-op threads (None: one
    per physical core)."""

    def __init__(self, model_path: str | Path, *, threads: int | None = None) -> None:
        ort = import_onnxruntime()
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads is not None:
            options.intra_op_num_threads = threads
        # Idle pool threads sleep instead of spinning: the DataLoader workers decode on the same cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.model_path = Path(model_path)
        try:
            self.session = ort.InferenceSession(
                os.fspath(self.model_path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # noqa: BLE001 - onnxruntime's pybind errors share no useful base class
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise OnnxFileError(
                f"{self.model_path}: ONNX Runtime cannot load this model ({reason}); a truncated or "
                "foreign file? Export the checkpoint again with runners/export.py"
            ) from exc

    def __call__(self, images: Tensor) -> Tensor:
        """(B, 3, H, W) float32 normalised images, any device -> (B, 1, H, W) float32 probabilities (CPU)."""
        array = np.ascontiguousarray(images.detach().float().cpu().numpy())
        (prob_map,) = self.session.run([OUTPUT_NAME], {INPUT_NAME: array})
        return torch.from_numpy(prob_map)


class OnnxPredictModule(LightningModule):
    """``trainer.predict`` with an ONNX Runtime network: the pipeline and kept predictions of
    :class:`~ocr.lightning_modules.detection_module.DetectionModule`, on CPU batches."""

    def __init__(
        self, *, model_path: str | Path, postprocess: DBPostProcessor, pipeline: PipelineSettings
    ) -> None:
        super().__init__()
        self.network = OnnxProbabilityMap(model_path)
        self.pipeline = EvalPipeline(settings=pipeline, postprocess=postprocess)
        log.info("ONNX Runtime session for %s", model_path)

    def on_predict_epoch_start(self) -> None:
        self.pipeline.start(device=self.device, cleval=None, keep_predictions=True)

    def predict_step(self, batch: Batch, batch_idx: int) -> None:
        # ONNX Runtime releases the GIL while it runs, so thread workers overlap with it as well.
        self.pipeline.begin_step()
        with self.pipeline.network(self.device):
            prob_map = self.network(batch["images"])
        self.pipeline.submit_probabilities(prob_map, batch, scored=False)

    def on_predict_epoch_end(self) -> None:
        self.pipeline.finish()

    def teardown(self, stage: str) -> None:
        self.pipeline.close()


def onnx_settings(cfg: DictConfig) -> None:
    """Take the evaluation transform and post-processing of ``cfg.onnx_model``'s sidecar into ``cfg``,
    except what the command line set."""
    import_onnxruntime()
    if cfg.onnx_model is None:
        raise ConfigValueError(
            "backend=onnx: expected onnx_model=<file.onnx> (written by runners/export.py), got null"
        )
    source = f"the ONNX export ({sidecar_path(cfg.onnx_model).name})"
    apply_stored_settings(cfg, read_sidecar(cfg.onnx_model), stored_setting_keys(cfg), source)


def onnx_for_inference(cfg: DictConfig) -> tuple[OnnxPredictModule, L.Trainer]:
    """The module of ``cfg.onnx_model`` and a single-process CPU trainer (after :func:`onnx_settings`)."""
    module = OnnxPredictModule(
        model_path=cfg.onnx_model,
        postprocess=instantiate(cfg.postprocess),
        pipeline=instantiate(cfg.pipeline),
    )
    trainer = inference_trainer(
        cfg.trainer, accelerator="cpu", devices=1, strategy="auto", precision="32-true"
    )
    return module, trainer
