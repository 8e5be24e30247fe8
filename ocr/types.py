"""Data contracts shared by the data pipeline, the model, the metric and the runners.

Coordinate frames (see docs/architecture.md):
- *input px*: pixels of the network input tensor (after resize/letterbox/crop).
- *original px*: pixels of the source image after its EXIF orientation has been applied.
A :class:`Geometry` maps input px to original px; :func:`ocr.geometry.to_original` applies it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, TypedDict

import numpy as np
import numpy.typing as npt
from torch import Tensor

__all__ = ["Geometry", "Sample", "Batch", "DBOutput", "Polygon"]

Polygon = npt.NDArray[np.float32]  # (K, 2) x, y with K >= 3


@dataclass(frozen=True)
class Geometry:
    """How network-input pixels map back to original-image pixels.

    Attributes:
        matrix: (3, 3) float64 homogeneous transform, input px -> original px.
        orig_width: original image width after EXIF orientation.
        orig_height: original image height after EXIF orientation.
        input_width: network input width the matrix starts from.
        input_height: network input height the matrix starts from.
    """

    matrix: npt.NDArray[np.float64] = field(repr=False)
    orig_width: int
    orig_height: int
    input_width: int
    input_height: int


class Sample(TypedDict):
    """One image after transforms and target generation (output of ``Dataset.__getitem__``)."""

    image: Tensor  # (3, H, W) float32, normalised
    prob_map: Tensor  # (1, H, W) float32 in {0, 1}
    prob_mask: Tensor  # (1, H, W) float32 in {0, 1}
    thresh_map: Tensor  # (1, H, W) float32 in [thresh_min, thresh_max]
    thresh_mask: Tensor  # (1, H, W) float32 in {0, 1}
    polygons: list[Polygon]  # ground truth in ORIGINAL px (empty for predict)
    ignore: list[bool]  # one flag per polygon: don't-care region
    texts: list[str | None]  # transcription per polygon when known
    geometry: Geometry
    image_id: str  # file name relative to the split's image folder
    sanitation: dict[str, int]  # polygons removed/repaired by reason while building this sample


class Batch(TypedDict):
    """Collated samples; CPU tensors until Lightning moves them to the device."""

    images: Tensor  # (B, 3, H, W) float32, normalised
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


class DBOutput(NamedTuple):
    """DBNet head output, all logits of shape (B, 1, H, W); probabilities are their sigmoid."""

    prob_logits: Tensor
    thresh_logits: Tensor
    binary_logits: Tensor  # k * (P - T) in logit form
