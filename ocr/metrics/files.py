"""Score prediction files against an annotation file (the ``runners/evaluate.py`` back end)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np

from ocr.data.annotations import ImageRecord, load_annotations
from ocr.data.sanitize import sanitize_words
from ocr.metrics.cleval.evaluate import DatasetResult, ImageResult, evaluate_dataset
from ocr.metrics.cleval.options import CLEvalOptions
from ocr.utils.errors import ConfigValueError, InputNotFoundError
from ocr.utils.io import atomic_write_csv
from ocr.utils.submission import SubmissionError, read_submission_csv

__all__ = [
    "load_predictions",
    "match_prediction_names",
    "sanitized_ground_truth",
    "evaluate_files",
    "write_image_results",
    "worst_images",
]

log = logging.getLogger(__name__)


def load_predictions(path: str | Path) -> dict[str, list[np.ndarray]]:
    """Predicted polygons per file name from a submission ``.csv`` or a predictions ``.json``.
    InputNotFoundError, ConfigValueError (naming file and row/key) or SubmissionError (a polygon of fewer
    than 3 points or beyond float32)."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFoundError(f"pred={path}: predictions file not found")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return read_submission_csv(path)
    if suffix == ".json":
        records = load_annotations(path)
        for name, record in records.items():  # GT sanitation drops these; CLEval refused them unnamed
            for word in record.words:
                if len(word.points) < 3 or not np.isfinite(word.points).all():
                    found = (
                        f"{len(word.points)} point(s)" if len(word.points) < 3 else "an inf (beyond float32)"
                    )
                    raise SubmissionError(
                        f"pred={path}: images[{json.dumps(name)}].words[{json.dumps(word.key)}].points: "
                        f"expected >= 3 finite [x, y] points, got {found}"
                    )
        return {name: [w.points for w in rec.words] for name, rec in records.items()}
    raise ConfigValueError(f"pred={path}: expected a submission .csv or a predictions .json, got {suffix!r}")


def sanitized_ground_truth(
    record: ImageRecord, min_polygon_size: float
) -> tuple[list[np.ndarray], list[bool], list[str | None]]:
    """GT words through the same sanitation as validation (clipped to ``img_w`` x ``img_h`` when the
    file gives them), so evaluating files and validating in training score the same polygons."""
    polygons = [w.points for w in record.words]
    finite = [p for p in polygons if len(p) and np.isfinite(p).all()]
    extent = np.concatenate(finite).max(axis=0) + 1 if finite else np.ones(2)
    width = record.img_w or int(np.ceil(extent[0]))
    height = record.img_h or int(np.ceil(extent[1]))
    kept, ignore, texts, _ = sanitize_words(
        polygons,
        [w.ignore for w in record.words],
        [w.text for w in record.words],
        width,
        height,
        min_polygon_size,
    )
    return kept, ignore, texts


def evaluate_files(
    gt_path: str | Path, pred_path: str | Path, options: CLEvalOptions, min_polygon_size: float
) -> tuple[list[str], DatasetResult]:
    """Score every GT image, GT sanitised as in training (an image missing from the predictions has none);
    returns the GT names in file order and the result."""
    records = load_annotations(gt_path)
    preds = load_predictions(pred_path)
    names = list(records)
    matched = match_prediction_names(names, list(preds), gt_path, pred_path)
    missing = [n for n in names if n not in matched]
    extra = sorted(set(preds) - set(matched.values()))
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
    truth = [sanitized_ground_truth(records[n], min_polygon_size) for n in names]
    polygons, ignore, texts = [t[0] for t in truth], [t[1] for t in truth], [t[2] for t in truth]
    found = [preds[matched[n]] if n in matched else [] for n in names]
    return names, evaluate_dataset(found, polygons, ignore, texts, options, names=names)


def match_prediction_names(
    gt_names: Sequence[str], pred_names: Sequence[str], gt_path: str | Path, pred_path: str | Path
) -> dict[str, str]:
    """GT name -> prediction name: equal names, else equal after stripping folders when that pairing is one
    to one (logged); ValueError shows an example of each when none match, or names the clash."""
    matched = {n: n for n in set(gt_names).intersection(pred_names)}
    gt_left = [n for n in gt_names if n not in matched]
    pred_left = [n for n in pred_names if n not in matched]
    gt_by_base, pred_by_base = _by_base_name(gt_left), _by_base_name(pred_left)
    stripped = {
        gts[0]: pred_by_base[base][0]
        for base, gts in gt_by_base.items()
        if len(gts) == 1 and len(pred_by_base.get(base, ())) == 1
    }
    clashes = [
        (gts, preds)
        for base, gts in gt_by_base.items()
        if (preds := pred_by_base.get(base, [])) and len(gts) + len(preds) > 2
    ]
    if clashes:
        gts, preds = clashes[0]
        raise SubmissionError(
            f"pred={pred_path}: {len(clashes)} image name(s) match only without their folders, and not one "
            f"to one: e.g. prediction(s) {', '.join(map(repr, preds))} and GT image(s) "
            f"{', '.join(map(repr, gts))} in gt={gt_path}; give the predictions the ground truth's names, "
            "folders included"
        )
    if stripped:
        example = next(iter(stripped.items()))
        log.info(
            "%d prediction names match GT names only without their folders and are scored as such, "
            "e.g. %r (%s) -> %r (%s)",
            len(stripped),
            example[1],
            pred_path,
            example[0],
            gt_path,
        )
    matched.update(stripped)
    if not matched and gt_names and pred_names:
        raise SubmissionError(
            f"pred={pred_path}: none of its {len(pred_names)} image names matches one of the "
            f"{len(gt_names)} in gt={gt_path}, even without folders: e.g. {pred_names[0]!r} in the "
            f"predictions, {gt_names[0]!r} in the ground truth"
        )
    return matched


def _by_base_name(names: Sequence[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.replace("\\", "/").rsplit("/", 1)[-1], []).append(name)
    return groups


def write_image_results(path: str | Path, names: Sequence[str], images: Sequence[ImageResult]) -> Path:
    """Per-image CSV (file name + every :class:`ImageResult` field), written atomically."""
    columns = [f.name for f in fields(ImageResult)]
    rows = [
        [name, *(f"{v:.6f}" if isinstance(v, float) else v for v in asdict(result).values())]
        for name, result in zip(names, images, strict=True)
    ]
    return atomic_write_csv(path, [["filename", *columns], *rows])


def worst_images(
    names: Sequence[str], images: Sequence[ImageResult], count: int
) -> list[tuple[str, ImageResult]]:
    """The ``count`` images with the lowest hmean (ties by file name)."""
    order = sorted(range(len(names)), key=lambda i: (images[i].hmean, names[i]))
    return [(names[i], images[i]) for i in order[:count]]
