"""Data contracts shared by the data pipeline, the model, the metric and the runners.

Coordinate frames (see docs/architecture.md):
- *input px*: pixels of the network input tensor (after resize/letterbox/crop).
- *original px*: pixels of the source image after its EXIF orientation has been applied.
A :class:`Geometry` maps input px to original px; :func:`ocr.geometry.to_original` applies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Literal, NamedTuple, TypedDict, get_args

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # annotations only: target generation and its benchmark run without importing torch
    from torch import Tensor

__all__ = [
    "BATCH_TENSOR_KEYS",
    "Batch",
    "BatchCoding",
    "CropWarp",
    "DBOutput",
    "Geometry",
    "Polygon",
    "Prediction",
    "RENDER_ON",
    "RegionWarps",
    "Sample",
    "TARGET_KEYS",
    "TargetKey",
    "TargetParams",
    "TargetPolygons",
]

Polygon = npt.NDArray[np.float32]  # (K, 2) x, y with K >= 3

# The four DB target maps, under the same names in Sample, Batch, make_db_targets and the loss.
TargetKey = Literal["prob_map", "prob_mask", "thresh_map", "thresh_mask"]
TARGET_KEYS: tuple[TargetKey, ...] = get_args(TargetKey)
# The batch entries that are tensors moved to the device by the transfer hook (None when a batch does
# not carry them: the maps of a batch whose targets the device draws); the rest stays host-side, and
# ``ocr.data.coding.decode_batch`` copies what it needs of it.
BATCH_TENSOR_KEYS: tuple[Literal["images"] | TargetKey, ...] = ("images", *TARGET_KEYS)
# Where the training crop is warped and the DB targets are drawn (config ``data.render_on``).
RENDER_ON = ("worker", "device")


@dataclass(frozen=True)
class Geometry:
    """How network-input pixels map back to original-image pixels (sizes: original after EXIF, input)."""

    matrix: npt.NDArray[np.float64] = field(repr=False)  # (3, 3) homogeneous, input px -> original px
    orig_width: int
    orig_height: int
    input_width: int
    input_height: int


@dataclass(frozen=True)
class TargetParams:
    """How ``ocr.data.targets.db.make_db_targets`` draws the DB maps (config ``data.targets``)."""

    shrink_ratio: float = 0.4  # r in the DB offset D = A (1 - r^2) / L
    thresh_min: float = 0.3  # threshold-map value away from text borders
    thresh_max: float = 0.7  # ... and on them
    min_text_size: float = 8.0  # polygons whose min-area-rectangle short side (px) is below are masked

    @classmethod
    def from_config(cls, targets: Mapping[str, float]) -> TargetParams:
        """Build from a config mapping that names every field exactly once (else ValueError naming them)."""
        expected = tuple(f.name for f in fields(cls))
        unknown = sorted(set(targets) - set(expected))
        missing = [key for key in expected if key not in targets]
        if unknown or missing:
            raise ValueError(
                f"targets: expected exactly the keys {expected}, got {sorted(targets)} "
                f"(unknown: {unknown}, missing: {missing})"
            )
        return cls(**{key: targets[key] for key in expected})


@dataclass(frozen=True)
class BatchCoding:
    """How the compact tensors of a Sample/Batch decode on the device (``ocr.data.coding.decode_batch``)."""

    mean: tuple[float, ...]  # per-channel RGB normalisation of the data config's transform, [0, 1] units
    std: tuple[float, ...]
    thresh_min: float  # threshold-map value of uint8 code 0
    thresh_max: float  # ... of code 255
    # How the device draws the DB maps from Batch["target_polygons"]; None when the maps travel drawn.
    targets: TargetParams | None = None


@dataclass(frozen=True)
class CropWarp:
    """How the device turns one sample's source region into its crop (``data.render_on=device``): the
    region's ``pool`` x ``pool`` blocks are averaged, then ``matrix`` resamples it bilinearly."""

    pool: int  # area-averaging factor (1: none); the region's sides are multiples of it
    matrix: npt.NDArray[np.float64] = field(repr=False)  # (3, 3) pooled-region px -> crop px, continuous
    out_size: tuple[int, int]  # (height, width) of the crop
    fill: float  # value (0..255) of the crop where it leaves the image


class RegionWarps(NamedTuple):
    """A batch's :class:`CropWarp` records, as ``ocr.data.device_warp.warp_regions`` reads them."""

    theta: Tensor  # (B, 2, 3) float32 affine_grid matrices: crop -> pooled canvas, normalised coordinates
    regions: tuple[tuple[int, int, int, int], ...]  # per sample: byte offset in images, height, width, pool
    canvas_size: tuple[int, int]  # (height, width) of the canvas the pooled regions are placed on
    out_size: tuple[int, int]  # (height, width) of the crops
    fill: float


