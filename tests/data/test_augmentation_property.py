"""Every random draw of the train augmentation builds a sample: any legal crop size, any image shape."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ocr.data.photometric import PhotometricParams
from ocr.data.transforms import SourceImage, TrainTransform
from ocr.data.warp import render_crop, source_region
from tests.helpers.receipt_fixtures import MEAN, NO_AUGMENTATION, PHOTOMETRIC_KEYS, STD, train_transform

DRAWS = 5000
CROP_RANGE = (16, 1024)
SHAPES = ((8, 8), (8000, 100), (100, 8000), (8, 3000), (13, 7), (1414, 2000))  # (width, height) originals


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def _polygons(rng: np.random.Generator, width: int, height: int) -> tuple[list[np.ndarray], list[bool]]:
    """Quads anywhere around the image (inside, on its border, outside, degenerate), some ignored."""
    count = int(rng.integers(0, 6))
    polygons = []
    for _ in range(count):
        kind = rng.integers(4)
        if kind == 0:  # on the border: one side on the image's edge
            x0, y0 = rng.choice([0.0, width * 0.999]), rng.uniform(0, height)
        elif kind == 1:  # degenerate: a point
            x0, y0 = rng.uniform(0, width), rng.uniform(0, height)
            polygons.append(np.full((4, 2), (x0, y0), np.float32))
            continue
        else:  # inside or partly outside
            x0, y0 = rng.uniform(-0.2, 1.2) * width, rng.uniform(-0.2, 1.2) * height
        w, h = _log_uniform(rng, 0.5, width), _log_uniform(rng, 0.5, height)
        polygons.append(np.array([[x0, y0], [x0 + w, y0], [x0 + w, y0 + h], [x0, y0 + h]], np.float32))
    return polygons, [bool(rng.random() < 0.2) for _ in polygons]


def _draw_transform(rng: np.random.Generator, photometric: PhotometricParams) -> TrainTransform:
    crop = round(_log_uniform(rng, *CROP_RANGE))
    scale_hi = rng.uniform(1.0, 3.0)
    # The legal train long sides: the largest scaled image at least as long as the crop.
    long_side = int(np.ceil(crop / scale_hi)) + int(rng.integers(0, 512))
    rotate = rng.random() < 0.5
    return TrainTransform(
        crop_size=crop,
        train_long_side=long_side,
        scale_range=(rng.uniform(0.25, 1.0), scale_hi),
        rotate_limit=180.0 if rotate else 10.0,  # full rotation on half of the draws
        p_rotate=float(rng.random()),
        p_flip=0.5,
        p_text_crop=float(rng.random()),
        photometric=photometric,
        mean=MEAN,
        std=STD,
        fill=0,
    )


def _source(rng: np.random.Generator, transform: TrainTransform) -> SourceImage:
    """An original of one of ``SHAPES`` or a random shape, decoded at the size the transform needs."""
    if rng.random() < 0.5:
        width, height = SHAPES[int(rng.integers(len(SHAPES)))]
    else:
        width, height = (round(_log_uniform(rng, 8, 8000)) for _ in range(2))
    scale = min(1.0, transform.source_long_side / max(width, height))
    image = np.full((max(1, round(height * scale)), max(1, round(width * scale)), 3), 200, np.uint8)
    return SourceImage(image, scale, width, height)


def test_every_draw_builds_a_crop_over_crop_sizes_image_shapes_and_polygons() -> None:
    rng = np.random.default_rng(0)
    # The photometric draw moves no pixel: one shared, switched off (building one per draw is the cost).
    photometric = PhotometricParams(**{key: NO_AUGMENTATION.get(key, 0.0) for key in PHOTOMETRIC_KEYS})
    started = time.perf_counter()
    crops = []
    for draw in range(DRAWS):
        transform = _draw_transform(rng, photometric)
        source = _source(rng, transform)
        polygons, ignore = _polygons(rng, source.orig_width, source.orig_height)
        region, result = transform.crop_region(source, polygons, ignore)
        assert region.size > 0, (draw, source.image.shape, transform.crop_size)
        assert result.warp is not None
        # Warping the large crops is what costs; one in ten of those is enough to show they build.
        if transform.crop_size <= 128 or draw % 10 == 0:
            crop = render_crop(region, result.warp)
            assert crop.shape == (transform.crop_size, transform.crop_size, 3)
        assert len(result.polygons) == len(polygons)
        crops.append(transform.crop_size)
    assert min(crops) < 24 and max(crops) > 700  # the range was covered
    print(f"{DRAWS} draws in {time.perf_counter() - started:.1f} s")


def test_a_window_beside_the_rotated_image_reads_edge_pixels_and_renders_fill() -> None:
    """sroie-compact's crash (crop 64, seed 1, index 110): the window lay in a corner of the rotated image's
    box, below the image; the region was empty and warpAffine asserted."""
    image = np.full((2000, 1414, 3), 255, np.uint8)
    window = (241.36, 2034.87, 290.84, 2084.35)
    region, pool, _ = source_region(image, window, 1.0, 1.439)
    assert region.shape[0] >= 1 and region.shape[1] >= 1 and pool == 1
    for window in ((-90.0, -90.0, -10.0, -10.0), (1500.0, 10.0, 1600.0, 90.0)):  # above left, right
        region, pool, _ = source_region(image, window, 0.5, 0.5)
        assert region.size > 0 and pool >= 1


@pytest.mark.parametrize("crop_size", [16, 32, 64])
def test_tiny_crops_of_a_rotated_receipt_all_build(crop_size: int) -> None:
    transform = train_transform(crop_size, train_long_side=128, rotate_limit=180.0, p_rotate=1.0)
    transform.set_random_seed(1)
    source = SourceImage(np.full((128, 90, 3), 255, np.uint8), 128 / 2000, 1414, 2000)
    box = np.array([[0, 0], [1414, 0], [1414, 40], [0, 40]], np.float32)  # along the top border
    for _ in range(300):
        crop = transform(source, [box], [False])
        assert tuple(crop.image.shape) == (3, crop_size, crop_size)
