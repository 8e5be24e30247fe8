"""The training crop on the batch's device: the device half of ``TrainTransform`` (``data.render_on=device``).

The worker ships the source region the crop reads and a :class:`~ocr.types.CropWarp`; here each region
is average-pooled by its integer factor (OpenCV's integer INTER_AREA) onto one canvas and ONE batched
bilinear ``grid_sample`` makes every crop; a fourth channel marks the image, so the border value blends
in as OpenCV's constant border does. ``ocr.data.warp.render_crop`` is the CPU reference.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import Tensor

from ocr.data.photometric import to_device
from ocr.types import CropWarp, RegionWarps

__all__ = ["pack_regions", "warp_regions"]


def pack_regions(
    regions: Sequence[Tensor], warps: Sequence[CropWarp], out: Tensor
) -> tuple[Tensor, RegionWarps]:
    """Copy the samples' (3, h, w) uint8 regions into ``out`` (1-D, their total bytes) as HWC bytes and
    describe them for :func:`warp_regions` (worker side). ValueError: the warps differ in crop size or
    border value, or ``out`` has the wrong size."""
    if len({(w.out_size, w.fill) for w in warps}) != 1:
        raise ValueError(
            f"pack_regions: a batch's crops must share one size and border value, got "
            f"{sorted({(w.out_size, w.fill) for w in warps})}"
        )
    sizes = [(int(r.shape[1]), int(r.shape[2])) for r in regions]
    if out.numel() != sum(3 * h * w for h, w in sizes):
        raise ValueError(f"pack_regions: out has {out.numel()} bytes for regions {sizes} (3 bytes per px)")
    placed, offset = [], 0
    for region, (height, width), warp in zip(regions, sizes, warps, strict=True):
        out[offset : offset + 3 * height * width].view(height, width, 3).copy_(region.permute(1, 2, 0))
        placed.append((offset, height, width, warp.pool))
        offset += 3 * height * width
    canvas = (
        max(h // w.pool for (h, _), w in zip(sizes, warps, strict=True)),
        max(v // w.pool for (_, v), w in zip(sizes, warps, strict=True)),
    )
    theta = np.stack([_theta(w.matrix, canvas, w.out_size) for w in warps]).astype(np.float32)
    return out, RegionWarps(torch.from_numpy(theta), tuple(placed), canvas, warps[0].out_size, warps[0].fill)


def _theta(
    matrix: npt.NDArray[np.float64], canvas: tuple[int, int], out_size: tuple[int, int]
) -> npt.NDArray[np.float64]:
    """(2, 3) ``affine_grid`` matrix: normalised crop coordinates -> normalised canvas coordinates
    (``align_corners=False``: -1 and 1 are the outer edges, as continuous coordinates 0 and the size)."""
    (canvas_h, canvas_w), (out_h, out_w) = canvas, out_size
    to_canvas = np.array([[2.0 / canvas_w, 0.0, -1.0], [0.0, 2.0 / canvas_h, -1.0], [0.0, 0.0, 1.0]])
    from_out = np.array([[out_w / 2.0, 0.0, out_w / 2.0], [0.0, out_h / 2.0, out_h / 2.0], [0.0, 0.0, 1.0]])
    return (to_canvas @ np.linalg.inv(matrix) @ from_out)[:2]


def warp_regions(images: Tensor, warps: RegionWarps) -> Tensor:
    """(B, 3, H, W) float32 RGB crops in [0, 1] of the 1-D uint8 ``images`` :func:`pack_regions` packed, on
    their device (TypeError: not 1-D uint8)."""
    if images.dtype != torch.uint8 or images.ndim != 1:
        raise TypeError(
            f"images: expected the packed source regions, 1-D uint8 (data.render_on=device), got "
            f"{tuple(images.shape)} {images.dtype} on {images.device}"
        )
    canvas_h, canvas_w = warps.canvas_size
    # RGB, then 1 where the image is: sampled like the pixels, it is the weight the image got.
    canvas = torch.zeros((len(warps.regions), 4, canvas_h, canvas_w), device=images.device)
    for index, (offset, height, width, pool) in enumerate(warps.regions):
        region = images[offset : offset + 3 * height * width].view(1, height, width, 3).permute(0, 3, 1, 2)
        pooled = F.avg_pool2d(region.float(), pool) if pool > 1 else region  # (1, 3, h / pool, w / pool)
        canvas[index, :3, : height // pool, : width // pool] = pooled[0]
        canvas[index, 3, : height // pool, : width // pool] = 1.0
    theta = to_device(warps.theta, images.device)
    out_h, out_w = warps.out_size
    grid = F.affine_grid(theta, [len(warps.regions), 4, out_h, out_w], align_corners=False)
    sampled = F.grid_sample(canvas, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return (sampled[:, :3] + (1.0 - sampled[:, 3:]) * warps.fill) / 255.0
