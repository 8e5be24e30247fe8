"""Pixels of the photo augmentation: procedural backgrounds, and what a phone camera does to the light.

Pure functions of a numpy ``Generator`` and an image; nothing here moves a pixel to another place, so the
polygons are not concerned (``ocr.data.photo_geometry`` moves them). Sizes that are lengths on the page
(blur radii, background patterns) are given in px of a 1024 px long side and scaled to the image.
Smooth fields (light, shading, shadows) are drawn at 1/8 size and resized; full-size work is uint8
OpenCV arithmetic, and noise comes from OpenCV's generator seeded from ``rng`` (it is per thread, and a
DataLoader worker builds its samples in one thread), so a sample is the same for the same seed.
"""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

__all__ = [
    "BACKGROUNDS",
    "background",
    "colour_cast",
    "defocus",
    "composite",
    "jpeg",
    "motion_blur",
    "sensor_noise",
    "uneven_light",
]

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


def uneven_light(rng: np.random.Generator, image: Image, strength: float, shadow: float) -> Image:
    """Multiply by a light field: a gradient, a vignette and blotches of depth ``strength`` (0..1), and,
    when ``shadow`` > 0, a soft-edged cast shadow (a hand, a phone) of that darkness over part of it."""
    h, w = image.shape[:2]
    sh, sw = h // 8 + 1, w // 8 + 1
    xs, ys = _coords(sh, sw)
    gx, gy = (np.float32(v) for v in rng.uniform(-1, 1, 2))
    s = np.float32(strength)
    gain = 1.0 + s * (gx * xs + gy * ys) - s * 0.5 * (xs * xs + ys * ys)
    gain = gain + s * 0.3 * _smooth(rng, sh, sw, 3)
    if shadow > 0:
        gain = gain * (1.0 - np.float32(shadow) * _cast_shadow(rng, sh, sw))
    small = gain.astype(np.float32)
    full = cv2.resize(cv2.merge([small, small, small]), (w, h), interpolation=cv2.INTER_LINEAR)
    return cv2.multiply(image, full, dtype=cv2.CV_8U)  # type: ignore[return-value]


def _cast_shadow(rng: np.random.Generator, h: int, w: int) -> Plane:
    """(h, w) float32 in [0, 1]: a blurred random quadrilateral coming in from one edge."""
    mask = np.zeros((h, w), np.float32)
    depth = rng.uniform(0.2, 0.6)
    along, inner = np.sort(rng.uniform(0, 1, 2)), np.sort(rng.uniform(0, 1, 2))
    # (along the edge, into the image) in [0, 1], then turned to a random edge
    shape = np.array(
        [[along[0], 0], [along[1], 0], [inner[1], depth], [inner[0], depth * rng.uniform(0.6, 1)]]
    )
    edge = int(rng.integers(4))
    if edge in (1, 3):
        shape = shape[:, ::-1]
    if edge in (2, 3):
        shape = 1.0 - shape
    cv2.fillPoly(mask, [np.round(shape * (w, h)).astype(np.int32)], 1.0)
    return cv2.GaussianBlur(mask, (0, 0), rng.uniform(0.5, 3.0) * max(h, w) / 128.0)  # type: ignore[return-value]


def colour_cast(rng: np.random.Generator, image: Image, strength: float) -> Image:
    """Per-channel gains (a white balance gone warm, cool, green...) within ``1 +- strength``."""
    gains = 1.0 + rng.uniform(-strength, strength, 3)
    return cv2.transform(image, np.diag(gains))  # type: ignore[return-value]


def defocus(image: Image, radius: float) -> Image:
    """Out of focus: a Gaussian blur of standard deviation ``radius / 2`` (that of a disk of ``radius`` px;
    separable, so a large radius costs little)."""
    return cv2.GaussianBlur(image, (0, 0), max(radius, 0.1) / 2.0)  # type: ignore[return-value]


def motion_blur(image: Image, length: float, angle: float) -> Image:
    """Camera shake: convolve with a line ``length`` px long at ``angle`` degrees (a line over 6 px at half
    size, where the convolution costs a quarter)."""
    half = length > 6.0
    work = cv2.resize(image, (0, 0), fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA) if half else image
    length = length / 2.0 if half else length
    size = int(np.ceil(length)) | 1
    kernel = np.zeros((size, size), np.float32)
    c, dx, dy = size // 2, np.cos(np.deg2rad(angle)) * length / 2, np.sin(np.deg2rad(angle)) * length / 2
    cv2.line(kernel, (round(c - dx), round(c - dy)), (round(c + dx), round(c + dy)), 1.0, 1, cv2.LINE_AA)
    out = cv2.filter2D(work, -1, kernel / kernel.sum(), borderType=cv2.BORDER_REFLECT)
    if half:
        out = cv2.resize(out, (image.shape[1], image.shape[0]), interpolation=cv2.INTER_LINEAR)
    return out  # type: ignore[return-value]


def sensor_noise(rng: np.random.Generator, image: Image, std: float) -> Image:
    """Gaussian noise of ``std`` grey levels per channel, drawn at half size and spread over 2 x 2 pixels
    (demosaicing correlates a sensor's noise over neighbours; a quarter of the draws)."""
    h, w = image.shape[:2]
    noise = cv2.resize(
        _gauss(rng, ((h + 1) // 2, (w + 1) // 2, 3), std), (w, h), interpolation=cv2.INTER_NEAREST
    )
    return cv2.add(image, noise, dtype=cv2.CV_8U)  # type: ignore[return-value]


def jpeg(image: Image, quality: int) -> Image:
    """Round-trip through a JPEG of ``quality`` (RGB in, RGB out; OpenCV encodes BGR)."""
    ok, data = cv2.imencode(".jpg", image[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise RuntimeError(f"photo jpeg: encoding at quality {quality} failed")
    decoded = cv2.imdecode(data, cv2.IMREAD_COLOR)
    if decoded is None:
        raise RuntimeError(f"photo jpeg: decoding at quality {quality} failed")
    return np.ascontiguousarray(decoded[..., ::-1])
