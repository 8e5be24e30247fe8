"""Export a checkpoint's probability-map network to ONNX, with a parity check against PyTorch.

The exported graph is the inference branch only: normalised (B, 3, H, W) float32 images -> (B, 1, H, W)
float32 probabilities, batch, height and width dynamic (torch.onnx's dynamo exporter). A JSON sidecar
(``<model>.onnx.json``) holds what prediction needs and what the parity check measured. The files are made
in a hidden folder beside the model (:class:`StagedExport`) and replace the previous ones only once checked.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ocr.data.coding import decode_batch
from ocr.data.collate import collate_batch
from ocr.data.dataset import ImageFolderDataset
from ocr.data.transforms import EvalTransform
from ocr.inference.onnx_runtime import (
    INPUT_NAME,
    OUTPUT_NAME,
    SIDECAR_FORMAT,
    OnnxProbabilityMap,
    sidecar_path,
)
from ocr.run.folder import write_interrupted
from ocr.types import Batch, Polygon
from ocr.utils.errors import InputNotFoundError, UsageError
from ocr.utils.io import TEMP_SUFFIX, atomic_write_bytes, atomic_write_json

__all__ = [
    "OPSET",
    "ParityError",
    "ParityReport",
    "ProbabilityMapNet",
    "StagedExport",
    "check_parity",
    "export_onnx",
    "parity_batch",
    "write_sidecar",
]

# Opset 18: what the dynamo exporter targets natively (no version conversion), read by ONNX Runtime >= 1.14.
OPSET = 18

log = logging.getLogger(__name__)


class ParityError(UsageError, RuntimeError):
    """The exported model's output differs from PyTorch's by more than the tolerance."""


class ProbabilityMapNet(nn.Module):
    """The inference branch of a DBNet: (B, 3, H, W) normalised images -> (B, 1, H, W) probabilities."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, images: Tensor) -> Tensor:
        logits = self.net(images).prob_logits.float()
        # The export traces the head at one size, where it needs no resize; at a size the encoder stride
        # does not divide the head overshoots, and this matches (H, W) as the head itself would.
        logits = F.interpolate(logits, size=images.shape[-2:], mode="bilinear", align_corners=False)
        return torch.sigmoid(logits)


class StagedExport:
    """A hidden folder beside ``output`` (``staging.folder``) to make the model and its sidecar in;
    :meth:`publish` moves the checked pair onto ``output``. The folder goes on leaving, so a failure,
    Ctrl-C or SIGTERM (``.INTERRUPTED``, exit 143) leaves the previous pair as it was."""

    def __init__(self, output: Path, run_directory: Path) -> None:
        self.output, self.run_directory = output, run_directory
        self.published = False
        self._previous: Any = None

    def __enter__(self) -> StagedExport:
        if threading.current_thread() is threading.main_thread():  # first: no SIGTERM leaves the folder
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            self.folder = Path(
                tempfile.mkdtemp(prefix=f".{self.output.name}.", suffix=TEMP_SUFFIX, dir=self.output.parent)
            )
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._restore()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def publish(self, model: Path) -> Path:
        """Move the staged ``model`` and its sidecar onto ``output`` with Ctrl-C and SIGTERM held off, so
        that no signal parts a model from its sidecar; returns ``output``."""
        held = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
        try:
            os.replace(sidecar_path(model), sidecar_path(self.output))
            os.replace(model, self.output)
            self.published = True
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
        return self.output

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self.published:  # held off during publish: the export is whole, only its last lines remain
            return
        write_interrupted(
            self.run_directory, f"export stopped by SIGTERM; {self.output} unchanged", 128 + signum
        )
        log.warning("SIGTERM: export stopped; %s and its sidecar are unchanged", self.output)
        raise KeyboardInterrupt


def export_onnx(net: nn.Module, path: str | Path, *, sample_size: int, opset: int = OPSET) -> Path:
    """Write ``net``'s probability-map branch to ``path`` atomically, traced at a square of
    ``sample_size`` px (batch, height and width stay dynamic)."""
    wrapper = ProbabilityMapNet(net.eval().float().cpu()).eval()
    sample = torch.zeros(1, 3, sample_size, sample_size)
    dynamic = torch.export.Dim.DYNAMIC
    with torch.no_grad():
        program = torch.onnx.export(
            wrapper,
            (sample,),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            opset_version=opset,
            dynamo=True,
            dynamic_shapes={"images": {0: dynamic, 2: dynamic, 3: dynamic}},
            verbose=False,
        )
    if program is None:
        raise RuntimeError(f"{path}: torch.onnx.export returned no program (dynamo exporter expected)")
    path = atomic_write_bytes(path, program.model_proto.SerializeToString())
    log.info("Exported %s (opset %d, %.1f MiB)", path, opset, path.stat().st_size / 2**20)
    return path


def parity_batch(image_dir: str | Path, transform: EvalTransform, num_images: int) -> Batch:
    """The first ``num_images`` images of ``image_dir`` (sorted names), letterboxed as predict does."""
    dataset = ImageFolderDataset(image_dir=image_dir, transform=transform)
    if len(dataset) == 0:
        raise InputNotFoundError(f"parity.image_dir={image_dir}: no images to check the export on")
    return collate_batch([dataset[i] for i in range(min(num_images, len(dataset)))])


