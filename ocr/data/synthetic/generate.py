"""Synthetic receipts, the project's built-in dataset: deterministic from a seed, in the annotation format.

Style ``basic``: a short receipt (:mod:`ocr.data.synthetic.layout`) on textured paper, warped onto a
background, lit, blurred and noised; ``receipt``: a dense page (:mod:`ocr.data.synthetic.receipt`) on
thermal paper, scanned flat or photographed with a cast shadow. Word polygons are the ink boxes mapped by
the pixels' homography (``line`` joins each cell's words). Image ``i`` of a split has its own seed
``(seed, split, i)``, so adding training images changes neither val nor test, nor does the worker count.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import multiprocessing
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from ocr.data.synthetic.layout import (
    FONT_PACKAGE,
    PaperWord,
    available_fonts,
    font_package_version,
    layout_receipt,
    merge_groups,
)
from ocr.data.synthetic.receipt import DensePage, layout_dense, receipt_rows
from ocr.utils.io import atomic_write_bytes, atomic_write_json

__all__ = [
    "GENERATOR_VERSION",
    "GRANULARITIES",
    "SPLITS",
    "STYLES",
    "SYNTHETIC_KEYS",
    "SyntheticReceipt",
    "generate_dataset",
    "main",
    "render_receipt",
    "synthetic_settings",
]

GENERATOR_VERSION = 2  # 2: fonts from the font package, styles and granularity
SPLITS = ("train", "val", "test")
STYLES = ("basic", "receipt")
GRANULARITIES = ("line", "word")
# data.synthetic keys: counts and sizes are integers, style and granularity names
SYNTHETIC_KEYS = ("num_train", "num_val", "num_test", "seed", "long_side", "style", "granularity")
_GENERATOR = "ocr.data.synthetic"  # the manifest's identity, kept across the package move
_MANIFEST = "manifest.json"
_DENSE_CAP_PX = 14.0  # median body cap height at long side 1024, before fitting the page

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyntheticReceipt:
    """One generated image: ``image`` (H, W, 3) uint8 RGB, words in image px, the JPEG quality to save at."""

    image: npt.NDArray[np.uint8]
    words: list[PaperWord]
    jpeg_quality: int


def render_receipt(
    seed: int | Sequence[int], long_side: int = 512, style: str = "basic", granularity: str = "word"
) -> SyntheticReceipt:
    """Render one receipt image of long (vertical) side ``long_side`` px, a box per word or line segment."""
    _check_choice("style", style, STYLES)
    _check_choice("granularity", granularity, GRANULARITIES)
    rng = np.random.default_rng(seed)
    render = _render_basic if style == "basic" else _render_dense
    image, words, matrix = render(rng, long_side)
    if granularity == "line":
        words = merge_groups(words)
    bounds = np.array([image.shape[1], image.shape[0]], np.float32)
    placed = [PaperWord(_warp_points(w.points, matrix, bounds), w.text, w.ignore, w.group) for w in words]
    return SyntheticReceipt(image, placed, int(rng.integers(80, 96)))


def _check_choice(key: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"data.synthetic.{key}: expected one of {allowed}, got {value!r}")


def _render_basic(rng: np.random.Generator, long_side: int) -> tuple[np.ndarray, list[PaperWord], np.ndarray]:
    """The basic style: image (H, W, 3) uint8, words in paper px, paper px -> image px homography."""
    scale = long_side / 512.0
    paper_h = int(long_side * rng.uniform(0.72, 0.9))
    paper_w = int(paper_h / rng.uniform(1.3, 2.5))
    width = min(long_side, int(round(paper_w / rng.uniform(0.62, 0.88))))
    # body cap height 9.5-13.5 px at long side 512, on a 0.25 px grid so glyph renders get reused
    body_h = round(float(rng.uniform(9.5, 13.5)) * scale * 4.0) / 4.0
    alpha, words = layout_receipt(rng, paper_w, paper_h, body_h)
    paper = _paper(rng, alpha)
    matrix = _placement(rng, paper_w, paper_h, width, long_side)
    planes = _composite(rng, paper, matrix, width, long_side)
    return _camera_effects(rng, planes), words, matrix


def _render_dense(rng: np.random.Generator, long_side: int) -> tuple[np.ndarray, list[PaperWord], np.ndarray]:
    """The receipt style: 20-80 rows; scanned (flat, white) or photographed (perspective, background)."""
    scanned = rng.random() < 0.55
    fill = _uniform(rng, 0.8, 0.98) if scanned else _uniform(rng, 0.65, 0.92)
    # cap height spread like the SROIE train boxes (median box short side 16 px at long side 1024)
    cap = float(np.clip(rng.lognormal(np.log(_DENSE_CAP_PX), 0.33), 6.0, 28.0)) * long_side / 1024
    body_h = max(4.0, round(cap * 4.0) / 4.0)
    # a row pitch is about 2.4 cap heights (ascenders, descenders, leading, marks); the rest is scaled
    count = int(np.clip(fill * long_side / (body_h * 2.4), 20, 80))
    squeeze = _uniform(rng, 0.72, 0.95) if rng.random() < 0.3 else 1.0
    page = layout_dense(rng, receipt_rows(rng, count), body_h, int(rng.integers(30, 49)), squeeze)
    paper = _thermal_paper(rng, page, scanned)
    paper_h, paper_w = page.ink.shape
    if scanned:
        matrix, width = _scan_placement(rng, paper_w, paper_h, long_side)
        return _scan(rng, paper, matrix, width, long_side), page.words, matrix
    fit = min(1.0, long_side * 0.95 / paper_h)
    width = min(long_side, int(round(paper_w * fit / rng.uniform(0.55, 0.85))))
    matrix = _placement(rng, paper_w, paper_h, width, long_side)
    planes = _cast_shadow(rng, _composite(rng, paper, matrix, width, long_side))
    return _camera_effects(rng, planes), page.words, matrix


def _thermal_paper(rng: np.random.Generator, page: DensePage, scanned: bool) -> list[np.ndarray]:
    """Thermal paper with faded, uneven print, pen ink and creases: R, G, B planes (h, w) float32."""
    h, w = page.ink.shape
    base = _colour(rng, 238, 255, 3) if scanned else _colour(rng, 215, 250, 6)
    ink = _colour(rng, 10, 90, 10)
    if rng.random() < 0.3:  # bluish or purple thermal print, common in scanned receipts
        ink[2] += _uniform(rng, 40, 110)
        ink[0] += _uniform(rng, 0, 50)
    pens = ([30.0, 50.0, 160.0], [180.0, 40.0, 50.0], [90.0, 40.0, 140.0])
    pen = pens[int(rng.integers(len(pens)))]
    fade = _uniform(rng, 0.0, 0.3) * (1.0 + _low_freq(rng, h, w, int(rng.integers(2, 6))))
    streaks = np.maximum(_low_freq(rng, 1, w, int(rng.integers(8, 40))), 0) * _uniform(rng, 0, 0.35)
    strength = np.clip(_uniform(rng, 0.6, 1.0) - fade - streaks, 0.3, 1.0)
    a = page.ink * strength
    p = page.pen * _uniform(rng, 0.45, 0.9)
    texture = _low_freq(rng, h, w, int(rng.integers(3, 8))) * _uniform(rng, 1, 6)
    texture += _noise(rng, h, w) * _uniform(rng, 0.5, 3)
    shade = _creases(rng, h, w)
    return [
        ((t * (1.0 - a) + a * i) * (1.0 - p) + p * q) * shade
        for t, i, q in zip((texture + b for b in base), ink, pen, strict=True)
    ]


def _creases(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Multiplicative shading (h, w) float32 of 0-3 folds: a dark line with a lit side."""
    shade = np.ones((h, w), np.float32)
    ys, xs = np.arange(h, dtype=np.float32)[:, None], np.arange(w, dtype=np.float32)[None, :]
    for _ in range(int(rng.integers(0, 4))):
        angle = np.deg2rad(rng.uniform(-15, 15) + (90.0 if rng.random() < 0.25 else 0.0))
        cx, cy = _uniform(rng, 0, w), _uniform(rng, 0, h)
        dist = (xs - cx) * float(np.sin(angle)) - (ys - cy) * float(np.cos(angle))
        width = _uniform(rng, 1.0, 4.0)
        shade *= 1.0 - _uniform(rng, 0.05, 0.25) * np.exp(-((dist / width) ** 2))
        shade *= 1.0 + _uniform(rng, 0.0, 0.06) * np.exp(-np.abs(dist) / (8 * width)) * (dist > 0)
    return shade


