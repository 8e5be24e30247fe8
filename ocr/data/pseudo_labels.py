"""Pseudo-labels: a teacher's predictions turned into annotation records (``runners/pseudo_label.py``).

A detection scored >= ``text_score`` becomes text, one >= ``ignore_score`` don't-care (``ignore: true``),
a lower one is dropped; each word keeps its ``"score"``. An output folder holding a dataset or an input is
refused unless ``overwrite=true`` (the replaced annotation file is backed up), and an image that does not
decode whole is left out, never labelled as a receipt without text.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from ocr.data.annotations import ImageRecord, Word
from ocr.data.images import ImageReadError, read_image
from ocr.machine.hardware import usable_cores
from ocr.types import Prediction
from ocr.utils.errors import ConfigValueError, OutputDirError
from ocr.utils.io import atomic_write_bytes

__all__ = [
    "PseudoCounts",
    "PseudoThresholds",
    "back_up",
    "decoded_sizes",
    "pseudo_records",
    "refuse_unsafe_output",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PseudoThresholds:
    """Score thresholds of pseudo-labelling (config ``pseudo.*``)."""

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
    """What pseudo-labelling made of the predictions."""

    images: int = 0  # written, with or without words
    unreadable: int = 0  # left out
    text: int = 0
    ignored: int = 0
    dropped: int = 0  # below ignore_score
    images_without_text: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def pseudo_records(
    predictions: Sequence[Prediction],
    sizes: Mapping[str, tuple[int, int] | None],
    thresholds: PseudoThresholds,
) -> tuple[dict[str, ImageRecord], PseudoCounts]:
    """Annotation records (original px, ``img_w``/``img_h`` from ``sizes``) of ``predictions`` and the
    counts; an image whose size is None (unreadable) is left out."""
    counts = PseudoCounts()
    records: dict[str, ImageRecord] = {}
    unreadable = []
    for pred in predictions:
        size = sizes.get(pred["image_id"])
        if size is None:
            unreadable.append(pred["image_id"])
            continue
        words: list[Word] = []
        for polygon, score in zip(pred["polygons"], pred["scores"], strict=True):
            kind = thresholds.classify(float(score))
            if kind == "drop":
                counts.dropped += 1
                continue
            counts.text += kind == "text"
            counts.ignored += kind == "ignore"
            extra = {"score": round(float(score), 4)}
            words.append(
                Word(key=f"{len(words) + 1:04d}", points=polygon, ignore=kind == "ignore", extra=extra)
            )
        counts.images += 1
        counts.images_without_text += not any(not w.ignore for w in words)
        records[pred["image_id"]] = ImageRecord(
            file_name=pred["image_id"], words=words, img_w=int(size[0]), img_h=int(size[1])
        )
    counts.unreadable = len(unreadable)
    if unreadable:
        log.warning(
            "pseudo-labels: %d images do not decode (truncated or corrupt) and are left out: %s",
            len(unreadable),
            ", ".join(unreadable[:10]) + (", ..." if len(unreadable) > 10 else ""),
        )
    return records, counts


def decoded_sizes(
    image_dir: str | Path, names: Sequence[str], long_side: int
) -> dict[str, tuple[int, int] | None]:
    """(width, height) of each image that decodes whole, None for one that does not: prediction stood a
    blank image in for it, and its "no text" would teach background on a receipt nobody saw. Decoded in
    threads, as prediction decodes (reduced JPEG scale for ``long_side``)."""

    def size(name: str) -> tuple[int, int] | None:
        try:
            decoded = read_image(Path(image_dir) / name, min_long_side=long_side)
        except ImageReadError:
            return None
        return decoded.orig_width, decoded.orig_height

    with ThreadPoolExecutor(usable_cores()) as pool:
        return dict(zip(names, pool.map(size, names), strict=True))


def refuse_unsafe_output(output: Path, image_dir: str | Path, ckpt: str | Path, overwrite: object) -> None:
    """Refuse an ``output`` pseudo-labelling would destroy data in (``image_dir`` inside it, always; a
    dataset or the checkpoint there, without ``overwrite``), before anything is loaded."""
    if not isinstance(overwrite, bool):
        raise ConfigValueError(f"overwrite: expected true or false, got {overwrite!r}")
    out, images = output.resolve(), Path(image_dir).resolve()
    if images == out or out in images.parents:
        raise ConfigValueError(
            f"image_dir={image_dir}: expected a folder outside output={output}, but it is inside it (its "
            "images would be replaced by links to themselves); pass output=<a new folder>"
        )
    held = sorted(out.glob("jsons/*.json"))
    if (out / "images").exists():
        held.append(out / "images")
    if out in Path(ckpt).resolve().parents:
        held.append(Path(ckpt))
    if held and not overwrite:
        raise OutputDirError(
            f"output={output}: expected a folder without a dataset, but it holds "
            f"{', '.join(map(str, held))}; pass output=<a new folder>, or overwrite=true to replace its "
            "annotation file (kept as a backup)"
        )


def back_up(path: Path) -> Path | None:
    """Copy ``path`` to ``<path>.<UTC time>.bak`` before it is replaced; None when there is none."""
    if not path.is_file():
        return None
    backup = path.with_name(f"{path.name}.{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.bak")
    atomic_write_bytes(backup, path.read_bytes())
    log.warning("pseudo-labels: %s replaced; the previous one is kept as %s", path, backup)
    return backup
