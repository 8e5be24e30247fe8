"""Load, validate and save annotation files in the receipt format.

Format (docs/data.md, "The annotation file")::

    {"images": {"<file name>": {"words": {"0001": {"points": [[x, y], ...], "text": "...", "ignore": false}},
                                "img_w": W, "img_h": H}}}

Only types and shapes are validated here: a polygon with too few points, non-finite values or zero area
is a sanitation matter (:mod:`ocr.data.sanitize`), not a format error. Unknown keys are kept in ``extra``
at every level and written back by :func:`dump_annotations`.
"""

from __future__ import annotations

import json
import math
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ocr.utils.errors import InputNotFoundError, UsageError
from ocr.utils.io import atomic_write_json

if TYPE_CHECKING:
    from ocr.types import Polygon

__all__ = [
    "AnnotationError",
    "AnnotationSet",
    "ImageRecord",
    "Word",
    "dump_annotations",
    "load_annotations",
    "parse_annotations",
    "save_annotations",
]

DONT_CARE_TEXT = "###"
_MAX_REPR = 80


class AnnotationError(UsageError, ValueError):
    """An annotation file is malformed; the message names the file and the JSON path."""


@dataclass
class Word:
    """One annotated word (or line)."""

    key: str  # the word's key in the file ("0001")
    points: Polygon  # (K, 2) float32 in the frame stored in the file; K may be < 3 (sanitation's job)
    text: str | None = None  # transcription, None when absent
    ignore: bool = False  # don't-care region (``"ignore": true`` or text ``"###"``)
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys, kept for round trips


@dataclass
class ImageRecord:
    """Annotations of one image; ``img_w``/``img_h`` are None when the file does not give them."""

    file_name: str
    words: list[Word]
    img_w: int | None = None
    img_h: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class AnnotationSet(dict[str, ImageRecord]):
    """File name -> record, in file order; ``extra`` keeps unknown top-level keys of the file."""

    def __init__(self, records: Mapping[str, ImageRecord] | None = None, extra: dict[str, Any] | None = None):
        """Build from records and the unknown top-level keys."""
        super().__init__(records or {})
        self.extra: dict[str, Any] = dict(extra or {})