def _scan_placement(
    rng: np.random.Generator, paper_w: int, paper_h: int, long_side: int
) -> tuple[np.ndarray, int]:
    """Flatbed scan: paper px -> image px (rotation within +-1.2 deg, scaled to fit), and the image width."""
    src = _corners(paper_w, paper_h)
    corners = src @ _rotation(rng.uniform(-1.2, 1.2)).T
    extent = corners.max(axis=0) - corners.min(axis=0)
    corners *= min(1.0, (long_side - 2.0) / float(extent.max()))
    lo, hi = corners.min(axis=0), corners.max(axis=0)
    width = min(long_side, int(np.ceil((hi - lo)[0] * rng.uniform(1.0, 1.12))) + 2)
    room = np.array([width - 2.0, long_side - 2.0]) - (hi - lo)
    offset = 1.0 - lo + room * (rng.uniform(0.2, 0.8), rng.uniform(0.0, 0.3))
    return cv2.getPerspectiveTransform(src, (corners + offset).astype(np.float32)), width


def _scan(
    rng: np.random.Generator, paper: list[np.ndarray], matrix: np.ndarray, width: int, height: int
) -> npt.NDArray[np.uint8]:
    """Paper on a flat white scanner lid, mild blur and noise: (height, width, 3) uint8 RGB."""
    mask = _warp(np.ones(paper[0].shape, np.float32), matrix, width, height)
    white = _uniform(rng, 245, 255)
    gain, offset = _uniform(rng, 0.95, 1.04), _uniform(rng, -6, 4)
    image = cv2.merge([(_warp(p, matrix, width, height) + (1.0 - mask) * white) * gain for p in paper])
    image = _blur_and_noise(rng, image, (0.3, 0.7), (0.5, 2.5), offset)
    if rng.random() < 0.15:  # a binarised scan with speckle, as in part of SROIE; faded print stays black
        grey = image.mean(axis=2) + _noise(rng, height, width) * _uniform(rng, 8, 25)
        level = np.where(grey < _uniform(rng, 200, 215), _uniform(rng, 0, 40), 255.0).astype(np.float32)
        image = cv2.merge([level, level, level])
    return np.clip(image, 0, 255, out=image).astype(np.uint8)


