"""Training curves as one PNG drawn with OpenCV: train loss and its parts, learning rate, val P/R/H."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt

from ocr.utils.io import atomic_write_bytes

__all__ = ["PANELS", "Series", "draw_curves", "write_curves"]

Series = Mapping[str, Sequence[tuple[int, float]]]  # name -> [(global step, value), ...]

# (panel title, the series it draws, log scale); a series missing from the run is left out.
PANELS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("train loss", ("train/loss", "train/loss/prob", "train/loss/thresh", "train/loss/binary"), True),
    ("learning rate", ("lr",), False),
    ("validation CLEval", ("val/hmean", "val/precision", "val/recall"), False),
)
COLORS_BGR = ((180, 119, 31), (14, 127, 255), (44, 160, 44), (40, 39, 214))
WIDTH, PANEL_HEIGHT = 900, 250
LEFT, RIGHT, TOP, BOTTOM = 80, 20, 30, 40
FONT = cv2.FONT_HERSHEY_SIMPLEX


def draw_curves(series: Series) -> npt.NDArray[np.uint8]:
    """An (H, 900, 3) BGR image, one panel per entry of :data:`PANELS`, steps on a shared x axis."""
    points = [p for values in series.values() for p in values]
    last_step = max((step for step, _ in points), default=1)
    panels = [_panel(title, names, log, series, max(last_step, 1)) for title, names, log in PANELS]
    return np.concatenate(panels, axis=0)


def write_curves(path: str | Path, series: Series) -> Path:
    """Draw :func:`draw_curves` into ``path`` as PNG (atomically, directory created first)."""
    ok, png = cv2.imencode(".png", draw_curves(series), [cv2.IMWRITE_PNG_COMPRESSION, 9])
    if not ok:
        raise ValueError(f"{path}: OpenCV could not encode the training curves as PNG")
    return atomic_write_bytes(path, png.tobytes())


def _panel(
    title: str, names: Sequence[str], log: bool, series: Series, last_step: int
) -> npt.NDArray[np.uint8]:
    canvas = np.full((PANEL_HEIGHT, WIDTH, 3), 255, np.uint8)
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, TOP, PANEL_HEIGHT - BOTTOM
    cv2.rectangle(canvas, (x0, y0), (x1, y1), (160, 160, 160), 1)
    present = [(n, np.asarray(series[n], dtype=np.float64).reshape(-1, 2)) for n in names if series.get(n)]
    present = [(n, v[np.isfinite(v[:, 1])]) for n, v in present]
    present = [(n, v) for n, v in present if len(v)]
    for step in np.linspace(0, last_step, 6):
        x = x0 + (x1 - x0) * step / last_step
        cv2.putText(canvas, f"{step:.0f}", (int(x) - 10, y1 + 18), FONT, 0.4, (80, 80, 80), 1, cv2.LINE_AA)
    cv2.putText(canvas, "step", (x1 - 30, y1 + 34), FONT, 0.4, (80, 80, 80), 1, cv2.LINE_AA)
    if not present:
        cv2.putText(canvas, title, (x0, y0 - 10), FONT, 0.55, (0, 0, 0), 1, cv2.LINE_AA)
        cv2.putText(canvas, "no values", (x0 + 10, y0 + 30), FONT, 0.5, (120, 120, 120), 1, cv2.LINE_AA)
        return canvas
    values = np.concatenate([v[:, 1] for _, v in present])
    log = log and bool((values > 0).all())
    title = f"{title} (log scale)" if log else title
    cv2.putText(canvas, title, (x0, y0 - 10), FONT, 0.55, (0, 0, 0), 1, cv2.LINE_AA)
    transform = np.log10 if log else (lambda a: a)
    low, high = float(transform(values).min()), float(transform(values).max())
    if math.isclose(low, high):
        low, high = low - 0.5, high + 0.5
    for frac in (0.0, 0.5, 1.0):
        y = y1 - (y1 - y0) * frac
        label = low + (high - low) * frac
        text = f"{10**label:.3g}" if log else f"{label:.3g}"
        cv2.line(canvas, (x0, int(y)), (x1, int(y)), (225, 225, 225), 1)
        cv2.putText(canvas, text, (4, int(y) + 4), FONT, 0.4, (80, 80, 80), 1, cv2.LINE_AA)
    legend_x = x0 + 10
    for (name, v), color in zip(present, COLORS_BGR, strict=False):
        xs = x0 + (x1 - x0) * v[:, 0] / last_step
        ys = y1 - (y1 - y0) * (transform(v[:, 1]) - low) / (high - low)
        pts = np.round(np.stack([xs, ys], axis=1)).astype(np.int32).reshape(-1, 1, 2)
        cv2.polylines(canvas, [pts], False, color, 2, cv2.LINE_AA)
        if len(v) < 30:
            for px, py in pts.reshape(-1, 2):
                cv2.circle(canvas, (int(px), int(py)), 3, color, -1, cv2.LINE_AA)
        cv2.line(canvas, (legend_x, y0 + 12), (legend_x + 20, y0 + 12), color, 2)
        cv2.putText(canvas, name, (legend_x + 25, y0 + 16), FONT, 0.42, (0, 0, 0), 1, cv2.LINE_AA)
        legend_x += 40 + 8 * len(name)
    return canvas
