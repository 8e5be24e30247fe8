"""A fixed, seeded "photographed" copy of one split of a data set: a proxy of phone photos to measure on.

Each annotated image of the split goes through the photo augmentation (``ocr.data.photo``, ``--config``,
always applied) with its polygons; texts, ``ignore`` flags and unknown keys are kept. The output has the
project's layout plus ``manifest.json``, written aside and moved into place. Each image's draws come from
``--seed`` and its file name alone: the same seed writes the same bytes, a subset gets the same photos.

    uv run python scripts/make_photographed.py --root ../shared/datasets/sroie-compact --split test \\
        --seed 0 --out data/generated/sroie-compact-photo-s0
    uv run python runners/test.py ckpt=<ckpt> data=receipts data.root=data/generated/sroie-compact-photo-s0
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import shutil
import uuid
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from hydra.utils import instantiate
from omegaconf import OmegaConf

from ocr.data.annotations import ImageRecord, Word, load_annotations, save_annotations
from ocr.data.images import EXIF_MODES, read_image, resolve_frame
from ocr.data.photo import PhotoAugment
from ocr.utils.io import atomic_write_bytes, atomic_write_json

log = logging.getLogger("make_photographed")
GENERATOR = "scripts/make_photographed.py"
MANIFEST = "manifest.json"
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "data" / "photo" / "default.yaml"


def image_seed(seed: int, file_name: str) -> int:
    """The photo seed of one image: the run's seed and the file name, nothing else."""
    return (seed % 2**31) * 2**32 + zlib.crc32(file_name.encode("utf-8"))


def photograph_split(
    root: Path, split: str, seed: int, out: Path, augment: PhotoAugment, exif_mode: str, quality: int
) -> dict[str, int]:
    """Write the photographed split into ``out`` (a fresh folder); returns counts for the log."""
    records = load_annotations(root / "jsons" / f"{split}.json")
    written: dict[str, ImageRecord] = {}
    unmapped = 0
    for name, record in records.items():
        decoded = read_image(root / "images" / split / name)
        polygons, _ = resolve_frame([w.points for w in record.words], decoded, exif_mode)
        finite = [bool(len(p)) and bool(np.isfinite(p).all()) for p in polygons]
        augment.set_random_seed(image_seed(seed, name))
        photo, mapped = augment.render(decoded.image, list(itertools.compress(polygons, finite)))
        moved = iter(mapped)
        words = []
        for word, polygon, ok in zip(record.words, polygons, finite, strict=True):
            points = np.round(next(moved), 2) if ok else polygon  # an unusable polygon stays as it was
            unmapped += not ok
            words.append(Word(word.key, points.astype(np.float32), word.text, word.ignore, dict(word.extra)))
        ext = Path(name).suffix.lower() or ".png"
        params = [cv2.IMWRITE_JPEG_QUALITY, quality] if ext in (".jpg", ".jpeg") else []
        ok_enc, data = cv2.imencode(ext, photo[..., ::-1], params)
        if not ok_enc:
            raise OSError(f"{name}: encoding the photo as {ext} failed")
        atomic_write_bytes(out / "images" / split / name, data.tobytes())
        written[name] = ImageRecord(name, words, photo.shape[1], photo.shape[0], dict(record.extra))
    (out / "images" / split).mkdir(parents=True, exist_ok=True)
    save_annotations(out / "jsons" / f"{split}.json", written)
    total_words = sum(len(r.words) for r in written.values())
    return {"images": len(written), "words": total_words, "unmapped": unmapped}


def _check_inputs(args: argparse.Namespace) -> None:
    """Each unusable argument in one line (exit status 1), before anything is read or written."""
    annotation = args.root / "jsons" / f"{args.split}.json"
    if not 1 <= args.quality <= 100:  # OpenCV clamps it: the manifest would record a quality not used
        raise SystemExit(f"--quality {args.quality}: expected a JPEG quality in 1..100")
    if not args.config.is_file():
        raise SystemExit(f"--config {args.config}: expected a photo settings YAML file, found none")
    if not annotation.is_file():
        raise SystemExit(f"--root {args.root} --split {args.split}: expected {annotation}, found none")


def _check_replaceable(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise SystemExit(f"--out {out}: expected a folder, got a file")
    if out.is_dir() and any(out.iterdir()):
        try:
            found = json.loads((out / MANIFEST).read_text(encoding="utf-8")).get("generator")
        except (OSError, ValueError, AttributeError):
            found = None
        if found != GENERATOR:
            raise SystemExit(f"--out {out}: not empty and not written by {GENERATOR}; refusing to replace it")


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", type=Path, required=True, help="data set folder (images/, jsons/)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="output data set folder (replaced)")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="photo settings (p is ignored)")
    parser.add_argument("--exif-mode", default="rotated", choices=EXIF_MODES, help="frame of the points")
    parser.add_argument("--quality", type=int, default=95, help="JPEG quality of the written files, 1..100")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    _check_inputs(args)
    config = OmegaConf.load(args.config)
    augment: PhotoAugment = instantiate(config)
    out: Path = args.out
    _check_replaceable(out)
    manifest: dict[str, Any] = {"generator": GENERATOR, "root": str(args.root), "split": args.split}
    manifest |= {"seed": args.seed, "exif_mode": args.exif_mode, "quality": args.quality}
    manifest["photo"] = OmegaConf.to_container(config)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        counts = photograph_split(
            args.root, args.split, args.seed, tmp, augment, args.exif_mode, args.quality
        )
        atomic_write_json(tmp / MANIFEST, manifest)
        old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
        if out.exists():
            os.rename(out, old)
        os.rename(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("%s: %d images, %d words (%d left unmapped: no finite points)", out, *counts.values())
    return out


if __name__ == "__main__":
    main()
