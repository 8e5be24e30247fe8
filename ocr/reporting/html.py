"""The results page: ``report.html`` in the run directory, one card per image, opened from the file system.

Each card shows the image with the predicted polygons and (when labelled) the ground truth, coloured by
CLEval outcome (:mod:`ocr.metrics.cleval.outcomes`), the image's P/R/H and counts, and the probability map
on demand. Thumbnails up to ``inline_max_bytes`` are inlined; larger ones, and the probability maps, are
files in ``report_files/`` beside the page, loaded lazily.
"""

from __future__ import annotations

import base64
import html
import json
import logging
from collections.abc import Mapping, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from ocr.data.images import ImageReadError, read_image
from ocr.metrics.cleval.evaluate import SCORE_FIELDS, ImageResult, match_image, summarise
from ocr.metrics.cleval.options import CLEvalOptions
from ocr.metrics.cleval.outcomes import OUTCOMES, BoxOutcomes, box_outcomes, count_outcomes
from ocr.reporting.analysis import ScoreAnalysis
from ocr.utils.io import atomic_write_bytes, atomic_write_text
from ocr.utils.visualize import colorize_map, encode_image, outcome_css

__all__ = ["REPORT_NAME", "image_card", "thumbnail", "with_overlay_script", "write_report"]

log = logging.getLogger(__name__)

REPORT_NAME = "report.html"
FILES_DIR = "report_files"
THUMB_LONG_SIDE = 1000
JPEG_QUALITY = 80
OVERLAY_PLACEHOLDER = "/*__OVERLAY_JS__*/"
COLOURS_PLACEHOLDER = "/*__OUTCOME_COLOURS__*/"
JSON_IN_SCRIPT = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def write_report(
    directory: Path,
    records: Sequence[Mapping[str, Any]],
    image_dir: str | Path,
    options: CLEvalOptions | None,
    title: str,
    analysis: ScoreAnalysis | None = None,
    inline_max_bytes: int = 24 * 1024,
) -> Path:
    """Write ``directory/report.html`` (and ``report_files/``); returns the page's path. ``records``: per
    image ``image_id`` (under ``image_dir``), ``polygons`` ((K, 2) original px) and ``scores``; labelled ones
    add ``gt_polygons``, ``gt_ignore``, ``gt_texts`` (scored with ``options``: ValueError without), and
    ``prob_map`` (uint8 (h, w), original frame) when kept. ``analysis`` (``analyse_records``) is shown
    above the cards."""
    labelled = bool(records) and "gt_polygons" in records[0]
    if labelled and options is None:
        raise ValueError(f"{directory / REPORT_NAME}: labelled records need CLEval options, got None")
    cards, results, unreadable = [], [], []
    for index, record in enumerate(records):
        card, result = image_card(index, record, options if labelled else None)
        image, size = _thumbnail(Path(image_dir) / record["image_id"])
        if image is None:
            unreadable.append(record["image_id"])
        else:
            card["src"] = _source(directory, f"img{index:05d}.jpg", image, "image/jpeg", inline_max_bytes)
        # An unreadable image is framed by its probability map, else by a unit square.
        prob = record.get("prob_map")
        card["size"] = size or ([int(prob.shape[1]), int(prob.shape[0])] if prob is not None else [1, 1])
        if prob is not None:
            card["prob"] = _source(directory, f"prob{index:05d}.png", _png(prob), "", 0)
        cards.append(card)
        if result is not None:
            results.append(result)
    if unreadable:
        log.warning("report: %d images could not be read: %s", len(unreadable), ", ".join(unreadable[:10]))
    data = {"title": title, "labelled": labelled, "outcomes": OUTCOMES, "cards": cards}
    if labelled and options is not None:
        scores = summarise(results, options.mode)
        data["totals"] = {"mode": options.mode} | {k: getattr(scores, k) for k in SCORE_FIELDS}
    if analysis is not None:
        data["analysis"] = {k: v for k, v in analysis.to_dict().items() if k != "images"}
    template = with_overlay_script(
        files("ocr.reporting").joinpath("report_template.html").read_text(encoding="utf-8")
    )
    # A "</script>" or "<!--" in a name would end the data block early or swallow the next script:
    # no "<", ">" or "&" is left raw in the JSON (JSON.parse reads the escapes as the same characters).
    payload = json.dumps(data, separators=(",", ":")).translate(JSON_IN_SCRIPT)
    page = template.replace("__TITLE__", html.escape(title)).replace("__REPORT_DATA__", payload)
    path = atomic_write_text(directory / REPORT_NAME, page)
    log.info("Wrote %s (%d images)", path, len(cards))
    return path


