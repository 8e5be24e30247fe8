"""Drawing helpers for overlays (data report, prediction overlays, validation overlays) and the outcome
colours that report.html, the web app and the validation overlays share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

__all__ = [
    "OUTCOME_COLOURS",
    "colorize_map",
    "draw_outcomes",
    "draw_polygons",
    "encode_image",
    "outcome_css",
]

KEEP_COLOR = (0, 200, 0)
IGNORE_COLOR = (230, 40, 40)
# CLEval outcome -> colour (ocr.metrics.cleval.outcomes; "unlabelled": a detection without ground truth).
OUTCOME_COLOURS = {
    "matched": "#1a9850",
    "split": "#fdae61",
    "merged": "#9e4fd6",
    "missed": "#d73027",
    "false_positive": "#2c7bb6",
    "ignored": "#9a9a9a",
    "unlabelled": "#1a9850",
}


def draw_polygons(
    image_rgb: npt.NDArray[np.uint8],
    polygons: Sequence[np.ndarray],
    ignore: Sequence[bool] | None = None,
    thickness: int = 2,
) -> npt.NDArray[np.uint8]:
    """A copy of ``image_rgb`` (H, W, 3) with polygons outlined: green, or red for don't-care ones."""
    canvas = np.ascontiguousarray(image_rgb.copy())
    flags = ignore if ignore is not None else [False] * len(polygons)
    _outline(canvas, polygons, [IGNORE_COLOR if f else KEEP_COLOR for f in flags], thickness, 1.0)
    return canvas


def outcome_css() -> str:
    """The ``:root`` CSS block (``--matched: #1a9850; ...``) report.html and the web app colour boxes with."""
    return ":root { " + " ".join(f"--{name}: {hex_};" for name, hex_ in OUTCOME_COLOURS.items()) + " }"


def draw_outcomes(
    image_rgb: npt.NDArray[np.uint8],
    scale: float,
    card: Mapping[str, Any],
    label: str,
) -> npt.NDArray[np.uint8]:
    """A copy of ``image_rgb`` with a report card's boxes (:func:`ocr.reporting.html.image_card`: flat
    ``gt``/``det`` coordinates in original px, ``gt_outcome``/``det_outcome``) in the page's outcome
    colours, ground truth 1 px and detections 2 px (the page: dashed 1.5 px, solid 2 px), and ``label``
    at the top left; ``scale``: image px per original px."""
    canvas = np.ascontiguousarray(image_rgb.copy())
    for kind, thickness in (("gt", 1), ("det", 2)):
        polygons = [np.reshape(flat, (-1, 2)) for flat in card.get(kind, [])]
        colours = [_rgb(OUTCOME_COLOURS[o]) for o in card.get(f"{kind}_outcome", [])]
        _outline(canvas, polygons, colours, thickness, scale)
    cv2.rectangle(canvas, (0, 0), (8 + 8 * len(label), 20), (255, 255, 255), -1)
    cv2.putText(canvas, label, (4, 15), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
    return canvas


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


def _outline(
    canvas: npt.NDArray[np.uint8],
    polygons: Sequence[npt.ArrayLike],
    colours: Sequence[tuple[int, int, int]],
    thickness: int,
    scale: float,
) -> None:
    for polygon, colour in zip(polygons, colours, strict=True):
        points = np.round(np.asarray(polygon, dtype=np.float64) * scale).astype(np.int32).reshape(-1, 1, 2)
        cv2.polylines(canvas, [points], True, colour, thickness)


def colorize_map(
    values: npt.NDArray[np.floating], vmin: float = 0.0, vmax: float = 1.0
) -> npt.NDArray[np.uint8]:
    """A (H, W) map in [vmin, vmax] as an (H, W, 3) RGB heat map."""
    scaled = np.clip((values - vmin) / max(vmax - vmin, 1e-6), 0.0, 1.0)
    bgr = cv2.applyColorMap((scaled * 255).astype(np.uint8), cv2.COLORMAP_VIRIDIS)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def encode_image(image_rgb: npt.NDArray[np.uint8], ext: str, what: str, params: Sequence[int] = ()) -> bytes:
    """An (H, W, 3) RGB image as ``.png`` or ``.jpg`` bytes (OpenCV ``params``); ``what`` names it when
    OpenCV cannot encode it."""
    ok, data = cv2.imencode(ext, cv2.cvtColor(image_rgb, cv2.COLOR_RGB2BGR), list(params))
    if not ok:
        raise ValueError(f"{what}: OpenCV could not encode {image_rgb.shape} {image_rgb.dtype} as {ext}")
    return data.tobytes()
