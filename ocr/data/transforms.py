"""Train and eval transforms: source image + polygons (original px) -> network input + Geometry.

Every geometric step of a sample (scale, flip, rotation, crop, letterbox) is folded into ONE affine
matrix that moves the pixels (a single ``cv2.resize``/``cv2.warpAffine``, or for a training crop with
``data.render_on=device`` one ``grid_sample`` on the device, ``ocr.data.warp``) and the polygons alike, so
no polygon point can be dropped or re-ordered and ``Geometry.matrix`` is exact by construction.
Photometric augmentations (colour, blur, noise) never move pixels: the train transform draws their
parameters with albumentations and the device applies them per batch (``ocr.data.photometric``).

Coordinates are continuous: pixel ``i`` spans ``[i, i + 1)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple, Protocol

import cv2
import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from ocr.data.photo import PhotoAugment
from ocr.data.photometric import PhotometricParams
from ocr.data.warp import render_crop, source_region
from ocr.geometry import apply_matrix, letterbox_geometry
from ocr.polygons import group_by_point_count
from ocr.types import CropWarp, Geometry, Polygon
from ocr.utils.config_types import PositiveInt

__all__ = [
    "EvalTransform",
    "SourceImage",
    "TrainTransform",
    "Transform",
    "TransformResult",
    "to_chw_tensor",
]


@dataclass(frozen=True)
class SourceImage:
    """An upright image that is the original image scaled by exactly ``scale``."""

    image: npt.NDArray[np.uint8]  # (h, w, 3) uint8 RGB, h ~= orig_height * scale (sizes rounded, scale exact)
    scale: float  # source px per original px (<= 1 when decoded/resized down)
    orig_width: int  # original px after EXIF orientation
    orig_height: int


class TransformResult(NamedTuple):
    image: Tensor  # (3, H, W) uint8 RGB; normalised on the device (ocr.data.coding)
    polygons: list[Polygon]  # input px, same count/order/points as given; not clipped
    geometry: Geometry  # input px -> original px
    photometric: Tensor | None = None  # (P,) float32 parameter row, applied on the device (train only)
    warp: CropWarp | None = None  # set when ``image`` is a source region still to be warped into the crop


class Transform(Protocol):
    """What datasets need from a transform."""

    mean: tuple[float, ...]  # normalisation, carried to the batch's BatchCoding and applied on the device
    std: tuple[float, ...]

    @property
    def source_long_side(self) -> int:
        """Long side (px) the source image needs; larger originals are decoded/cached at this size."""
        ...

    def __call__(
        self, source: SourceImage, polygons_orig_px: Sequence[Polygon], ignore: Sequence[bool]
    ) -> TransformResult:
        """Map the source image and its polygons (original px) into input px."""
        ...


def to_chw_tensor(image: npt.NDArray[np.uint8]) -> Tensor:
    """(H, W, 3) uint8 RGB -> (3, H, W) uint8 tensor (contiguous, so that collate copies it once)."""
    return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))


RESIZE_RULES = ("long", "short")


class EvalTransform:
    """Letterbox: aspect-preserving resize of the original to ``long_side``, padded bottom/right (with
    ``fill``) to a square, or (``pad_multiple``) only to the next multiple of ``pad_multiple`` px on each
    side: a receipt at 1024 x 450 computes 1024 x 480 instead of 1024 x 1024, and eval batches group
    images of one input size (``ocr.data.eval_batches``). With ``resize="short"`` the input follows the
    image: its short side is scaled to ``short_side`` (up or down), its long side then capped at
    ``long_side`` (a 3000 x 4000 photo at ``short_side=736`` is scaled to 736 x 981 and computed at
    768 x 992 with ``pad_multiple=32`` and the one-pixel decode margin); use it with ``pad_multiple``, as
    without every input is still the square. ``mean``/``std`` (RGB, [0, 1] units) normalise on the device.
    """

    def __init__(
        self,
        *,
        long_side: PositiveInt,
        mean: Sequence[float],
        std: Sequence[float],
        fill: int,
        pad_multiple: PositiveInt | None,
        resize: str = "long",
        short_side: PositiveInt | None = None,
    ) -> None:
        if resize not in RESIZE_RULES:
            raise ValueError(f"resize: expected one of {RESIZE_RULES}, got {resize!r}")
        if resize == "short" and short_side is None:  # the sizes' ranges: the config check (PositiveInt)
            raise ValueError(f"short_side: expected a positive int with resize=short, got {short_side!r}")
        self.resize, self.short_side, self.pad_multiple = resize, short_side, pad_multiple
        self.long_side, self.fill = int(long_side), int(fill)
        self.mean, self.std = tuple(float(m) for m in mean), tuple(float(s) for s in std)

    @property
    def source_long_side(self) -> int:
        return self.long_side

    def image_long_side(self, orig_width: int, orig_height: int) -> int:
        """The long side (px) this original is scaled to: ``long_side``, or under ``resize="short"`` what
        brings its short side to ``short_side``, at most ``long_side``."""
        if self.resize == "long" or self.short_side is None:
            return self.long_side
        long, short = max(orig_width, orig_height), max(1, min(orig_width, orig_height))
        return max(1, min(self.long_side, round(long * self.short_side / short)))

    def input_size(self, orig_width: int, orig_height: int) -> tuple[int, int]:
        """(height, width) of the network input for an original of this size (EXIF-upright px)."""
        if self.pad_multiple is None:
            return self.long_side, self.long_side
        side = self.image_long_side(orig_width, orig_height)
        scale = side / max(orig_width, orig_height)
        # A JPEG decoded at reduced scale (originals larger than the input) can come out a pixel larger
        # than size * scale (partial DCT blocks are rounded up): one more keeps it whole, as the square did.
        margin = 1 if scale < 1.0 else 0
        multiple = self.pad_multiple
        return tuple(  # type: ignore[return-value]
            min(self.long_side, -(-(math.ceil(extent * scale - 1e-9) + margin) // multiple) * multiple)
            for extent in (orig_height, orig_width)
        )

    def __call__(
        self, source: SourceImage, polygons_orig_px: Sequence[Polygon], ignore: Sequence[bool]
    ) -> TransformResult:
        """Letterbox ``source`` and map ``polygons_orig_px`` into input px (``ignore`` is not needed)."""
        side = self.image_long_side(source.orig_width, source.orig_height)
        geometry, scale = letterbox_geometry(source.orig_width, source.orig_height, side)
        height, width = self.input_size(source.orig_width, source.orig_height)
        resized = resize_by(source.image, scale / source.scale)[:height, :width]
        canvas = np.full((height, width, 3), self.fill, dtype=np.uint8)
        canvas[: resized.shape[0], : resized.shape[1]] = resized
        orig_to_input = np.diag([scale, scale, 1.0])
        polygons = [apply_matrix(p, orig_to_input) for p in polygons_orig_px]
        geometry = replace(geometry, input_width=width, input_height=height)
        return TransformResult(to_chw_tensor(canvas), polygons, geometry)


class TrainTransform:
    """Random scale + flip + rotation + text-keeping crop in one warp; photometric jitter parameters drawn
    here, applied on the device.

    The original is scaled so its long side is ``train_long_side``, then by a factor from ``scale_range``,
    flipped with ``p_flip``, rotated within +-``rotate_limit`` deg with ``p_rotate``, and cropped to a
    ``crop_size`` square, around a random non-ignored polygon with ``p_text_crop`` (else anywhere), ``fill``
    where the crop leaves the image. ``photo`` (``ocr.data.photo``), when set, first makes the source a
    phone photo of it with its own probability.
    """

    def __init__(
        self,
        *,
        crop_size: PositiveInt,
        train_long_side: PositiveInt,
        scale_range: Sequence[float],
        rotate_limit: float,
        p_rotate: float,
        p_flip: float,
        p_text_crop: float,
        photometric: PhotometricParams,
        mean: Sequence[float],
        std: Sequence[float],
        fill: int,
        photo: PhotoAugment | None = None,
    ) -> None:
        lo, hi = (float(s) for s in scale_range)
        if not 0 < lo <= hi:
            raise ValueError(f"scale_range: expected 0 < min <= max, got {tuple(scale_range)}")
        self.crop_size, self.train_long_side, self.fill = int(crop_size), int(train_long_side), int(fill)
        self.scale_range, self.rotate_limit = (lo, hi), float(rotate_limit)
        self.p_rotate, self.p_flip, self.p_text_crop = float(p_rotate), float(p_flip), float(p_text_crop)
        self.mean, self.std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
        self.photometric, self.photo = photometric, photo
        # Seeded from numpy's global RNG so that seed_everything() before instantiation is reproducible;
        # DataLoader workers re-seed through ReceiptDataModule's worker_init_fn.
        self.set_random_seed(int(np.random.randint(0, 2**31 - 1)))

    def set_random_seed(self, seed: int) -> None:
        """Re-seed the geometric and photometric random generators (called per DataLoader worker)."""
        self._rng = np.random.default_rng(seed)
        self.photometric.set_random_seed(seed)
        if self.photo is not None:
            self.photo.set_random_seed(seed)

    @property
    def source_long_side(self) -> int:
        """Long side the source image needs for the largest scale factor."""
        return int(np.ceil(self.train_long_side * self.scale_range[1]))

    def __call__(
        self, source: SourceImage, polygons_orig_px: Sequence[Polygon], ignore: Sequence[bool]
    ) -> TransformResult:
        """Augment ``source`` and render the crop here (``render_crop``, the CPU reference of the device
        warp), as ``data.render_on=worker`` trains on it; ``ignore``d polygons are never crop centres."""
        region, result = self.crop_region(source, polygons_orig_px, ignore)
        assert result.warp is not None  # crop_region always leaves the warp to its caller
        crop = render_crop(region, result.warp)
        return result._replace(image=to_chw_tensor(crop), warp=None)

    def crop_region(
        self, source: SourceImage, polygons_orig_px: Sequence[Polygon], ignore: Sequence[bool]
    ) -> tuple[npt.NDArray[np.uint8], TransformResult]:
        """Draw the augmentation and find the part of ``source`` the crop reads, without warping it: the
        region (h, w, 3) uint8, a view of ``source.image`` with sides that are multiples of ``warp.pool``,
        and the result whose ``image`` is that region as a (3, h, w) tensor view and whose ``warp`` turns it
        into the crop (``render_crop`` on the CPU, ``warp_regions`` on a device)."""
        source, polygons_orig_px = self._photograph(source, polygons_orig_px)
        rng = self._rng
        scale = (
            self.train_long_side / max(source.orig_width, source.orig_height) * rng.uniform(*self.scale_range)
        )
        factor = scale / source.scale  # scaled px per source px
        downscale = factor < 1.0
        angle = rng.uniform(-self.rotate_limit, self.rotate_limit) if rng.random() < self.p_rotate else 0.0
        flip = bool(rng.random() < self.p_flip)
        height, width = source.orig_height * scale, source.orig_width * scale
        # frame px -> scaled px, the frame being scaled px for a downscale (area-averaged apart from the
        # warp, below) and source px otherwise
        warp = _scale_flip_rotate(1.0 if downscale else factor, flip, angle, width, height)
        pre = np.diag([scale, scale, 1.0] if downscale else [source.scale, source.scale, 1.0])
        orig_to_scaled = warp @ pre  # original px -> scaled px
        groups = _group_polygons(polygons_orig_px)
        text = (
            _text_box(polygons_orig_px, groups, ignore, orig_to_scaled, rng)
            if rng.random() < self.p_text_crop
            else None
        )
        w, h = source.orig_width, source.orig_height
        bounds = _box(np.array([[0, 0], [w, 0], [0, h], [w, h]], np.float32), orig_to_scaled)
        x0 = _axis_origin(bounds[0], bounds[2], self.crop_size, None if text is None else text[0::2], rng)
        y0 = _axis_origin(bounds[1], bounds[3], self.crop_size, None if text is None else text[1::2], rng)
        crop = np.array([[1.0, 0.0, -x0], [0.0, 1.0, -y0], [0.0, 0.0, 1.0]]) @ warp  # frame px -> crop px
        side = self.crop_size
        window = np.array([[0, 0], [side, 0], [0, side], [side, side]], np.float32)
        crop_to_frame = np.linalg.inv(crop).astype(np.float64)  # numpy stubs: inv() loses float64
        region, pool, region_to_frame = source_region(
            source.image, _box(window, crop_to_frame), factor if downscale else 1.0, factor
        )
        orig_to_input = crop @ pre
        geometry = Geometry(
            np.linalg.inv(orig_to_input),  # type: ignore[arg-type]  # numpy stubs: inv() loses float64
            source.orig_width,
            source.orig_height,
            self.crop_size,
            self.crop_size,
        )
        crop_warp = CropWarp(pool, crop @ region_to_frame, (self.crop_size, self.crop_size), float(self.fill))
        polygons = _map_polygons(groups, len(polygons_orig_px), orig_to_input)
        image = torch.from_numpy(region).permute(2, 0, 1)  # (3, h, w) view, no copy
        return region, TransformResult(image, polygons, geometry, self.photometric(), crop_warp)

    def _photograph(
        self, source: SourceImage, polygons_orig_px: Sequence[Polygon]
    ) -> tuple[SourceImage, Sequence[Polygon]]:
        """The source as a photo (``self.photo``), when drawn: its own frame becomes the sample's original
        (``Geometry`` maps the crop to the photo; the polygons are mapped into it)."""
        if self.photo is None:
            return source, polygons_orig_px
        shot = self.photo(source.image, [np.asarray(p, np.float64) * source.scale for p in polygons_orig_px])
        if shot is None:
            return source, polygons_orig_px
        image, polygons = shot
        return SourceImage(image, 1.0, image.shape[1], image.shape[0]), polygons


def _group_polygons(
    polygons: Sequence[Polygon],
) -> list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]:
    """(rows, (G, K, 2) float64 points) per point count; one conversion when all counts are equal."""
    try:
        stacked = np.asarray(polygons, dtype=np.float64)
    except ValueError:  # ragged
        stacked = np.zeros(0)
    if stacked.ndim == 3 and stacked.shape[2] == 2:
        return [(np.arange(len(stacked)), stacked)]
    return group_by_point_count([np.asarray(p, np.float64).reshape(-1, 2) for p in polygons])


def _map_polygons(
    groups: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]],
    count: int,
    matrix: npt.NDArray[np.float64],
) -> list[Polygon]:
    """``ocr.geometry.apply_matrix`` on every polygon of ``groups``, one array operation per group."""
    mapped: list[Polygon] = [np.zeros((0, 2), np.float32)] * count
    for rows, stacked in groups:
        points = apply_matrix(stacked.reshape(-1, 2), matrix).reshape(stacked.shape)
        for row, polygon in zip(rows.tolist(), points, strict=True):
            mapped[row] = polygon
    return mapped


def resize_by(image: npt.NDArray[np.uint8], factor: float) -> npt.NDArray[np.uint8]:
    """Resize by exactly ``factor`` (continuous coordinates scale by ``factor``): area averaging when
    shrinking, bilinear when enlarging; ``dsize=(0, 0)`` makes OpenCV use the factor unrounded."""
    if abs(factor - 1.0) < 1e-12:
        return image
    interp = cv2.INTER_AREA if factor < 1.0 else cv2.INTER_LINEAR
    # cv2's stubs type images as MatLike, without a dtype.
    return cv2.resize(image, (0, 0), fx=factor, fy=factor, interpolation=interp)  # type: ignore[return-value]


def _scale_flip_rotate(
    factor: float, flip: bool, angle: float, width: float, height: float
) -> npt.NDArray[np.float64]:
    """(3, 3) image px -> scaled px: scale by ``factor``, mirror in x, rotate ``angle`` deg about the centre
    of the scaled image (``width`` x ``height``, continuous)."""
    matrix = np.diag([factor, factor, 1.0])
    if flip:
        matrix = np.array([[-1.0, 0.0, width], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]) @ matrix
    if angle:
        rot = np.vstack([cv2.getRotationMatrix2D((width / 2.0, height / 2.0), angle, 1.0), [0.0, 0.0, 1.0]])
        matrix = rot @ matrix
    return matrix


def _box(
    points: npt.NDArray[np.float32], matrix: npt.NDArray[np.float64]
) -> tuple[float, float, float, float]:
    """Axis-aligned (x0, y0, x1, y1) of ``points`` after ``matrix``."""
    pts = apply_matrix(points, matrix)
    return float(pts[:, 0].min()), float(pts[:, 1].min()), float(pts[:, 0].max()), float(pts[:, 1].max())


def _text_box(
    polygons: Sequence[Polygon],
    groups: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]],
    ignore: Sequence[bool],
    matrix: npt.NDArray[np.float64],
    rng: np.random.Generator,
) -> tuple[float, float, float, float] | None:
    """Box of one random usable (finite, non-ignored) polygon of ``groups`` (``_group_polygons``) after
    ``matrix``; None when there is none."""
    usable = ~np.asarray(ignore, dtype=bool).reshape(-1)
    for rows, stacked in groups:
        usable[rows] &= np.isfinite(stacked).all(axis=(1, 2)) & (stacked.shape[1] > 0)
    candidates = np.flatnonzero(usable)
    if not len(candidates):
        return None
    return _box(np.asarray(polygons[candidates[int(rng.integers(len(candidates)))]], np.float32), matrix)


def _axis_origin(
    img_lo: float, img_hi: float, crop: int, text: tuple[float, float] | None, rng: np.random.Generator
) -> float:
    """Start of the crop window along one axis: inside the image (or the image inside it), around ``text``."""
    lo, hi = (img_lo, img_hi - crop) if img_hi - img_lo >= crop else (img_hi - crop, img_lo)
    if text is not None:
        t_lo, t_hi = text
        a, b = (t_hi - crop, t_lo) if t_hi - t_lo <= crop else (t_lo, t_hi - crop)
        if max(lo, a) <= min(hi, b):
            lo, hi = max(lo, a), min(hi, b)
    return float(rng.uniform(lo, hi))
