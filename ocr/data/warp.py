"""The training crop's source region (:func:`source_region`, for ``TrainTransform.crop_region``) and its warp
on the CPU (:func:`render_crop`: ``data.render_on=worker``, and the device warp's reference). Coordinates
are continuous (pixel ``i`` spans ``[i, i + 1)``); OpenCV's put pixel centres at integers."""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

from ocr.types import CropWarp

__all__ = ["pixel_index_matrix", "render_crop", "source_region"]


def render_crop(region: npt.NDArray[np.uint8], warp: CropWarp) -> npt.NDArray[np.uint8]:
    """(H, W, 3) uint8 crop of a source region on the CPU (the reference of ``warp_regions``): OpenCV's
    integer INTER_AREA by ``warp.pool``, then a bilinear ``warpAffine``."""
    if warp.pool > 1:
        height, width = region.shape[:2]
        size = (width // warp.pool, height // warp.pool)
        region = cv2.resize(region, size, interpolation=cv2.INTER_AREA)  # type: ignore[assignment]
    out_height, out_width = warp.out_size
    return cv2.warpAffine(  # type: ignore[return-value]  # cv2 stubs: MatLike
        region,
        pixel_index_matrix(warp.matrix)[:2],
        (out_width, out_height),
        flags=cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_CONSTANT,
        borderValue=(warp.fill,) * 3,
    )


def source_region(
    image: npt.NDArray[np.uint8],
    window: tuple[float, float, float, float],
    frame_per_source: float,
    factor: float,
) -> tuple[npt.NDArray[np.uint8], int, npt.NDArray[np.float64]]:
    """The part of ``image`` ((H, W, 3) uint8) the crop ``window`` (frame px) reads, in whole blocks of the
    integer area-averaging factor ``k`` nearest ``1 / factor`` (1 unless downscaling): integer INTER_AREA is
    10x faster than a fractional one and the warp's bilinear sampling does the rest. A window that misses the
    image (a rotated image's box corners) gets its nearest edge pixels, never an empty array. Returns the (h,
    w, 3) view, ``k`` and the (3, 3) matrix from pooled-region px to frame px."""
    x0, y0, x1, y1 = window
    margin = 2.0 / factor + 2.0  # source px: area support plus the warp's bilinear neighbours
    height, width = image.shape[:2]
    sx0 = min(width - 1, max(0, int(np.floor(x0 / frame_per_source - margin))))
    sy0 = min(height - 1, max(0, int(np.floor(y0 / frame_per_source - margin))))
    span_x = max(1, min(width, int(np.ceil(x1 / frame_per_source + margin))) - sx0)
    span_y = max(1, min(height, int(np.ceil(y1 / frame_per_source + margin))) - sy0)
    k = min(max(1, round(1.0 / factor)), span_x, span_y)
    # whole k x k blocks, so that OpenCV takes its integer path (a partial block at the image edge is left)
    sx1, sy1 = sx0 + span_x // k * k, sy0 + span_y // k * k
    step, fps = k * frame_per_source, frame_per_source  # region px -> frame px
    return (
        image[sy0:sy1, sx0:sx1],
        k,
        np.array([[step, 0.0, sx0 * fps], [0.0, step, sy0 * fps], [0.0, 0.0, 1.0]]),
    )


def pixel_index_matrix(matrix: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Convert a continuous-coordinate transform to OpenCV's pixel-centre-at-integer convention."""
    shift = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]])
    return np.linalg.inv(shift) @ matrix @ shift