def with_overlay_script(page: str) -> str:
    """``page`` with ``overlay.js`` (labels, ``el``, ``pct``, the polygons' SVG) and the outcome colours
    (:func:`ocr.utils.visualize.outcome_css`) inlined at their placeholders, so report.html and the serve
    page draw boxes with one script, in the validation overlays' colours."""
    script = files("ocr.reporting").joinpath("overlay.js").read_text(encoding="utf-8")
    for placeholder in (OVERLAY_PLACEHOLDER, COLOURS_PLACEHOLDER):
        if placeholder not in page:
            raise ValueError(f"expected the placeholder {placeholder} in the page")
    return page.replace(OVERLAY_PLACEHOLDER, script).replace(COLOURS_PLACEHOLDER, outcome_css())


def image_card(
    index: int,
    record: Mapping[str, Any],
    options: CLEvalOptions | None,
    scored: tuple[BoxOutcomes, ImageResult] | None = None,
) -> tuple[dict[str, Any], ImageResult | None]:
    """The card's data (boxes as flat coordinates, outcomes, P/R/H and counts when labelled) and, when
    labelled, the image's result; the web app (``ocr.serve``) shows the same card, the validation
    overlays (:mod:`ocr.reporting.overlays`) draw it. ``scored``: the outcomes and result validation
    already has (no matching here)."""
    preds = [np.asarray(p, dtype=np.float64) for p in record["polygons"]]
    card: dict[str, Any] = {
        "id": index,
        "name": record["image_id"],
        "det": [_flat(p) for p in preds],
        "scores": [round(float(s), 3) for s in record["scores"]],
    }
    gts = [np.asarray(p, dtype=np.float64) for p in record.get("gt_polygons", [])]
    if scored is None:
        if options is None:
            card["det_outcome"] = ["unlabelled"] * len(preds)
            return card, None
        image = match_image(preds, gts, record["gt_ignore"], record["gt_texts"], options)
        scored = box_outcomes(image, len(gts), len(preds)), image.result
    outcomes, result = scored
    gt_counts, det_counts = count_outcomes(outcomes.gt), count_outcomes(outcomes.det)
    card |= {
        "gt": [_flat(p) for p in gts],
        "gt_outcome": outcomes.gt,
        "det_outcome": outcomes.det,
        "precision": result.precision,
        "recall": result.recall,
        "hmean": result.hmean,
        "counts": {
            "gt": result.num_gt,
            "det": result.num_det,
            "matched": gt_counts["matched"],
            "split": result.num_split,
            "merged": result.num_merged,
            "missed": gt_counts["missed"],
            "false_positive": det_counts["false_positive"],
        },
    }
    return card, result


def _flat(polygon: npt.NDArray[np.float64]) -> list[float]:
    return [round(float(v), 1) for v in polygon.reshape(-1)]


def thumbnail(path: Path, long_side: int) -> tuple[npt.NDArray[np.uint8], int, int]:
    """The upright RGB image at long side <= ``long_side`` and its original width and height
    (ImageReadError, OSError: the image cannot be read)."""
    decoded = read_image(path, min_long_side=long_side)
    image = decoded.image
    scale = long_side / max(image.shape[:2])
    if scale < 1:
        # cv2 stubs carry no dtype.
        image = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)  # type: ignore[assignment]
    return image, decoded.orig_width, decoded.orig_height


def _thumbnail(path: Path) -> tuple[bytes | None, list[int] | None]:
    """JPEG bytes of the upright image at long side <= THUMB_LONG_SIDE and its original [w, h]."""
    try:
        image, width, height = thumbnail(path, THUMB_LONG_SIDE)
    except (ImageReadError, OSError):
        return None, None
    jpeg = encode_image(image, ".jpg", f"{path}: report thumbnail", [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    return jpeg, [int(width), int(height)]


def _png(prob: npt.NDArray[np.uint8]) -> bytes:
    return encode_image(colorize_map(prob.astype(np.float32) / 255.0), ".png", "report: a probability map")


def _source(directory: Path, name: str, data: bytes, mime: str, inline_max_bytes: int) -> str:
    """A data URI for small data, else the path of the file written under report_files/."""
    if len(data) <= inline_max_bytes:
        return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    atomic_write_bytes(directory / FILES_DIR / name, data)
    return f"{FILES_DIR}/{name}"
