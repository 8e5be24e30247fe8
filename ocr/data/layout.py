"""Dataset folders the project writes in the layout ``data.root`` reads: pseudo-labelled images beside
their annotation file (``runners/pseudo_label.py``) and a split reduced to its first images
(``benchmark_accuracy.py --label-subset``). Images are links or copies, each placed atomically."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ocr.data.annotations import AnnotationSet, load_annotations, save_annotations
from ocr.utils.errors import ConfigValueError, InputNotFoundError

__all__ = ["IMAGE_LAYOUTS", "UNLABELLED_DIR", "place_images", "write_label_subset"]

log = logging.getLogger(__name__)

IMAGE_LAYOUTS = ("none", "link", "copy")
# Where write_label_subset puts the split's images whose labels it left out: a plain folder, for
# runners/pseudo_label.py image_dir=.
UNLABELLED_DIR = "unlabelled"


def place_images(names: Sequence[str], src_dir: str | Path, dst_dir: str | Path, how: str) -> int:
    """Link or copy ``src_dir/<name>`` to ``dst_dir/<name>`` for each name; returns how many were placed
    (0 for ``how="none"``). An existing file is replaced unless it is the source or a link to it."""
    if how not in IMAGE_LAYOUTS:
        raise ConfigValueError(f"image layout: expected one of {IMAGE_LAYOUTS}, got {how!r}")
    if how == "none":
        return 0
    src_root, dst_root = Path(src_dir).resolve(), Path(dst_dir)
    for name in names:
        src, dst = src_root / name, dst_root / name
        if not src.is_file():
            raise InputNotFoundError(f"{src}: image not found (to {how} into {dst_root})")
        if dst.exists() and os.path.samefile(src, dst):
            continue  # already there: replacing the image by a link to itself would lose it
        _place(src, dst, how)
    return len(names)


def write_label_subset(root: str | Path, split: str, count: int, out: str | Path, how: str = "link") -> Path:
    """Write ``out``: ``split`` keeps the labels of its first ``count`` images, its other images go unlabelled
    to ``out/unlabelled/`` (for pseudo-labelling), the other splits are ``root``'s (linked); returns ``out``.
    """
    root, out = Path(root).resolve(), Path(out)
    annotations = load_annotations(root / "jsons" / f"{split}.json")
    names = list(annotations)
    if not 1 <= count <= len(names):
        raise ConfigValueError(
            f"label subset: expected 1 to {len(names)} images (split {split!r} of {root}), got {count}"
        )
    kept = AnnotationSet({name: annotations[name] for name in names[:count]}, annotations.extra)
    save_annotations(out / "jsons" / f"{split}.json", kept)
    place_images(names[:count], root / "images" / split, out / "images" / split, how)
    place_images(names[count:], root / "images" / split, out / UNLABELLED_DIR, how)
    for other in sorted(p.stem for p in (root / "jsons").glob("*.json") if p.stem != split):
        _place(root / "jsons" / f"{other}.json", out / "jsons" / f"{other}.json")
        if (root / "images" / other).is_dir():
            _place(root / "images" / other, out / "images" / other)
    log.info(
        "label subset: %s split %r keeps the labels of %d of %d images; %d unlabelled in %s",
        out,
        split,
        count,
        len(names),
        len(names) - count,
        out / UNLABELLED_DIR,
    )
    return out


def _place(src: Path, dst: Path, how: str = "link") -> None:
    """``dst`` a symbolic link to ``src`` or (``how="copy"``) a copy, replacing what was there atomically."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    temp = dst.with_name(f".{dst.name}.tmp")
    temp.unlink(missing_ok=True)
    (os.symlink if how == "link" else shutil.copyfile)(src, temp)
    os.replace(temp, dst)
