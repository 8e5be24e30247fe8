"""Score prediction files against an annotation file (the ``runners/evaluate.py`` back end)."""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np

from ocr.data.annotations import load_annotations
from ocr.metrics.cleval import CLEvalOptions, DatasetResult, ImageResult, evaluate_dataset
from ocr.utils.io import atomic_write_text
from ocr.utils.submission import read_submission_csv

__all__ = ["load_predictions", "evaluate_files", "write_image_results", "worst_images"]

log = logging.getLogger(__name__)


def load_predictions(path: str | Path) -> dict[str, list[np.ndarray]]:
    """Predicted polygons per file name from a submission ``.csv`` or a predictions ``.json``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: an extension other than .csv/.json, or a malformed file (naming file and row/key).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"predictions file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return read_submission_csv(path)
    if suffix == ".json":
        return {name: [w.points for w in rec.words] for name, rec in load_annotations(path).items()}
    raise ValueError(f"pred={path}: expected a submission .csv or a predictions .json, got {suffix!r}")


def evaluate_files(
    gt_path: str | Path, pred_path: str | Path, options: CLEvalOptions
) -> tuple[list[str], DatasetResult]:
    """Score every GT image (an image missing from the predictions counts as having none).

    Returns:
        The GT file names in file order and the result (``images`` in the same order).
    """
    records = load_annotations(gt_path)
    preds = load_predictions(pred_path)
    names = list(records)
    missing = [n for n in names if n not in preds]
    extra = [n for n in preds if n not in records]
    if missing:
        log.warning(
            "%d of %d GT images have no row in %s (scored as no detections), e.g. %s",
            len(missing),
            len(names),
            pred_path,
            missing[:3],
        )
    if extra:
        log.warning(
            "%d predicted images are not in %s and are ignored, e.g. %s", len(extra), gt_path, extra[:3]
        )
    result = evaluate_dataset(
        [preds.get(n, []) for n in names],
        [[w.points for w in records[n].words] for n in names],
        [[w.ignore for w in records[n].words] for n in names],
        [[w.text for w in records[n].words] for n in names],
        options,
        names=names,
    )
    return names, result


def write_image_results(path: str | Path, names: Sequence[str], images: Sequence[ImageResult]) -> Path:
    """Per-image CSV (file name + every :class:`ImageResult` field), written atomically."""
    columns = [f.name for f in fields(ImageResult)]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["filename", *columns])
    for name, result in zip(names, images, strict=True):
        row = asdict(result)
        writer.writerow([name, *(f"{row[c]:.6f}" if isinstance(row[c], float) else row[c] for c in columns)])
    return atomic_write_text(path, buffer.getvalue())


def worst_images(
    names: Sequence[str], images: Sequence[ImageResult], count: int
) -> list[tuple[str, ImageResult]]:
    """The ``count`` images with the lowest hmean (ties by file name)."""
    order = sorted(range(len(names)), key=lambda i: (images[i].hmean, names[i]))
    return [(names[i], images[i]) for i in order[:count]]
