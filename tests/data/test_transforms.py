"""Transforms: exact geometry, polygon points preserved, pixels and polygons move together."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from ocr.data.transforms import EvalTransform, SourceImage, TrainTransform
from ocr.geometry import to_input, to_original
from tests.helpers.receipt_fixtures import MEAN, NO_AUGMENTATION, STD, train_transform

RED = np.array([255, 0, 0])


def _train(
    crop_size: int = 96, p_flip: float = 0.5, p_color: float = 0.0, p_blur: float = 0.0, p_noise: float = 0.0
) -> TrainTransform:
    transform = train_transform(
        crop_size,
        train_long_side=128,
        p_rotate=1.0,
        p_flip=p_flip,
        p_text_crop=1.0,
        p_color=p_color,
        p_blur=p_blur,
        p_noise=p_noise,
    )
    transform.set_random_seed(0)
    return transform


def _red_block_image(width: int = 150, height: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """White image with a red block; returns it and the block's polygon in px."""
    image = np.full((height, width, 3), 255, np.uint8)
    image[50:80, 30:110] = RED
    return image, np.array([[30, 50], [110, 50], [110, 80], [30, 80]], np.float32)


def _colour_at(image: np.ndarray, point: np.ndarray) -> np.ndarray:
    return image[int(point[1]), int(point[0])].astype(int)


def _inner_points(polygon: np.ndarray) -> np.ndarray:
    """Points well inside a quadrilateral (between its centre and each corner)."""
    centre = polygon.mean(axis=0)
    return np.vstack([centre, centre + 0.6 * (polygon - centre)])


def test_eval_letterbox_geometry_is_exact_and_pads_bottom_right() -> None:
    image, polygon = _red_block_image()
    result = EvalTransform(long_side=100, mean=MEAN, std=STD, fill=7, pad_multiple=None)(
        SourceImage(image, 1.0, 150, 200), [polygon], [False]
    )
    assert tuple(result.image.shape) == (3, 100, 100)
    np.testing.assert_allclose(result.polygons[0], polygon * 0.5, atol=1e-5)
    np.testing.assert_allclose(to_original(result.polygons, result.geometry)[0], polygon, atol=1e-4)
    pixels = result.image.permute(1, 2, 0).numpy()
    assert (pixels[:, 76:] == 7).all() and (pixels[:, :74] != 7).any()  # 150 * 0.5 = 75 columns of image
    for point in _inner_points(result.polygons[0]):
        np.testing.assert_array_equal(_colour_at(pixels, point), RED)
    assert (result.geometry.orig_width, result.geometry.orig_height) == (150, 200)


def test_eval_from_reduced_source_maps_to_full_resolution() -> None:
    """A source decoded at 1/2 scale still maps input px to full-resolution original px."""
    image, polygon = _red_block_image()
    half = image[::2, ::2].copy()
    result = EvalTransform(long_side=64, mean=MEAN, std=STD, fill=0, pad_multiple=None)(
        SourceImage(half, 0.5, 150, 200), [polygon], [False]
    )
    np.testing.assert_allclose(to_original(result.polygons, result.geometry)[0], polygon, atol=1e-3)
    np.testing.assert_allclose(result.geometry.matrix[0, 0], 200 / 64)
    pixels = result.image.permute(1, 2, 0).numpy()
    np.testing.assert_array_equal(_colour_at(pixels, result.polygons[0].mean(axis=0)), RED)


@pytest.mark.parametrize("seed", range(12))
def test_train_pixels_follow_polygons(seed: int) -> None:
    image, polygon = _red_block_image()
    transform = _train()
    transform.set_random_seed(seed)
    result = transform(SourceImage(image, 1.0, 150, 200), [polygon], [False])
    assert tuple(result.image.shape) == (3, 96, 96)
    polygon_px = result.polygons[0]
    assert polygon_px.shape == (4, 2)
    np.testing.assert_allclose(to_original(result.polygons, result.geometry)[0], polygon, atol=1e-3)
    np.testing.assert_allclose(to_input([polygon], result.geometry)[0], polygon_px, atol=1e-3)
    pixels = result.image.permute(1, 2, 0).numpy()
    inside = [p for p in _inner_points(polygon_px) if (0 <= p).all() and (p < 96).all()]
    assert inside, "the text-keeping crop must keep the only polygon in view"
    for point in inside:
        assert np.abs(_colour_at(pixels, point) - RED).max() <= 40


