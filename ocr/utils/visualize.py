"""Drawing helpers for overlays (data report, prediction overlays)."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np
import numpy.typing as npt

__all__ = ["draw_polygons", "colorize_map"]

KEEP_COLOR = (0, 200, 0)
IGNORE_COLOR = (230, 40, 40)


def draw_polygons(
    image_rgb: npt.NDArray[np.uint8],
    polygons: Sequence[np.ndarray],
    ignore: Sequence[bool] | None = None,
    thickness: int = 2,
) -> npt.NDArray[np.uint8]:
    """A copy of ``image_rgb`` (H, W, 3) with polygons outlined: green, or red for don't-care ones."""
    canvas = np.ascontiguousarray(image_rgb.copy())
    flags = ignore if ignore is not None else [False] * len(polygons)
    for polygon, is_ignored in zip(polygons, flags, strict=True):
        points = np.round(np.asarray(polygon, dtype=np.float64)).astype(np.int32).reshape(-1, 1, 2)
        cv2.polylines(canvas, [points], True, IGNORE_COLOR if is_ignored else KEEP_COLOR, thickness)
    return canvas


def colorize_map(
    values: npt.NDArray[np.floating], vmin: float = 0.0, vmax: float = 1.0
) -> npt.NDArray[np.uint8]:
    """A (H, W) map in [vmin, vmax] as an (H, W, 3) RGB heat map."""
    scaled = np.clip((values - vmin) / max(vmax - vmin, 1e-6), 0.0, 1.0)
    bgr = cv2.applyColorMap((scaled * 255).astype(np.uint8), cv2.COLORMAP_VIRIDIS)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
