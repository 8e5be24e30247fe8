"""Static int8 quantisation of an exported model (ONNX Runtime's tools) and its accuracy check.

``runners/export.py quantize=int8`` quantises the checked fp32 export (activation ranges calibrated on
the checkpoint's train or val images), scores it against the fp32 network with CLEval on the val split
(:func:`accuracy_parity`) and refuses one that loses more than ``parity.max_hmean_drop``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from ocr.data.coding import decode_batch
from ocr.data.collate import collate_batch
from ocr.data.dataset import ImageFolderDataset
from ocr.data.transforms import EvalTransform
from ocr.inference.onnx_runtime import OnnxProbabilityMap, import_onnxruntime
from ocr.metrics.cleval.evaluate import evaluate_dataset
from ocr.metrics.cleval.options import MODES, CLEvalOptions, Mode
from ocr.metrics.files import sanitized_ground_truth
from ocr.types import Batch, Polygon
from ocr.utils.errors import ConfigValueError, InputNotFoundError, UsageError

__all__ = [
    "CALIBRATION_METHODS",
    "CALIBRATION_SPLITS",
    "AccuracyError",
    "AccuracyReport",
    "CalibrationSettings",
    "accuracy_parity",
    "calibration_inputs",
    "quantize_int8",
]

CALIBRATION_SPLITS = ("train", "val")
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")

log = logging.getLogger(__name__)

PostProcess = Callable[[Tensor, list[Any]], list[tuple[list[Polygon], list[float]]]]


class AccuracyError(UsageError, RuntimeError):
    """The quantised model loses more hmean than the limit against the fp32 network."""


@dataclass(frozen=True)
class CalibrationSettings:
    """What the activation ranges are calibrated on: the first ``num_images`` of ``split``, by ``method``."""

    num_images: int
    split: str
    method: str  # ONNX Runtime's calibration method

    def __post_init__(self) -> None:
        if self.split not in CALIBRATION_SPLITS:
            raise ConfigValueError(
                f"calibration.split: expected one of {CALIBRATION_SPLITS}, got {self.split!r}"
            )
        if self.method not in CALIBRATION_METHODS:
            raise ConfigValueError(
                f"calibration.method: expected one of {CALIBRATION_METHODS}, got {self.method!r}"
            )
        if not isinstance(self.num_images, int) or self.num_images <= 0:
            raise ConfigValueError(
                f"calibration.num_images: expected a positive int, got {self.num_images!r}"
            )


def _images(image_dir: str | Path, transform: EvalTransform, limit: int | None) -> Iterator[Batch]:
    """Each image of ``image_dir`` (sorted names, the first ``limit``) as a decoded batch of one."""
    dataset = ImageFolderDataset(image_dir=image_dir, transform=transform)
    if len(dataset) == 0:
        raise InputNotFoundError(f"{image_dir}: no images")
    for index in range(len(dataset) if limit is None else min(limit, len(dataset))):
        batch = collate_batch([dataset[index]])
        yield {**batch, "images": decode_batch(batch)["images"]}


def calibration_inputs(image_dir: str | Path, transform: EvalTransform, num_images: int) -> list[np.ndarray]:
    """(1, 3, H, W) float32 normalised inputs of the first ``num_images`` images of ``image_dir``, as
    prediction makes them (one image per input: sizes may differ with ``pad_multiple``)."""
    return [np.ascontiguousarray(b["images"].numpy()) for b in _images(image_dir, transform, num_images)]


class _Reader:
    """ONNX Runtime's ``CalibrationDataReader`` protocol (``get_next``) over prepared inputs."""

    def __init__(self, input_name: str, inputs: list[np.ndarray]) -> None:
        self._feeds = iter([{input_name: array} for array in inputs])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def quantize_int8(
    fp32_path: str | Path,
    int8_path: str | Path,
    inputs: list[np.ndarray],
    *,
    method: str,
    reduce_range: bool,
    input_name: str,
) -> Path:
    """Write the static int8 quantisation of ``fp32_path`` to ``int8_path``, calibrated on ``inputs``: QDQ,
    per-channel int8 weights, uint8 activations (ONNX Runtime's advice for x86); ``reduce_range`` keeps
    weights to 7 bits (no int16 saturation without VNNI)."""
    import_onnxruntime()
    from onnxruntime.quantization import (  # type: ignore[import-untyped]
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quant_pre_process,
        quantize_static,
    )

    int8_path = Path(int8_path)
    prepared = int8_path.with_name(f".{int8_path.name}.pre.onnx")
    try:
        # Shape inference and graph folding first, so that every convolution finds its weight and bias.
        quant_pre_process(os.fspath(fp32_path), os.fspath(prepared), skip_symbolic_shape=True)
        quantize_static(
            os.fspath(prepared),
            os.fspath(int8_path),
            _Reader(input_name, inputs),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            reduce_range=reduce_range,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            calibrate_method={
                "minmax": CalibrationMethod.MinMax,
                "entropy": CalibrationMethod.Entropy,
                "percentile": CalibrationMethod.Percentile,
            }[method],
        )
    finally:
        prepared.unlink(missing_ok=True)
    log.info("Quantised %s -> %s (%.1f MiB)", fp32_path, int8_path, int8_path.stat().st_size / 2**20)
    return int8_path


