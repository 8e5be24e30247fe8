"""Write predictions: submission CSV, predictions JSON in the annotation format, overlay PNGs."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import cv2

from ocr.data.annotations import ImageRecord, Word, save_annotations
from ocr.data.images import read_image
from ocr.lightning_modules.detection_module import Prediction
from ocr.utils.io import atomic_write_bytes
from ocr.utils.submission import write_submission_csv
from ocr.utils.visualize import draw_polygons

__all__ = ["save_predictions", "save_overlays", "to_records"]

log = logging.getLogger(__name__)


def to_records(predictions: Sequence[Prediction]) -> dict[str, ImageRecord]:
    """Predictions as annotation records (score kept as an extra key per word)."""
    records = {}
    for pred in predictions:
        words = [
            Word(key=f"{i + 1:04d}", points=polygon, text=None, ignore=False, extra={"score": float(score)})
            for i, (polygon, score) in enumerate(zip(pred["polygons"], pred["scores"], strict=True))
        ]
        records[pred["image_id"]] = ImageRecord(
            file_name=pred["image_id"], words=words, img_w=None, img_h=None, extra={}
        )
    return records


def save_predictions(predictions: Sequence[Prediction], directory: Path) -> dict[str, str]:
    """Write ``submission.csv`` (one row per image) and ``predictions.json``; returns their paths."""
    csv_path = write_submission_csv(
        directory / "submission.csv", {p["image_id"]: p["polygons"] for p in predictions}
    )
    json_path = save_annotations(directory / "predictions.json", to_records(predictions))
    total = sum(len(p["polygons"]) for p in predictions)
    log.info("Wrote %d images, %d polygons: %s, %s", len(predictions), total, csv_path, json_path)
    return {"submission": str(csv_path), "predictions": str(json_path)}


def save_overlays(
    predictions: Sequence[Prediction], image_dir: str | Path, out_dir: Path, limit: int
) -> Path:
    """Draw predicted polygons over the first ``limit`` original images as PNGs."""
    for pred in predictions[:limit]:
        image = read_image(Path(image_dir) / pred["image_id"]).image
        canvas = draw_polygons(image, pred["polygons"])
        ok, png = cv2.imencode(".png", cv2.cvtColor(canvas, cv2.COLOR_RGB2BGR))
        if ok:
            atomic_write_bytes(out_dir / f"{Path(pred['image_id']).stem}.png", png.tobytes())
    return out_dir