def _cast_shadow(rng: np.random.Generator, planes: list[np.ndarray]) -> list[np.ndarray]:
    """Sometimes a soft-edged shadow (a hand, a phone) over part of the photo."""
    if rng.random() >= 0.35:
        return planes
    h, w = planes[0].shape
    angle = rng.uniform(0, 2 * np.pi)
    ys, xs = np.linspace(-0.5, 0.5, h, dtype=np.float32), np.linspace(-0.5, 0.5, w, dtype=np.float32)
    side = xs[None, :] * float(np.cos(angle)) + ys[:, None] * float(np.sin(angle)) - _uniform(rng, 0.1, 0.45)
    dark = 1.0 - _uniform(rng, 0.2, 0.5) / (1.0 + np.exp(-side / _uniform(rng, 0.01, 0.08)))
    return [p * dark for p in planes]


def _uniform(rng: np.random.Generator, low: float, high: float) -> float:
    """A Python float, so arithmetic on float32 images stays float32 (NEP 50)."""
    return float(rng.uniform(low, high))


def _colour(rng: np.random.Generator, low: float, high: float, tint: float) -> list[float]:
    grey = _uniform(rng, low, high)
    return [grey + _uniform(rng, -tint, tint) for _ in range(3)]


@functools.cache
def _noise_bank(size: int) -> npt.NDArray[np.float32]:
    """Fixed unit-variance noise; crops of it at random offsets are far cheaper than fresh normals."""
    return np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)


def _noise(rng: np.random.Generator, height: int, width: int) -> npt.NDArray[np.float32]:
    """(height, width) float32 unit-variance noise, a view into the bank (do not write to it)."""
    bank = _noise_bank(max(1024, 1 << (max(height, width) - 1).bit_length()))
    y, x = (int(v) for v in rng.integers(0, (len(bank) - height + 1, len(bank) - width + 1)))
    return bank[y : y + height, x : x + width]


def _warp_points(points: np.ndarray, matrix: np.ndarray, bounds: np.ndarray) -> npt.NDArray[np.float32]:
    """(K, 2) paper px -> image px, clipped to the image (cv2 here keeps the CLI free of torch imports)."""
    warped = cv2.perspectiveTransform(points.reshape(-1, 1, 2).astype(np.float64), matrix).reshape(-1, 2)
    return np.clip(warped, 0, bounds).astype(np.float32)


