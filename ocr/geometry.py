"""Pure geometry helpers: the input->original mapping record and its application to polygons."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ocr.types import Geometry, Polygon

__all__ = ["apply_matrix", "letterbox_geometry", "to_original", "to_input"]


def apply_matrix(points: npt.ArrayLike, matrix: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    """Apply a (3, 3) homogeneous transform to (K, 2) points; returns (K, 2) float32."""
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    homo = np.concatenate([pts, np.ones((len(pts), 1))], axis=1) @ matrix.T  # (K, 3)
    w = homo[:, 2:3]
    w = np.where(np.abs(w) < 1e-12, 1e-12, w)
    return (homo[:, :2] / w).astype(np.float32)


def letterbox_geometry(orig_width: int, orig_height: int, long_side: int) -> tuple[Geometry, float]:
    """Geometry of an aspect-preserving resize to ``long_side`` padded at the bottom/right to a square.

    Returns:
        The record (input px -> original px) and the scale factor original -> input.
    """
    scale = long_side / max(orig_width, orig_height)
    inv = np.array([[1.0 / scale, 0.0, 0.0], [0.0, 1.0 / scale, 0.0], [0.0, 0.0, 1.0]])
    geometry = Geometry(inv, int(orig_width), int(orig_height), int(long_side), int(long_side))
    return geometry, scale


def to_original(polygons: list[Polygon], geometry: Geometry) -> list[Polygon]:
    """Map polygons from input px to original px (the one inverse used everywhere)."""
    return [apply_matrix(p, geometry.matrix) for p in polygons]


def to_input(polygons: list[Polygon], geometry: Geometry) -> list[Polygon]:
    """Map polygons from original px to input px."""
    inv = np.linalg.inv(geometry.matrix)
    # numpy's stubs type inv() of a float64 matrix as floating[Any].
    return [apply_matrix(p, inv) for p in polygons]  # type: ignore[arg-type]
