"""Submission CSV of the receipt competitions: ``filename,polygons``, one row per image.

Each polygon is ``x1 y1 x2 y2 ...`` in integer original-image pixels; polygons are joined by ``|``; an image
without detections has an empty ``polygons`` field.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ocr.utils.errors import UsageError
from ocr.utils.io import atomic_write_csv

__all__ = ["HEADER", "SubmissionError", "read_submission_csv", "submission_points", "write_submission_csv"]

HEADER = ("filename", "polygons")


class SubmissionError(UsageError, ValueError):
    """A submission CSV is malformed; the message names the file and the row."""


def submission_points(polygon: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """``polygon``'s points rounded to integer pixels (float32). Predictions are rounded once, where they
    are made (``ocr.evaluation.host_work``), so every output and ``runners/evaluate.py`` of this CSV score
    the same polygons as ``runners/test.py``."""
    return np.rint(np.asarray(polygon, dtype=np.float64)).astype(np.float32)


def _format_polygon(polygon: npt.ArrayLike, name: str, index: int) -> str:
    pts = np.asarray(polygon, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 2 or len(pts) < 3 or not np.isfinite(pts).all():
        raise ValueError(
            f"{name}: polygon {index}: expected finite (K >= 3, 2) points, got shape {pts.shape}"
        )
    return " ".join(str(int(v)) for v in submission_points(pts).astype(np.int64).ravel())


def write_submission_csv(path: str | Path, predictions: Mapping[str, Sequence[npt.ArrayLike]]) -> Path:
    """Write the submission atomically (rows in mapping order; coordinates rounded to integers);
    ValueError names a polygon that is not finite (K >= 3, 2)."""
    rows = [
        [name, "|".join(_format_polygon(p, name, i) for i, p in enumerate(polygons))]
        for name, polygons in predictions.items()
    ]
    return atomic_write_csv(path, [HEADER, *rows])


def _parse_polygons(field: str, where: str) -> list[npt.NDArray[np.float32]]:
    polygons = []
    for k, chunk in enumerate(field.split("|") if field.strip() else []):
        try:
            values = [float(v) for v in chunk.split()]
        except ValueError:
            raise SubmissionError(
                f"{where}: polygon {k}: expected numbers 'x1 y1 x2 y2 ...', got {chunk!r}"
            ) from None
        with np.errstate(over="ignore"):  # beyond float32 (1e39) becomes inf, refused below
            points = np.asarray(values, dtype=np.float32)
        if len(values) < 6 or len(values) % 2 or not np.isfinite(points).all():
            raise SubmissionError(
                f"{where}: polygon {k}: expected an even count >= 6 of finite numbers within float32 "
                f"range, got {len(values)}: {chunk!r}"
            )
        polygons.append(points.reshape(-1, 2))
    return polygons


def read_submission_csv(path: str | Path) -> dict[str, list[npt.NDArray[np.float32]]]:
    """Read a submission into ``{filename: [(K, 2) float32 polygons]}``; SubmissionError names the file
    and line of a wrong header, a row without two fields, a duplicate file name or a bad polygon."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"submission CSV not found: {path}")
    with path.open(newline="", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))
    if not rows or tuple(c.strip() for c in rows[0]) != HEADER:
        raise SubmissionError(
            f"{path}:1: expected header {','.join(HEADER)!r}, got {rows[0] if rows else 'empty file'}"
        )
    out: dict[str, list[npt.NDArray[np.float32]]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        where = f"{path}:{line}"
        if len(row) != 2:
            raise SubmissionError(f"{where}: expected 2 fields (filename,polygons), got {len(row)}: {row!r}")
        name = row[0].strip()
        if not name:
            raise SubmissionError(f"{where}: empty filename")
        if name in out:
            raise SubmissionError(f"{where}: duplicate filename {name!r}")
        out[name] = _parse_polygons(row[1], where)
    return out