def test_train_boundary_within_one_pixel() -> None:
    """Just inside vs just outside the block edge (1.5 px either way) after scale/rotate/crop."""
    image, polygon = _red_block_image()
    transform = _train(crop_size=128, p_flip=0.0)
    hits = 0
    for seed in range(8):
        transform.set_random_seed(seed)
        result = transform(SourceImage(image, 1.0, 150, 200), [polygon], [False])
        pixels = result.image.permute(1, 2, 0).numpy().astype(int)
        scale = float(np.linalg.norm(np.linalg.inv(result.geometry.matrix)[:2, 0]))
        if scale < 1.0:
            continue
        # mid-points of the top and left edges, nudged 1.5 input px inwards / outwards along the normal
        for mid_orig, normal in (((70.0, 50.0), (0.0, -1.0)), ((30.0, 65.0), (-1.0, 0.0))):
            mid = to_input([np.array([mid_orig], np.float32)], result.geometry)[0][0]
            outward = (
                to_input([np.array([mid_orig], np.float32) + np.array(normal, np.float32)], result.geometry)[
                    0
                ][0]
                - mid
            )
            outward /= np.linalg.norm(outward)
            inner, outer = mid - 1.5 * outward, mid + 1.5 * outward
            if not (
                (0 <= outer).all() and (outer < 127).all() and (0 <= inner).all() and (inner < 127).all()
            ):
                continue
            assert _colour_at(pixels, inner)[1] < 60, "red expected just inside the edge"
            assert _colour_at(pixels, outer)[1] > 195, "white expected just outside the edge"
            hits += 1
    assert hits >= 4


def test_train_keeps_every_point_of_every_polygon() -> None:
    """No point is dropped or re-ordered, even far outside the crop, degenerate or non-finite."""
    image, polygon = _red_block_image()
    polygons = [
        polygon,
        np.array([[-500, -500], [900, -400], [800, 900], [0, 700], [-100, 50]], np.float32),
        np.array([[5, 5], [5, 5]], np.float32),
        np.array([[1, 2], [np.nan, 3], [4, 5]], np.float32),
    ]
    transform = _train(p_color=1.0, p_blur=1.0, p_noise=1.0)
    for _ in range(5):
        result = transform(SourceImage(image, 1.0, 150, 200), polygons, [False, True, False, False])
        assert [len(p) for p in result.polygons] == [len(p) for p in polygons]
        back = to_original(result.polygons, result.geometry)
        for original, mapped in zip(polygons[:3], back[:3], strict=True):
            np.testing.assert_allclose(mapped, original, atol=1e-2)


def test_train_without_polygons_and_tiny_image() -> None:
    image = np.full((20, 12, 3), 200, np.uint8)
    result = _train()(SourceImage(image, 1.0, 12, 20), [], [])
    assert tuple(result.image.shape) == (3, 96, 96) and result.polygons == []
    assert result.image.dtype == torch.uint8


def test_train_seeding_is_reproducible() -> None:
    image, polygon = _red_block_image()
    first, second = _train(p_color=1.0, p_noise=1.0), _train(p_color=1.0, p_noise=1.0)
    a = first(SourceImage(image, 1.0, 150, 200), [polygon], [False])
    b = second(SourceImage(image, 1.0, 150, 200), [polygon], [False])
    np.testing.assert_array_equal(a.image.numpy(), b.image.numpy())
    np.testing.assert_array_equal(a.geometry.matrix, b.geometry.matrix)


def test_invalid_config_is_rejected() -> None:
    with pytest.raises(ValueError, match="scale_range"):
        train_transform(64, **NO_AUGMENTATION, train_long_side=64, scale_range=(3.0, 0.5), p_text_crop=0.0)


@pytest.mark.parametrize("seed", range(4))
def test_train_upscaled_edge_is_subpixel_exact(seed: int) -> None:
    """With a 3x upscale the red/white 50 % crossing sits on the mapped edge within 0.25 px."""
    image, polygon = _red_block_image()
    transform = train_transform(
        128, **NO_AUGMENTATION, train_long_side=200, scale_range=(3.0, 3.0), p_text_crop=1.0, fill=255
    )
    transform.set_random_seed(seed)
    result = transform(SourceImage(image, 1.0, 150, 200), [polygon], [False])
    green = result.image[1].numpy() / 255.0  # red block: 0, white: 1
    x0, y0 = result.polygons[0][0]
    edges = [(float(y0), green[:, int(result.polygons[0][:, 0].mean())])]  # top edge along a column
    edges.append((float(x0), green[int(result.polygons[0][:, 1].mean()), :]))  # left edge along a row
    checked = 0
    for edge, profile in edges:
        lo = int(np.floor(edge - 0.5))
        if lo < 0 or lo + 1 >= len(profile):
            continue
        # pixel centres at i + 0.5; linear interpolation of the 0.5 crossing between lo and lo + 1
        a, b = profile[lo], profile[lo + 1]
        crossing = lo + 0.5 + (a - 0.5) / (a - b)
        assert abs(crossing - edge) < 0.25
        checked += 1
    assert checked