def _low_freq(rng: np.random.Generator, height: int, width: int, cells: int) -> npt.NDArray[np.float32]:
    """Smooth noise in about [-1, 1], shape (height, width) float32."""
    grid = rng.uniform(-1, 1, (cells, cells)).astype(np.float32)
    # cubic to 1/8 size, then linear: as smooth as a full-size cubic resize at a tenth of the cost
    small = cv2.resize(grid, (width // 8 + 2, height // 8 + 2), interpolation=cv2.INTER_CUBIC)
    # cv2's stubs type images as MatLike, without a dtype.
    return cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)  # type: ignore[return-value]


def _paper(rng: np.random.Generator, alpha: np.ndarray) -> list[np.ndarray]:
    """Paper with texture and the ink on it: R, G, B planes (h, w) float32 in [0, 255]."""
    h, w = alpha.shape
    base, ink = _colour(rng, 218, 250, 6), _colour(rng, 10, 70, 10)
    texture = _low_freq(rng, h, w, int(rng.integers(3, 8))) * _uniform(rng, 2, 10)
    texture += _noise(rng, h, w) * _uniform(rng, 1, 4)
    fade = _low_freq(rng, h, w, int(rng.integers(2, 6)))
    a = alpha * (_uniform(rng, 0.85, 1.0) - _uniform(rng, 0, 0.12) * (1.0 + fade))
    texture *= 1.0 - a
    return [texture + a * (i - b) + b for b, i in zip(base, ink, strict=True)]


def _placement(rng: np.random.Generator, paper_w: int, paper_h: int, width: int, height: int) -> np.ndarray:
    """Paper px -> image px homography: rotation within +-4 deg, mild perspective, kept inside the image."""
    half = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], np.float64) * (paper_w / 2, paper_h / 2)
    corners = half + rng.uniform(-1, 1, (4, 2)) * rng.uniform(0, 0.03) * (paper_w, paper_h)
    corners = corners @ _rotation(rng.uniform(-4, 4)).T
    size = np.array([width - 2.0, height - 2.0])
    extent = corners.max(axis=0) - corners.min(axis=0)
    corners *= min(1.0, float(np.min(size / extent)))
    lo, hi = corners.min(axis=0), corners.max(axis=0)
    room = size - (hi - lo)
    offset = 1.0 - lo + room * rng.uniform(0.2, 0.8, 2)
    return cv2.getPerspectiveTransform(_corners(paper_w, paper_h), (corners + offset).astype(np.float32))


def _corners(width: int, height: int) -> npt.NDArray[np.float32]:
    return np.array([[0, 0], [width, 0], [width, height], [0, height]], np.float32)


def _rotation(degrees: float) -> np.ndarray:
    theta = np.deg2rad(degrees)
    return np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])


def _composite(
    rng: np.random.Generator, paper: list[np.ndarray], matrix: np.ndarray, width: int, height: int
) -> list[np.ndarray]:
    """Warp the paper planes onto a textured background with a soft shadow: planes (height, width)."""
    light = rng.random() < 0.35  # scanner-lid white, as in many scanned receipt sets
    colour = _colour(rng, 170, 235, 15) if light else _colour(rng, 25, 170, 60)
    texture = _low_freq(rng, height, width, int(rng.integers(2, 6))) * _uniform(rng, 5, 25)
    texture += _noise(rng, height, width) * _uniform(rng, 1, 5)
    mask = _warp(np.ones(paper[0].shape, np.float32), matrix, width, height)
    keep = (1.0 - _uniform(rng, 0.1, 0.45) * _shadow(rng, mask)) * (1.0 - mask)
    texture *= keep
    # a warped plane is already premultiplied by the mask at the paper border (zeros interpolated in)
    return [_warp(p, matrix, width, height) + texture + keep * c for p, c in zip(paper, colour, strict=True)]


def _warp(plane: np.ndarray, matrix: np.ndarray, width: int, height: int) -> np.ndarray:
    return cv2.warpPerspective(plane, matrix, (width, height), flags=cv2.INTER_LINEAR)


