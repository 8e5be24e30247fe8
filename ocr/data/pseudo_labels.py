"""Pseudo-labels: a teacher's predictions turned into annotation records (``runners/pseudo_label.py``).

A detection the teacher is sure of (score >= ``text_score``) becomes text; a middling one
(``ignore_score`` <= score < ``text_score``) becomes don't-care (``ignore: true``), so it teaches neither
text nor background; a lower one is dropped. Scores are the post-processor's mean probability inside the
box. Each word keeps its score as an extra key (``"score"``), which the annotation reader keeps and ignores.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from ocr.data.annotations import ImageRecord, Word
from ocr.types import Prediction
from ocr.utils.errors import ConfigValueError

__all__ = ["PseudoCounts", "PseudoThresholds", "pseudo_records"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PseudoThresholds:
    """Score thresholds of pseudo-labelling (config ``pseudo.*``).

    Attributes:
        text_score: from this score on a detection is text.
        ignore_score: from this score on (below ``text_score``) it is don't-care; below, dropped.
    """

    text_score: float
    ignore_score: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.ignore_score <= self.text_score <= 1.0:
            raise ConfigValueError(
                "pseudo: expected 0 <= pseudo.ignore_score <= pseudo.text_score <= 1, got "
                f"ignore_score={self.ignore_score}, text_score={self.text_score}"
            )

    def classify(self, score: float) -> str:
        """``text``, ``ignore`` or ``drop``."""
        if score >= self.text_score:
            return "text"
        return "ignore" if score >= self.ignore_score else "drop"


@dataclass
class PseudoCounts:
    """What pseudo-labelling made of the predictions.

    Attributes:
        images: images written (each gets a record, with or without words).
        unreadable: images left out because they could not be read (no size, no prediction).
        text: words written as text.
        ignored: words written as don't-care.
        dropped: detections below ``ignore_score``, not written.
        images_without_text: written images with no text word (background only, or don't-care only).
    """

    images: int = 0
    unreadable: int = 0
    text: int = 0
    ignored: int = 0
    dropped: int = 0
    images_without_text: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counts by name."""
        return asdict(self)


def pseudo_records(
    predictions: Sequence[Prediction],
    sizes: Mapping[str, tuple[int, int] | None],
    thresholds: PseudoThresholds,
) -> tuple[dict[str, ImageRecord], PseudoCounts]:
    """Annotation records of ``predictions`` (original px), one per readable image, in prediction order.

    Args:
        predictions: the teacher's detections per image (polygons and their scores).
        sizes: (width, height) of each image by ``image_id``; None for an unreadable image, which is left
            out (a blank prediction would teach background on an image that does not exist).
        thresholds: text and don't-care score thresholds.

    Returns:
        The records (``img_w``/``img_h`` set) and the counts.
    """
    counts = PseudoCounts()
    records: dict[str, ImageRecord] = {}
    for pred in predictions:
        size = sizes.get(pred["image_id"])
        if size is None:
            counts.unreadable += 1
            continue
        words: list[Word] = []
        for polygon, score in zip(pred["polygons"], pred["scores"], strict=True):
            kind = thresholds.classify(float(score))
            if kind == "drop":
                counts.dropped += 1
                continue
            counts.text += kind == "text"
            counts.ignored += kind == "ignore"
            words.append(
                Word(
                    key=f"{len(words) + 1:04d}",
                    points=polygon,
                    ignore=kind == "ignore",
                    extra={"score": round(float(score), 4)},
                )
            )
        counts.images += 1
        counts.images_without_text += not any(not w.ignore for w in words)
        records[pred["image_id"]] = ImageRecord(
            file_name=pred["image_id"], words=words, img_w=int(size[0]), img_h=int(size[1])
        )
    return records, counts