@dataclass(frozen=True)
class ParityReport:
    """PyTorch vs ONNX Runtime on the same batch."""

    images: list[str]  # image ids compared
    prob_max_abs_diff: float
    polygons_torch: int
    polygons_onnx: int
    polygon_max_dist_px: float  # original px, nearest-centroid pairs both ways; inf when the counts differ
    prob_tol: float
    polygon_tol_px: float
    min_polygons: int  # polygons each side must find for the check to count (0: maps alone)

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def problem(self) -> str | None:
        """Why the check fails (nothing compared, or a figure beyond its tolerance), or None."""
        if not self.images or min(self.polygons_torch, self.polygons_onnx) < self.min_polygons:
            return (
                "the parity check compared no image or no polygon (check on images where the model finds "
                "text: parity.image_dir=<folder>, more parity.num_images)"
            )
        if self.prob_max_abs_diff > self.prob_tol or self.polygon_max_dist_px > self.polygon_tol_px:
            return "ONNX output differs from PyTorch's"
        return None

    def summary(self) -> str:
        """One line for logs and errors."""
        return (
            f"{len(self.images)} images: prob max |diff| {self.prob_max_abs_diff:.2e} (tol {self.prob_tol}), "
            f"polygons {self.polygons_torch} (PyTorch) vs {self.polygons_onnx} (ONNX), max point distance "
            f"{self.polygon_max_dist_px:.3f} px (tol {self.polygon_tol_px})"
        )


def _polygon_distance(first: list[Polygon], second: list[Polygon]) -> float:
    """Largest point distance between polygons paired by nearest centroid; inf when the counts differ."""
    if len(first) != len(second):
        return math.inf
    if not first:
        return 0.0
    centroids = np.array([p.mean(axis=0) for p in second])
    worst = 0.0
    for polygon in first:
        match = second[int(np.argmin(np.linalg.norm(centroids - polygon.mean(axis=0), axis=1)))]
        distances = np.linalg.norm(polygon[:, None, :] - match[None, :, :], axis=2)
        worst = max(worst, float(distances.min(axis=1).max()), float(distances.min(axis=0).max()))
    return worst


def check_parity(
    net: nn.Module,
    model_path: str | Path,
    batch: Batch,
    postprocess: Callable[[Tensor, list[Any]], list[tuple[list[Polygon], list[float]]]],
    *,
    prob_tol: float,
    polygon_tol_px: float,
    min_polygons: int = 1,
) -> ParityReport:
    """Run the compact ``batch`` (decoded here) through ``net`` (PyTorch, float32) and the exported model;
    compare maps and polygons."""
    images = decode_batch(batch)["images"]  # (B, 3, H, W) float32
    with torch.no_grad():
        expected = ProbabilityMapNet(net.eval().float().cpu())(images)
    actual = OnnxProbabilityMap(model_path)(images)
    torch_results = postprocess(expected, batch["geometry"])
    onnx_results = postprocess(actual, batch["geometry"])
    return ParityReport(
        images=list(batch["image_id"]),
        prob_max_abs_diff=float((expected - actual).abs().max()),
        polygons_torch=sum(len(polygons) for polygons, _ in torch_results),
        polygons_onnx=sum(len(polygons) for polygons, _ in onnx_results),
        polygon_max_dist_px=max(
            _polygon_distance(ours, theirs)
            for (ours, _), (theirs, _) in zip(torch_results, onnx_results, strict=True)
        ),
        prob_tol=prob_tol,
        polygon_tol_px=polygon_tol_px,
        min_polygons=min_polygons,
    )


def write_sidecar(
    model_path: str | Path,
    *,
    transform: EvalTransform,
    postprocess: Mapping[str, Any],
    checkpoint: str,
    parity: ParityReport,
    opset: int,
    quantization: Mapping[str, Any] | None = None,
    accuracy: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``<model>.onnx.json``: input rule, ``data.eval_transform`` (a run config's layout),
    post-processing, source checkpoint and parity figures; a quantised model adds ``quantization`` and its
    CLEval check ``parity.accuracy`` (its map figures are then the fp32 export's)."""
    record: dict[str, Any] = {
        "format": SIDECAR_FORMAT,
        "opset": opset,
        "input": {
            "name": INPUT_NAME,
            "layout": "NCHW float32, RGB normalised with mean/std, dynamic batch, height and width",
            "size_rule": "letterbox: the long side scaled to long_side, padded bottom/right to a square",
        },
        "output": {"name": OUTPUT_NAME, "layout": "N1HW float32 text probability"},
        "data": {
            "eval_transform": {
                "long_side": transform.long_side,
                "mean": list(transform.mean),
                "std": list(transform.std),
                "fill": transform.fill,
            }
        },
        "postprocess": dict(postprocess),
        "source": {"checkpoint": checkpoint},
        "quantization": dict(quantization) if quantization is not None else None,
        "parity": {**asdict(parity), "ok": parity.ok}
        | ({"accuracy": dict(accuracy)} if accuracy is not None else {}),
        "torch": torch.__version__,
    }
    return atomic_write_json(sidecar_path(model_path), record)