def _shadow(rng: np.random.Generator, mask: np.ndarray) -> np.ndarray:
    """The paper mask shifted and blurred (computed at 1/4 size, where blurring is cheap): (H, W) float32."""
    h, w = mask.shape
    small = cv2.resize(mask, (w // 4 + 1, h // 4 + 1), interpolation=cv2.INTER_AREA)
    shift = np.array([[1, 0, rng.uniform(-0.75, 1.25)], [0, 1, rng.uniform(0, 1.5)]], np.float32)
    small = cv2.warpAffine(small, shift, small.shape[::-1])
    small = cv2.GaussianBlur(small, (0, 0), _uniform(rng, 0.5, 1.5))
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR)


def _camera_effects(rng: np.random.Generator, planes: list[np.ndarray]) -> npt.NDArray[np.uint8]:
    """Uneven light, brightness/contrast, mild blur and sensor noise; returns (h, w, 3) uint8 RGB."""
    h, w = planes[0].shape
    ys, xs = np.linspace(-0.5, 0.5, h, dtype=np.float32), np.linspace(-0.5, 0.5, w, dtype=np.float32)
    contrast = _uniform(rng, 0.85, 1.1)
    gain = contrast * (
        1.0 + _uniform(rng, -0.15, 0.15) * ys[:, None] + _uniform(rng, -0.15, 0.15) * xs[None, :]
    )
    offset = 128.0 * (1.0 - contrast) + _uniform(rng, -20, 15)
    image = _blur_and_noise(rng, cv2.merge([p * gain for p in planes]), (0.3, 0.8), (1.0, 5.0), offset)
    return np.clip(image, 0, 255, out=image).astype(np.uint8)


def _blur_and_noise(
    rng: np.random.Generator,
    image: np.ndarray,
    blur: tuple[float, float],
    noise: tuple[float, float],
    offset: float,
) -> np.ndarray:
    """Half the time a Gaussian blur (sigma in ``blur``), then noise (std in ``noise``) plus ``offset``."""
    if rng.random() < 0.5:
        image = cv2.GaussianBlur(image, (0, 0), _uniform(rng, *blur))
    sigma = _uniform(rng, *noise)
    h, w = image.shape[:2]
    # cv2's stubs type images as MatLike, without a dtype.
    image += cv2.merge([_noise(rng, h, w) * sigma + offset for _ in range(3)])  # type: ignore[arg-type]
    return image


def _encode(seed: list[int], long_side: int, style: str, granularity: str) -> tuple[bytes, dict[str, Any]]:
    """Render one image: its JPEG bytes and its annotation entry."""
    receipt = render_receipt(seed, long_side, style, granularity)
    bgr = cv2.cvtColor(receipt.image, cv2.COLOR_RGB2BGR)
    ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, receipt.jpeg_quality])
    if not ok:
        raise OSError(f"image seed {seed}: JPEG encoding failed")
    words = {
        f"{k + 1:04d}": {
            "points": np.round(w.points.astype(np.float64), 2).tolist(),
            "text": w.text,
            "ignore": w.ignore,
        }
        for k, w in enumerate(receipt.words)
    }
    return data.tobytes(), {"words": words, "img_w": receipt.image.shape[1], "img_h": receipt.image.shape[0]}


def _write_split(root: Path, split: str, count: int, settings: dict[str, Any], workers: int) -> None:
    # every image has its own seed, so the files do not depend on the worker count
    seeds = [[settings["seed"] % 2**63, SPLITS.index(split), i] for i in range(count)]
    # a partial of a module function pickles, so worker processes can render it
    encode = functools.partial(_encode, **{k: settings[k] for k in ("long_side", "style", "granularity")})
    images: dict[str, Any] = {}
    # spawn, not fork: a forked OpenCV thread pool can hang; one OpenCV thread per worker process
    spawn = multiprocessing.get_context("spawn")
    parallel = workers > 1 and count > 1
    with spawn.Pool(workers, cv2.setNumThreads, (1,)) if parallel else contextlib.nullcontext() as pool:
        encoded = map(encode, seeds) if pool is None else pool.imap(encode, seeds, chunksize=4)
        for i, (data, entry) in enumerate(encoded):
            name = f"{split}_{i:05d}.jpg"
            atomic_write_bytes(root / "images" / split / name, data)
            images[name] = entry
    (root / "images" / split).mkdir(parents=True, exist_ok=True)
    atomic_write_json(root / "jsons" / f"{split}.json", {"images": images}, indent=None)


def synthetic_settings(synthetic: Mapping[str, Any]) -> dict[str, Any]:
    """``data.synthetic`` checked (exactly the known keys, a known style and granularity) and typed."""
    if set(synthetic) != set(SYNTHETIC_KEYS):
        raise ValueError(
            f"data.synthetic: expected exactly the keys {SYNTHETIC_KEYS}, got {sorted(synthetic)}"
        )
    settings: dict[str, Any] = {k: int(synthetic[k]) for k in SYNTHETIC_KEYS[:5]}
    _check_choice("style", synthetic["style"], STYLES)
    _check_choice("granularity", synthetic["granularity"], GRANULARITIES)
    return {**settings, "style": str(synthetic["style"]), "granularity": str(synthetic["granularity"])}