def load_annotations(path: str | Path) -> AnnotationSet:
    """Read and validate an annotation file: AnnotationError for invalid JSON (with line and column) or a
    wrong type/shape (with the JSON path), InputNotFoundError when there is none, OSError when unreadable."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise InputNotFoundError(f"{path}: annotation file not found") from None
    except UnicodeDecodeError as exc:
        raise AnnotationError(f"{path}: not UTF-8 text ({exc})") from None
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise AnnotationError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except _DuplicateKeyError as exc:
        raise AnnotationError(f"{path}: {exc}") from None
    return parse_annotations(obj, str(path))


def parse_annotations(obj: Any, source: str) -> AnnotationSet:
    """Validate a decoded JSON object; AnnotationError names ``source`` and the JSON path of a wrong type or
    shape, or two names of one file (``X.jpg`` and ``sub/../X.jpg``: trained on and scored twice)."""
    _expect(isinstance(obj, dict) and "images" in obj, source, "", 'a JSON object with key "images"', obj)
    images = obj["images"]
    _expect(isinstance(images, dict), source, "images", "an object {file name: image}", images)
    first_names: dict[str, str] = {}
    for name in images:
        first = first_names.setdefault(posixpath.normpath(name), name)
        if first != name:
            raise AnnotationError(
                f"{source}: images[{_q(first)}] and images[{_q(name)}] name the same file; keep one"
            )
    records = {
        name: _parse_image(value, source, f"images[{_q(name)}]", name) for name, value in images.items()
    }
    return AnnotationSet(records, {k: v for k, v in obj.items() if k != "images"})


def dump_annotations(records: Mapping[str, ImageRecord]) -> dict[str, Any]:
    """JSON-ready object in the annotation format; unknown keys are written back."""
    images: dict[str, Any] = {}
    for name, rec in records.items():
        entry: dict[str, Any] = {"words": {w.key: _dump_word(w) for w in rec.words}}
        if rec.img_w is not None:
            entry["img_w"] = rec.img_w
        if rec.img_h is not None:
            entry["img_h"] = rec.img_h
        entry.update({k: v for k, v in rec.extra.items() if k not in entry})
        images[name] = entry
    extra = getattr(records, "extra", {})
    return {"images": images, **{k: v for k, v in extra.items() if k != "images"}}


def save_annotations(path: str | Path, records: Mapping[str, ImageRecord]) -> Path:
    """Write ``records`` atomically as an annotation file; returns the path."""
    return atomic_write_json(path, dump_annotations(records), indent=None)


def _parse_image(entry: Any, source: str, where: str, name: str) -> ImageRecord:
    _expect(isinstance(entry, dict) and "words" in entry, source, where, 'an object with key "words"', entry)
    words = entry["words"]
    _expect(isinstance(words, dict), source, f"{where}.words", "an object {key: word}", words)
    parsed = [_parse_word(w, source, f"{where}.words[{_q(k)}]", k) for k, w in words.items()]
    size = {k: _parse_size(entry.get(k), source, f"{where}.{k}") for k in ("img_w", "img_h")}
    extra = {k: v for k, v in entry.items() if k not in ("words", "img_w", "img_h")}
    return ImageRecord(name, parsed, size["img_w"], size["img_h"], extra)


def _parse_word(word: Any, source: str, where: str, key: str) -> Word:
    _expect(isinstance(word, dict) and "points" in word, source, where, 'an object with key "points"', word)
    points = _parse_points(word["points"], source, f"{where}.points")
    text = word.get("text")
    _expect(text is None or isinstance(text, str), source, f"{where}.text", "a string or null", text)
    ignore = word.get("ignore", False)
    _expect(isinstance(ignore, bool), source, f"{where}.ignore", "true or false", ignore)
    extra = {k: v for k, v in word.items() if k not in ("points", "text", "ignore")}
    return Word(key, points, text, ignore or text == DONT_CARE_TEXT, extra)


def _parse_points(points: Any, source: str, where: str) -> Polygon:
    expected = "a list of [x, y] pairs"
    _expect(isinstance(points, list), source, where, expected, points)
    for i, pair in enumerate(points):
        ok = isinstance(pair, list) and len(pair) == 2 and all(_is_number(v) for v in pair)
        _expect(ok, source, f"{where}[{i}]", "an [x, y] pair of numbers", pair)
    try:
        with np.errstate(over="ignore"):  # beyond float32 becomes inf, removed later as "non_finite"
            return np.asarray(points, dtype=np.float64).astype(np.float32).reshape(-1, 2)
    except OverflowError:
        raise AnnotationError(
            f"{source}: {where}: expected numbers within float range, got {_short(points)}"
        ) from None


def _parse_size(value: Any, source: str, where: str) -> int | None:
    if value is None:
        return None
    ok = _is_number(value) and math.isfinite(value) and value > 0 and float(value).is_integer()
    _expect(ok, source, where, "a positive integer or null", value)
    return int(value)


def _dump_word(word: Word) -> dict[str, Any]:
    out: dict[str, Any] = {"points": [[_num(x), _num(y)] for x, y in np.asarray(word.points).reshape(-1, 2)]}
    if word.text is not None:
        out["text"] = word.text
    out["ignore"] = bool(word.ignore)
    out.update({k: v for k, v in word.extra.items() if k not in out})
    return out


def _num(value: Any) -> int | float:
    """Integral values as int, others as the shortest decimal that round-trips through float32."""
    value = float(value)
    if math.isfinite(value) and value.is_integer():
        return int(value)
    return float(str(np.float32(value)))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _expect(ok: bool, source: str, where: str, expected: str, got: Any) -> None:
    if not ok:
        location = f"{source}: {where}" if where else f"{source}: (top level)"
        raise AnnotationError(f"{location}: expected {expected}, got {_short(got)}")


def _short(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def _q(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


class _DuplicateKeyError(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            # json keeps the last value silently, which would drop a word or an image.
            raise _DuplicateKeyError(
                f"duplicate key {_q(key)} in a JSON object (first value: {_short(out[key])})"
            )
        out[key] = value
    return out
