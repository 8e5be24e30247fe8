"""Write predictions: submission CSV, predictions JSON in the annotation format, overlay PNGs."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import cv2
import torch.distributed as dist

from ocr.data.annotations import ImageRecord, Word, save_annotations
from ocr.data.dataset import IMAGE_SUFFIXES, ImageFolderDataset
from ocr.data.images import ImageReadError, read_image
from ocr.types import Prediction
from ocr.utils.errors import InputNotFoundError
from ocr.utils.io import atomic_write_bytes
from ocr.utils.submission import write_submission_csv
from ocr.utils.visualize import draw_polygons

__all__ = [
    "OverlayReport",
    "gather_predictions",
    "require_images",
    "save_predictions",
    "save_overlays",
    "to_records",
]

log = logging.getLogger(__name__)

# Predictions, or the report's richer records: anything keyed by image_id.
_Record = TypeVar("_Record", bound=Mapping[str, Any])


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
    """Write ``submission.csv`` (one row per image) and ``predictions.json``; returns their paths. A name
    that is not UTF-8 is written with its bytes escaped (``caf\\xe9.jpg``) in both, named in one warning."""
    escaped = {
        p["image_id"]: os.fsencode(p["image_id"]).decode("utf-8", "backslashreplace") for p in predictions
    }
    renamed = [name for original, name in escaped.items() if name != original]
    if renamed:
        log.warning(
            "%d file names are not UTF-8; written with their bytes escaped: %s",
            len(renamed),
            ", ".join(renamed[:10]) + (", ..." if len(renamed) > 10 else ""),
        )
    predictions = [cast(Prediction, {**p, "image_id": escaped[p["image_id"]]}) for p in predictions]
    csv_path = write_submission_csv(
        directory / "submission.csv", {p["image_id"]: p["polygons"] for p in predictions}
    )
    json_path = save_annotations(directory / "predictions.json", to_records(predictions))
    total = sum(len(p["polygons"]) for p in predictions)
    log.info("Wrote %d images, %d polygons: %s, %s", len(predictions), total, csv_path, json_path)
    return {"submission": str(csv_path), "predictions": str(json_path)}


@dataclass(frozen=True)
class OverlayReport:
    """Where the overlays went, how many were written and which images could not be read."""

    directory: Path
    written: int
    unreadable: list[str]


def require_images(dataset: ImageFolderDataset) -> None:
    """Fail before loading the model when the predict folder holds no image files (InputNotFoundError)."""
    if len(dataset) == 0:
        raise InputNotFoundError(
            f"image_dir={dataset.image_dir}: no images found (looked recursively for files ending in "
            f"{', '.join(IMAGE_SUFFIXES)}, any case)"
        )


def gather_predictions(predictions: list[_Record]) -> list[_Record] | None:
    """Every rank's predictions (or any records keyed by ``image_id``) on global rank 0, in image-name
    order (the dataset's order: evaluation batches group images by input size); None on the other
    ranks."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return sorted(predictions, key=lambda p: p["image_id"])
    rank, world = dist.get_rank(), dist.get_world_size()
    shards: list[list[_Record] | None] | None = [None] * world if rank == 0 else None
    dist.gather_object(predictions, shards, dst=0)
    if rank != 0:
        return None
    merged = {p["image_id"]: p for shard in shards or [] for p in shard or []}
    log.info("Gathered predictions for %d images from %d ranks on rank 0", len(merged), world)
    return [merged[name] for name in sorted(merged)]


def save_overlays(
    predictions: Sequence[Prediction], image_dir: str | Path, out_dir: Path, limit: int
) -> OverlayReport:
    """Draw predicted polygons over the first ``limit`` original images as PNGs at
    ``out_dir/<relative image path>.png``; unreadable images get none and are named in one warning."""
    written, unreadable = 0, []
    for pred in predictions[:limit]:
        try:
            image = read_image(Path(image_dir) / pred["image_id"]).image
        except ImageReadError:
            unreadable.append(pred["image_id"])
            continue
        canvas = draw_polygons(image, pred["polygons"])
        ok, png = cv2.imencode(".png", cv2.cvtColor(canvas, cv2.COLOR_RGB2BGR))
        if not ok:
            raise ValueError(f"{pred['image_id']}: OpenCV could not encode its overlay as PNG")
        atomic_write_bytes(out_dir / f"{pred['image_id']}.png", png.tobytes())
        written += 1
    if unreadable:
        log.warning(
            "overlays: %d of %d images could not be read and have no overlay: %s",
            len(unreadable),
            min(limit, len(predictions)),
            ", ".join(unreadable[:10]) + (", ..." if len(unreadable) > 10 else ""),
        )
    return OverlayReport(out_dir, written, unreadable)