class TargetPolygons(NamedTuple):
    """A batch's sanitised polygons in input px, padded, for ``ocr.data.device_targets.draw_db_targets``.

    The per-polygon decisions (the DB offset, drawn or masked) are ``make_db_targets``'s own, taken on the
    host in collate; the device draws the pixels.
    """

    points: Tensor  # (B, N, K, 2) float32; a polygon of fewer points repeats its last one, padding is 0
    offsets: Tensor  # (B, N) float32 DB offset D of each drawn polygon, px (0 elsewhere)
    roles: Tensor  # (B, N) uint8: 0 padding, 1 drawn (prob and threshold maps), 2 masked (prob_mask 0)
    # (B, N, 6) float32 frame of a rectangle (make_db_targets' closed form): centre x, y, unit axis x, y,
    # half sizes along the axis and its normal; zeros for other polygons
    rects: Tensor
    # (3, B, N, 4) int32 tiles each polygon reaches with its threshold field as a polygon [0] or as a
    # rectangle [1], and with its fill [2]: first column, first row, columns, count
    tiles: Tensor
    num_tiles: tuple[int, int, int]  # sum of the counts of each


class Sample(TypedDict):
    """One image after transforms and target generation (output of ``Dataset.__getitem__``), compact.

    With ``data.render_on=device`` a training sample carries its source region and ``warp`` instead of
    the crop, and every labelled sample its sanitised polygons instead of the four maps.
    """

    image: Tensor  # (3, H, W) uint8 RGB, not normalised; with warp: (3, h, w) source region (HWC memory)
    prob_map: Tensor | None  # (1, H, W) uint8 in {0, 1}; None with target_polygons
    prob_mask: Tensor | None  # (1, H, W) uint8 in {0, 1}
    thresh_map: Tensor | None  # (1, H, W) uint8 codes 0..255 over [coding.thresh_min, coding.thresh_max]
    thresh_mask: Tensor | None  # (1, H, W) uint8 in {0, 1}
    warp: CropWarp | None  # how the device makes the crop of ``image``; None when image is the input
    target_polygons: list[Polygon] | None  # input px, sanitised, drawn on the device; None with maps
    target_ignore: list[bool] | None  # one don't-care flag per target polygon
    polygons: list[Polygon]  # ground truth in ORIGINAL px (empty for predict)
    ignore: list[bool]  # one flag per polygon: don't-care region
    texts: list[str | None]  # transcription per polygon when known
    geometry: Geometry
    image_id: str  # file name relative to the split's image folder
    # polygons removed/repaired by reason: at the scan (annotation) and, as "input_px/<reason>", in input px
    sanitation: dict[str, int]
    coding: BatchCoding  # how the tensors above decode
    photometric: Tensor | None  # (P,) float32 augmentation parameters (ocr.data.photometric); None in eval


class Batch(TypedDict):
    """Collated samples. As collated (CPU, and on the wire to the device) the tensors are compact, with
    the dtypes of :class:`Sample`; with ``warp`` the images are the samples' source regions (HWC uint8,
    one 1-D buffer), and with ``target_polygons`` the four maps are None. ``ocr.data.coding.decode_batch``
    (the datamodule's ``on_after_batch_transfer``) gives the types below, which the network and the loss
    read."""

    images: Tensor  # (B, 3, H, W) float32, normalised with coding.mean/std
    prob_map: Tensor  # (B, 1, H, W) float32 in {0, 1}
    prob_mask: Tensor  # (B, 1, H, W) float32 in {0, 1}
    thresh_map: Tensor  # (B, 1, H, W) float32 in [thresh_min, thresh_max]
    thresh_mask: Tensor  # (B, 1, H, W) float32 in {0, 1}
    polygons: list[list[Polygon]]  # ground truth in ORIGINAL px
    ignore: list[list[bool]]
    texts: list[list[str | None]]
    geometry: list[Geometry]
    image_id: list[str]
    sanitation: dict[str, int]  # summed over the batch; the module aggregates it per epoch
    coding: BatchCoding  # the samples' one coding
    photometric: Tensor | None  # (B, P) float32, host-side; applied by decode_batch; None in eval
    warp: RegionWarps | None  # host-side: how decode_batch makes the crops of the regions; None in eval
    target_polygons: TargetPolygons | None  # host-side: the maps decode_batch draws; None with maps


class Prediction(TypedDict):
    """Detections of one image (``DetectionModule.predict_step``), in ORIGINAL px."""

    image_id: str  # file name relative to the predicted image folder
    polygons: list[Polygon]
    scores: list[float]  # one mean probability per polygon


class DBOutput(NamedTuple):
    """DBNet head output, all logits of shape (B, 1, H, W); probabilities are their sigmoid."""

    prob_logits: Tensor
    thresh_logits: Tensor
    binary_logits: Tensor  # k * (P - T) in logit form