@dataclass(frozen=True)
class AccuracyReport:
    """The fp32 PyTorch network against the quantised model on a labelled split, scored with CLEval."""

    split: str
    images: int
    hmean_reference: dict[str, float]  # per CLEval mode, the fp32 network's
    hmean_model: dict[str, float]
    polygons_reference: int
    polygons_model: int
    max_hmean_drop: float  # in either mode

    @property
    def drop(self) -> float:
        """The larger hmean drop of the two modes (negative: the quantised model scores higher)."""
        return max(self.hmean_reference[m] - self.hmean_model[m] for m in self.hmean_reference)

    @property
    def problem(self) -> str | None:
        """Why the model is refused, or None."""
        if self.images == 0:
            return f"no labelled image of the {self.split} split to score on"
        if self.drop > self.max_hmean_drop:
            return (
                f"the int8 model loses {self.drop:.4f} hmean "
                f"(limit parity.max_hmean_drop={self.max_hmean_drop})"
            )
        return None

    def summary(self) -> str:
        scores = ", ".join(
            f"{mode} {self.hmean_reference[mode]:.4f} (fp32) vs {self.hmean_model[mode]:.4f} (int8)"
            for mode in self.hmean_reference
        )
        return (
            f"{self.images} {self.split} images: hmean {scores}, drop {self.drop:.4f} "
            f"(limit {self.max_hmean_drop}), polygons {self.polygons_reference} (fp32) vs "
            f"{self.polygons_model} (int8)"
        )

    def record(self) -> dict[str, Any]:
        """The sidecar's ``parity.accuracy`` block."""
        return {
            "split": self.split,
            "images": self.images,
            "hmean_fp32": self.hmean_reference,
            "hmean_int8": self.hmean_model,
            "drop": self.drop,
            "max_hmean_drop": self.max_hmean_drop,
            "polygons_fp32": self.polygons_reference,
            "polygons_int8": self.polygons_model,
            "ok": self.problem is None,
        }


def accuracy_parity(
    net: nn.Module,
    model_path: str | Path,
    *,
    root: str | Path,
    split: str,
    transform: EvalTransform,
    postprocess: PostProcess,
    options: CLEvalOptions,
    min_polygon_size: float,
    max_hmean_drop: float,
    num_images: int | None = None,
) -> AccuracyReport:
    """Score ``net`` (PyTorch, fp32) and ``model_path`` (ONNX Runtime) on ``<root>/images/<split>`` against
    ``<root>/jsons/<split>.json``, one image at a time through ``transform``, with CLEval in both modes
    (``options`` otherwise)."""
    from ocr.data.annotations import load_annotations
    from ocr.inference.onnx_export import ProbabilityMapNet

    records = load_annotations(Path(root) / "jsons" / f"{split}.json")
    reference = ProbabilityMapNet(net.eval().float().cpu())
    model = OnnxProbabilityMap(model_path)
    names: list[str] = []
    found: dict[str, list[list[Polygon]]] = {"fp32": [], "int8": []}
    for batch in _images(Path(root) / "images" / split, transform, num_images):
        name = batch["image_id"][0]
        if name not in records:
            continue
        with torch.no_grad():
            expected = reference(batch["images"])
        names.append(name)
        found["fp32"].append(postprocess(expected, batch["geometry"])[0][0])
        found["int8"].append(postprocess(model(batch["images"]), batch["geometry"])[0][0])
    truth = [sanitized_ground_truth(records[name], min_polygon_size) for name in names]
    polygons, ignore, texts = [t[0] for t in truth], [t[1] for t in truth], [t[2] for t in truth]
    hmeans: dict[str, dict[str, float]] = {"fp32": {}, "int8": {}}
    for mode in MODES:
        scoring = replace(options, mode=cast(Mode, mode))
        for kind in hmeans:
            result = evaluate_dataset(found[kind], polygons, ignore, texts, scoring, names=names)
            hmeans[kind][mode] = float(result.hmean)
    return AccuracyReport(
        split=split,
        images=len(names),
        hmean_reference=hmeans["fp32"],
        hmean_model=hmeans["int8"],
        polygons_reference=sum(len(p) for p in found["fp32"]),
        polygons_model=sum(len(p) for p in found["int8"]),
        max_hmean_drop=max_hmean_drop,
    )