def _read_manifest(out: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out / _MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _check_replaceable(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out}: expected a dataset directory, got a file")
    if out.is_dir() and any(out.iterdir()):
        found = _read_manifest(out)
        if not isinstance(found, dict) or found.get("generator") != _GENERATOR:
            raise FileExistsError(
                f"{out}: expected an empty folder or one written by {_GENERATOR} (with {_MANIFEST}), "
                "got other content; refusing to replace it"
            )


def _swap_into_place(tmp: Path, out: Path, manifest: dict[str, Any]) -> None:
    old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
    if out.exists():
        os.rename(out, old)
    try:
        os.rename(tmp, out)
    except OSError:
        if _read_manifest(out) != manifest:  # a concurrent run that wrote the same set is fine
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


def generate_dataset(
    out_dir: str | Path,
    num_train: int,
    num_val: int,
    num_test: int,
    seed: int,
    long_side: int = 512,
    style: str = "basic",
    granularity: str = "word",
    workers: int = 1,
) -> Path:
    """Write the synthetic set (images, annotation files, ``manifest.json``) to ``out_dir`` unless it holds
    exactly this one: built in a temporary folder beside it and renamed into place, so readers never see a
    partial set. The same files for any ``workers``. ValueError on bad counts, ``long_side`` < 64 or
    ``workers`` < 1; FileExistsError when ``out_dir`` holds something this generator did not write."""
    counts = {"train": num_train, "val": num_val, "test": num_test}
    if min(counts.values()) < 0 or long_side < 64 or workers < 1:
        raise ValueError(
            f"expected counts >= 0, long_side >= 64 and workers >= 1, got {counts}, "
            f"long_side={long_side} and workers={workers}"
        )
    settings = synthetic_settings(
        {**{f"num_{k}": v for k, v in counts.items()}, "seed": seed, "long_side": long_side}
        | {"style": style, "granularity": granularity}
    )
    out = Path(out_dir)
    manifest = {
        "generator": _GENERATOR,
        "version": GENERATOR_VERSION,
        "seed": seed,
        "long_side": long_side,
        "style": style,
        "granularity": granularity,
        "num_images": counts,
        "fonts": [f.name for f in available_fonts()],
        "font_package": f"{FONT_PACKAGE}=={font_package_version()}",
    }
    if _read_manifest(out) == manifest:
        log.info("synthetic dataset at %s is up to date", out)
        return out
    _check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    start = time.perf_counter()
    log.info(
        "generating %d synthetic receipts (%s, %s) into %s", sum(counts.values()), style, granularity, out
    )
    try:
        for split, count in counts.items():
            _write_split(tmp, split, count, settings, workers)
        atomic_write_json(tmp / _MANIFEST, manifest)
        _swap_into_place(tmp, out, manifest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    total, seconds = sum(counts.values()), time.perf_counter() - start
    log.info(
        "wrote %d synthetic receipts to %s in %.1f s (%.1f ms/image)",
        total,
        out,
        seconds,
        1000 * seconds / max(total, 1),
    )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``python -m ocr.data.synthetic --out DIR --num-train N --num-val M [--num-test K] --seed S
    [--long-side L] [--style basic|receipt] [--granularity line|word] [--workers W]``."""
    parser = argparse.ArgumentParser(
        prog="python -m ocr.data.synthetic", description="Generate the synthetic receipt dataset."
    )
    parser.add_argument("--out", dest="out_dir", required=True, type=Path, help="dataset root to create")
    parser.add_argument("--num-train", required=True, type=int)
    parser.add_argument("--num-val", required=True, type=int)
    parser.add_argument("--num-test", default=0, type=int)
    parser.add_argument("--seed", required=True, type=int)
    parser.add_argument("--long-side", default=512, type=int, help="long side of every image in px")
    parser.add_argument("--style", default="basic", choices=STYLES)
    parser.add_argument(
        "--granularity", default="word", choices=GRANULARITIES, help="one box per word or line"
    )
    parser.add_argument("--workers", default=1, type=int, help="processes; the output does not depend on it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    generate_dataset(**vars(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
