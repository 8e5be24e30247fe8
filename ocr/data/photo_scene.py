"""The scene of the photographed page: procedural backgrounds (albumentations has none) with the page's
drop shadow, the page laid over them, and uneven light (``A.Illumination`` does the same at full size in
float, 30 times slower).

Pure functions of a numpy ``Generator`` and images; nothing moves a pixel, so polygons are untouched.
Sizes are px of a 1024 px long side; smooth fields are drawn at 1/8 size; OpenCV's noise generator is
seeded from ``rng``, so a sample is the same for the same seed.
"""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

__all__ = ["BACKGROUNDS", "background", "composite", "uneven_light"]

BACKGROUNDS = ("wood", "cloth", "paper", "table")
Image = npt.NDArray[np.uint8]
Plane = npt.NDArray[np.float32]


def _gauss(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> npt.NDArray[np.int16]:
    """int16 normal noise of ``std`` (OpenCV's generator, seeded from ``rng``)."""
    out = np.empty(shape, np.int16)
    cv2.setRNGSeed(int(rng.integers(2**31)))
    channels = shape[2] if len(shape) == 3 else 1
    cv2.randn(out, (0.0,) * channels, (float(std),) * channels)  # type: ignore[call-overload]  # stubs: no tuples
    return out


def _smooth(rng: np.random.Generator, height: int, width: int, cells: int) -> Plane:
    """(height, width) smooth noise in about [-1, 1]: a ``cells`` x ``cells`` grid, cubic then linear."""
    grid = rng.uniform(-1, 1, (cells, cells)).astype(np.float32)
    small = cv2.resize(grid, (width // 8 + 2, height // 8 + 2), interpolation=cv2.INTER_CUBIC)
    return cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)  # type: ignore[return-value]


def _coords(height: int, width: int) -> tuple[Plane, Plane]:
    """(1, W) and (H, 1) float32 coordinates in [-0.5, 0.5], broadcastable."""
    xs = np.linspace(-0.5, 0.5, width, dtype=np.float32)[None, :]
    ys = np.linspace(-0.5, 0.5, height, dtype=np.float32)[:, None]
    return xs, ys


def _rgb(rng: np.random.Generator, low: float, high: float, tint: float) -> npt.NDArray[np.float32]:
    grey = float(rng.uniform(low, high))
    return (grey + rng.uniform(-tint, tint, 3)).astype(np.float32)


def _multiply(image: Image, gain: Plane) -> Image:
    """``image * gain`` (an (H, W) float32 gain), saturated to uint8."""
    return cv2.multiply(image, cv2.merge([gain, gain, gain]), dtype=cv2.CV_8U)  # type: ignore[return-value]


def background(
    rng: np.random.Generator, kind: str, coverage: npt.NDArray[np.uint8], drop_shadow: float
) -> Image:
    """An (H, W, 3) uint8 RGB surface the page lies on, drawn at quarter size: ``wood`` (grain), ``cloth``
    (weave and folds), ``paper`` (another sheet, plain or ruled) or ``table`` (a plain coloured top),
    darkened by ``drop_shadow`` (0..1) under the page's soft shadow (``coverage`` shifted and blurred)."""
    height, width = coverage.shape
    h, w = height // 4 + 1, width // 4 + 1
    xs, ys = _coords(h, w)
    unit = max(h, w) / 256.0  # quarter-size px per 4 px at a 1024 px long side
    if kind == "wood":
        angle = float(rng.uniform(0, np.pi))
        across = (xs * np.float32(np.cos(angle) * w) + ys * np.float32(np.sin(angle) * h)) / np.float32(unit)
        bend = _smooth(rng, h, w, int(rng.integers(3, 7))) * np.float32(rng.uniform(5, 20))
        phase = (across + bend) * np.float32(2 * np.pi / rng.uniform(4, 15))
        grain = np.sin(phase) + 0.5 * np.sin(np.float32(2.7) * phase + 1.0)  # irregular rings
        shade = 1.0 - np.float32(rng.uniform(0.05, 0.15)) * (grain + 1.5) + 0.1 * _smooth(rng, h, w, 5)
        colour = _rgb(rng, 120, 210, 0) * np.array([1.0, 0.72, 0.45], np.float32)
    elif kind == "cloth":
        step = np.float32(2 * np.pi / (rng.uniform(2.0, 4.0) * unit))
        weave = np.sin(xs * np.float32(w) * step) * np.sin(ys * np.float32(h) * step)
        shade = 1.0 + 0.08 * weave + 0.15 * _smooth(rng, h, w, int(rng.integers(3, 7)))
        colour = _rgb(rng, 30, 220, 70)
    elif kind == "paper":
        shade = 1.0 + 0.04 * _smooth(rng, h, w, 4)
        if rng.random() < 0.5:  # ruled lines
            rows = np.arange(h, dtype=np.float32)[:, None] % np.float32(rng.uniform(5, 10) * unit) < 1.0
            shade = shade - 0.2 * rows.astype(np.float32)
        colour = _rgb(rng, 200, 245, 8)
    elif kind == "table":
        shade = 1.0 + 0.12 * _smooth(rng, h, w, int(rng.integers(2, 5)))
        colour = _rgb(rng, 20, 230, 40)
    else:
        raise ValueError(f"photo background: expected one of {BACKGROUNDS}, got {kind!r}")
    shade = shade * _shadow_gain(rng, coverage, (w, h), drop_shadow)
    flat = np.full((h, w, 3), np.round(np.clip(colour, 0, 255)), np.uint8)
    small = cv2.add(_multiply(flat, shade.astype(np.float32)), _gauss(rng, (h, w, 3), 3.0), dtype=cv2.CV_8U)
    return cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)  # type: ignore[return-value]


def _shadow_gain(
    rng: np.random.Generator, coverage: npt.NDArray[np.uint8], size: tuple[int, int], strength: float
) -> Plane:
    """(size[1], size[0]) float32 gain: 1 - ``strength`` x the coverage shifted and blurred (at 1/8 size)."""
    h, w = coverage.shape
    small = cv2.resize(coverage, (w // 8 + 1, h // 8 + 1), interpolation=cv2.INTER_AREA).astype(np.float32)
    reach = max(small.shape) * 0.015
    shift = np.array([[1, 0, rng.uniform(-1, 1) * reach], [0, 1, rng.uniform(0, 1.5) * reach]], np.float32)
    # cv2's stubs type images as MatLike, without a dtype.
    moved = cv2.warpAffine(small, shift, small.shape[::-1])
    blurred = cv2.GaussianBlur(moved, (0, 0), reach + 0.5)
    return 1.0 - cv2.resize(blurred, size, interpolation=cv2.INTER_LINEAR) * np.float32(strength / 255.0)  # type: ignore[no-any-return]


def composite(page: Image, coverage: npt.NDArray[np.uint8], surface: Image) -> Image:
    """The page (premultiplied by its ``coverage``, as ``remap_page`` gives it) over ``surface``."""
    uncovered = cv2.merge([255 - coverage] * 3)
    return cv2.add(page, cv2.multiply(surface, uncovered, scale=1.0 / 255.0))  # type: ignore[return-value]


def uneven_light(rng: np.random.Generator, image: Image, strength: float) -> Image:
    """Multiply by a light field drawn at 1/8 size: a gradient, a vignette and blotches of depth
    ``strength`` (0..1)."""
    h, w = image.shape[:2]
    sh, sw = h // 8 + 1, w // 8 + 1
    xs, ys = _coords(sh, sw)
    gx, gy = (np.float32(v) for v in rng.uniform(-1, 1, 2))
    s = np.float32(strength)
    gain = 1.0 + s * (gx * xs + gy * ys) - s * 0.5 * (xs * xs + ys * ys) + s * 0.3 * _smooth(rng, sh, sw, 3)
    return _multiply(image, cv2.resize(gain.astype(np.float32), (w, h), interpolation=cv2.INTER_LINEAR))  # type: ignore[arg-type]