def test_eval_upscaled_edge_is_subpixel_exact() -> None:
    image, polygon = _red_block_image()
    result = EvalTransform(long_side=500, mean=MEAN, std=STD, fill=255, pad_multiple=None)(
        SourceImage(image, 1.0, 150, 200), [polygon], [False]
    )
    column = result.image[1].numpy()[:, int(result.polygons[0][:, 0].mean())] / 255.0
    edge = float(result.polygons[0][0, 1])  # 50 * 2.5 = 125
    lo = int(np.floor(edge - 0.5))
    crossing = lo + 0.5 + (column[lo] - 0.5) / (column[lo] - column[lo + 1])
    assert abs(crossing - edge) < 0.25


def test_downscaling_only_the_cropped_region_matches_resizing_the_whole_image() -> None:
    """The crop's region is area-averaged alone, by an integer factor, and the warp does the rest; the
    former path (fractional INTER_AREA of the whole image, then the warp, rebuilt from the same geometry)
    gives the same pixels up to the resampling filter, which shows only on a sharp edge."""
    rng = np.random.default_rng(0)
    image = cv2.GaussianBlur(rng.integers(0, 256, (900, 700, 3), dtype=np.uint8), (0, 0), 3.0)
    image[200:260, 100:600] = (20, 30, 200)  # a sharp edge
    transform = train_transform(
        128, **{**NO_AUGMENTATION, "rotate_limit": 10.0, "p_rotate": 0.5, "p_flip": 0.5}, train_long_side=300
    )
    transform.set_random_seed(0)
    source, block = (
        SourceImage(image, 1.0, 700, 900),
        np.array([[100, 200], [600, 200], [600, 260], [100, 260]]),
    )
    checked = 0
    for _ in range(40):
        result = transform(source, [block.astype(np.float32)], [False])
        orig_to_input = np.linalg.inv(result.geometry.matrix)
        scale = float(np.sqrt(abs(np.linalg.det(orig_to_input[:2, :2]))))
        if scale >= 1.0:
            continue
        shift = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]])
        matrix = np.linalg.inv(shift) @ orig_to_input @ np.diag([1 / scale, 1 / scale, 1.0]) @ shift
        resized = cv2.resize(image, (0, 0), fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        former = cv2.warpAffine(
            resized, matrix[:2], (128, 128), flags=cv2.INTER_LINEAR, borderValue=(0, 0, 0)
        )
        got = result.image.permute(1, 2, 0).numpy().astype(int)
        assert np.abs(got - former).mean() < 1.0
        assert np.abs(got.mean((0, 1)) - former.mean((0, 1))).max() < 0.5  # same brightness per channel
        assert np.percentile(np.abs(got - former), 99) <= 32  # only the sharp edge differs this much
        checked += 1
    assert checked >= 10


def test_the_short_side_rule_follows_the_image_and_caps_the_long_side() -> None:
    """resize=short: a 3000 x 4000 photo is scaled to 736 x 981 and computed at 768 x 992 (rounded up to
    32 after the one-pixel margin of a reduced decode); a long receipt 400 x 2000 would need a 3680 px long
    side: it is capped at long_side."""
    transform = EvalTransform(
        long_side=1280, mean=MEAN, std=STD, fill=0, pad_multiple=32, resize="short", short_side=736
    )
    assert transform.image_long_side(3000, 4000) == 981
    assert transform.input_size(3000, 4000) == (992, 768)  # (height, width)
    assert transform.image_long_side(400, 2000) == 1280
    assert transform.input_size(400, 2000) == (1280, 288)  # 256 + the margin, rounded up
    source = SourceImage(np.zeros((400, 300, 3), np.uint8), 1.0, 300, 400)
    polygon = np.array([[30, 40], [90, 40], [90, 60], [30, 60]], np.float32)
    result = EvalTransform(
        long_side=2000, mean=MEAN, std=STD, fill=0, pad_multiple=32, resize="short", short_side=600
    )(source, [polygon], [False])
    assert tuple(result.image.shape) == (3, 800, 608)  # 300 x 400 scaled x2 (upscaled), padded to 32
    assert np.allclose(result.polygons[0], polygon * 2.0)
    assert np.allclose(to_original(result.polygons, result.geometry)[0], polygon)
    with pytest.raises(ValueError, match="short_side: expected a positive int with resize=short"):
        EvalTransform(long_side=64, mean=MEAN, std=STD, fill=0, pad_multiple=32, resize="short")
    with pytest.raises(ValueError, match="resize: expected one of"):
        EvalTransform(long_side=64, mean=MEAN, std=STD, fill=0, pad_multiple=32, resize="min")
