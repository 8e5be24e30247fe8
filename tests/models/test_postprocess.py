from __future__ import annotations

import re

import cv2
import numpy as np
import pytest
import torch
from shapely.geometry import Polygon as ShapelyPolygon
from shapely.geometry import box as shapely_box

from ocr.models.postprocess import (
    DBPostProcessor,
    boxes_from_bitmap,
    min_area_box,
    score_polygon,
    unclip_polygon,
)
from ocr.types import Geometry

SIZE = 128
# input px -> original px: scale 2, then offset (10, 5)
SCALED = Geometry(np.array([[2.0, 0, 10], [0, 2.0, 5], [0, 0, 1]]), 300, 270, SIZE, SIZE)
IDENTITY = Geometry(np.eye(3), SIZE, SIZE, SIZE, SIZE)


def make_processor(**overrides):
    args = {
        "thresh": 0.3,
        "box_thresh": 0.5,
        "unclip_ratio": 1.5,
        "max_candidates": 1000,
        "min_size": 3,
        "output": "box",
    }
    args.update(overrides)
    return DBPostProcessor(**args)


def prob_with(rects, size=SIZE):
    """rects: (x0, y0, x1, y1, value) inclusive pixel ranges, as cv2.fillPoly draws the targets."""
    prob = np.zeros((size, size), np.float32)
    for x0, y0, x1, y1, value in rects:
        prob[y0 : y1 + 1, x0 : x1 + 1] = value
    return torch.from_numpy(prob)[None, None]


def expected_box_orig(x0, y0, x1, y1, ratio, geometry=SCALED):
    w, h = x1 - x0, y1 - y0
    d = w * h * ratio / (2 * (w + h))
    corners = np.array([[x0 - d, y0 - d], [x1 + d, y0 - d], [x1 + d, y1 + d], [x0 - d, y1 + d]])
    homo = np.c_[corners, np.ones(4)] @ geometry.matrix.T
    return homo[:, :2]


RECTS = [(10, 20, 49, 29, 0.9), (60, 70, 99, 89, 0.8)]


@pytest.mark.parametrize("ratio", [0.0, 1.5])
def test_box_mode_recovers_rectangles_in_original_px(ratio):
    [(polygons, scores)] = make_processor(unclip_ratio=ratio)(prob_with(RECTS), [SCALED])
    assert len(polygons) == 2
    # largest area first
    for polygon, score, (x0, y0, x1, y1, value) in zip(polygons, scores, RECTS[::-1], strict=True):
        assert polygon.dtype == np.float32 and polygon.shape == (4, 2)
        np.testing.assert_allclose(polygon, expected_box_orig(x0, y0, x1, y1, ratio), atol=0.05)
        assert score == pytest.approx(value, abs=1e-6)


def test_polygon_mode_matches_unclipped_rectangle():
    [(polygons, scores)] = make_processor(output="polygon")(prob_with(RECTS), [SCALED])
    assert len(polygons) == 2
    for polygon, (x0, y0, x1, y1, _) in zip(polygons, RECTS[::-1], strict=True):
        expected = expected_box_orig(x0, y0, x1, y1, 1.5)
        np.testing.assert_allclose(polygon.min(axis=0), expected.min(axis=0), atol=0.05)
        np.testing.assert_allclose(polygon.max(axis=0), expected.max(axis=0), atol=0.05)
        target = shapely_box(*expected.min(axis=0), *expected.max(axis=0))
        got = ShapelyPolygon(polygon)
        assert got.is_valid and got.intersection(target).area / got.union(target).area > 0.95
    assert scores == pytest.approx([0.8, 0.9])


def test_low_score_regions_are_dropped():
    [(polygons, scores)] = make_processor(box_thresh=0.5)(prob_with([(10, 10, 40, 30, 0.4)]), [SCALED])
    assert polygons == [] and scores == []
    [(polygons, _)] = make_processor(box_thresh=0.35)(prob_with([(10, 10, 40, 30, 0.4)]), [SCALED])
    assert len(polygons) == 1


def test_min_size_drops_thin_regions():
    thin = prob_with([(10, 10, 60, 11, 0.9)])  # contour short side 1 px
    assert make_processor(min_size=3)(thin, [SCALED])[0][0] == []
    assert len(make_processor(min_size=1)(thin, [SCALED])[0][0]) == 1


def test_low_scoring_regions_thinner_than_the_lines_are_dropped():
    lines = [(10, 10 + 20 * i, 70, 19 + 20 * i, 0.9) for i in range(3)]  # 10 px high
    specks = [(10, 100, 40, 103, 0.55), (60, 100, 90, 103, 0.7)]  # 4 px high: the second scores high
    low_line = (80, 10, 120, 19, 0.55)  # as thick as the lines: kept although it scores low
    prob = prob_with([*lines, *specks, low_line])
    [(polygons, scores)] = make_processor(small_box_thresh=0.6, small_side=0.6)(prob, [IDENTITY])
    assert sorted(round(s, 2) for s in scores) == [0.55, 0.7, 0.9, 0.9, 0.9]
    assert not any(p[:, 1].min() > 90 and s < 0.6 for p, s in zip(polygons, scores, strict=True))
    assert len(make_processor()(prob, [IDENTITY])[0][0]) == 6  # off by default


def test_regions_scoring_far_under_the_images_median_are_dropped():
    lines = [(10, 10 + 20 * i, 70, 19 + 20 * i, 0.9) for i in range(4)]  # median score 0.9
    stray = (80, 10, 120, 19, 0.6)  # over box_thresh, under 0.75 x 0.9
    near = (80, 50, 120, 59, 0.7)  # over 0.675: kept
    prob = prob_with([*lines, stray, near])
    [(_, scores)] = make_processor(relative_box_thresh=0.75)(prob, [IDENTITY])
    assert sorted(round(s, 2) for s in scores) == [0.7, 0.9, 0.9, 0.9, 0.9]
    assert len(make_processor()(prob, [IDENTITY])[0][0]) == 6  # off by default
    # The floor follows the image: the same stray beside lines scoring 0.7 (a photo) is kept.
    dim = prob_with([(10, 10 + 20 * i, 70, 19 + 20 * i, 0.7) for i in range(4)] + [stray])
    assert len(make_processor(relative_box_thresh=0.75)(dim, [IDENTITY])[0][0]) == 5


def test_max_candidates_keeps_the_largest():
    rects = [(4 + 24 * i, 10, 4 + 24 * i + 10 + 2 * i, 30, 0.9) for i in range(5)]
    [(polygons, _)] = make_processor(max_candidates=2, unclip_ratio=0.0)(prob_with(rects), [IDENTITY])
    assert len(polygons) == 2
    widths = sorted(float(np.ptp(p[:, 0])) for p in polygons)
    assert widths == pytest.approx([16.0, 18.0])


def test_empty_map_gives_empty_lists():
    results = make_processor()(torch.zeros(2, 1, SIZE, SIZE), [SCALED, IDENTITY])
    assert results == [([], []), ([], [])]


def test_polygons_are_clipped_to_the_original_image():
    [(polygons, _)] = make_processor()(
        prob_with([(0, 0, 30, 20, 0.9), (100, 110, 127, 127, 0.9)]), [IDENTITY]
    )
    assert len(polygons) == 2
    stacked = np.concatenate(polygons)
    assert stacked.min() == 0.0 and stacked.max() == SIZE


def test_each_image_uses_its_own_geometry():
    prob = torch.cat([prob_with(RECTS[:1]), prob_with(RECTS[:1])])
    (first, _), (second, _) = make_processor(unclip_ratio=0.0)(prob, [SCALED, IDENTITY])
    np.testing.assert_allclose(first[0], expected_box_orig(10, 20, 49, 29, 0.0), atol=0.05)
    np.testing.assert_allclose(second[0], [[10, 20], [49, 20], [49, 29], [10, 29]], atol=0.05)


def test_invalid_arguments():
    with pytest.raises(
        ValueError, match=r"postprocess.output: expected one of \('polygon', 'box'\), got 'poly'"
    ):
        make_processor(output="poly")
    with pytest.raises(ValueError, match=r"prob_map: expected \(B, 1, H, W\), got \(128, 128\)"):
        make_processor()(torch.zeros(SIZE, SIZE), [SCALED])
    with pytest.raises(ValueError, match="geometry: expected 2 records"):
        make_processor()(torch.zeros(2, 1, SIZE, SIZE), [SCALED])


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("unclip_ratio", -1.0, ">= 0.0"),  # accepted before: hmean 0.54 -> 0.13 on real receipts
        ("box_thresh", 1.5, "a value in [0.0, 1.0]"),
        ("thresh", -0.1, "a value in [0.0, 1.0]"),
        ("max_candidates", 0, ">= 1"),
        ("min_size", -1, ">= 0.0"),
        ("extend_ends", -0.2, ">= 0.0"),
        ("relative_box_thresh", 1.5, "a value in [0.0, 1.0]"),
        ("small_box_thresh", 1.2, "a value in [0.0, 1.0]"),
        ("small_side", -0.5, "a value in [0.0, 1.0]"),
    ],
)
def test_every_value_out_of_its_range_is_named(key, value, expected):
    message = rf"^postprocess\.{key}: expected {re.escape(expected)}, got {value}$"
    with pytest.raises(ValueError, match=message):
        make_processor(**{key: value})


def test_extend_ends_lengthens_the_long_side_only():
    prob = prob_with([(30, 20, 69, 29, 0.9), (60, 70, 99, 89, 0.8)])[0, 0].numpy()
    args = {"box_thresh": 0.5, "unclip_ratio": 1.5, "max_candidates": 10, "min_size": 3, "output": "box"}
    plain, _ = boxes_from_bitmap(prob, prob > 0.3, **args)
    extended, _ = boxes_from_bitmap(prob, prob > 0.3, extend_ends=0.25, **args)
    assert len(plain) == 2
    for before, after in zip(plain, extended, strict=True):
        (cx, cy), (w, h), _ = cv2.minAreaRect(before)
        long_side, short_side = max(w, h), min(w, h)
        (cx2, cy2), (w2, h2), _ = cv2.minAreaRect(after)
        assert (cx2, cy2) == pytest.approx((cx, cy), abs=1e-3)
        assert max(w2, h2) == pytest.approx(long_side + 0.5 * short_side, abs=1e-3)
        assert min(w2, h2) == pytest.approx(short_side, abs=1e-3)
        np.testing.assert_array_equal(np.argsort(after.sum(axis=1))[0], 0)  # still from the top-left


def test_min_area_box_extends_the_ends_of_a_tilted_box():
    tilted = cv2.boxPoints(((50.0, 40.0), (40.0, 10.0), 30.0)).astype(np.float32)
    box, short_side = min_area_box(tilted)
    longer, longer_short_side = min_area_box(tilted, extend_ends=0.5)
    (_, _), (w, h), angle = cv2.minAreaRect(longer)
    assert sorted((w, h)) == pytest.approx([10.0, 50.0], abs=1e-3)
    assert short_side == longer_short_side == pytest.approx(10.0, abs=1e-3)
    assert ShapelyPolygon(longer).buffer(1e-3).contains(ShapelyPolygon(box))
    assert int(np.argmin(longer.sum(axis=1))) == 0  # still from the top-left


def test_extend_ends_is_refused_for_polygon_output():
    with pytest.raises(ValueError, match=r"postprocess.extend_ends: applies to output=box only, got 0.2"):
        make_processor(output="polygon", extend_ends=0.2)


def test_unclip_polygon_offsets_by_area_ratio_over_perimeter():
    square = np.array([[0, 0], [10, 0], [10, 10], [0, 10]], np.float32)
    expanded = unclip_polygon(square, 1.5)  # D = 100 * 1.5 / 40 = 3.75
    np.testing.assert_allclose(expanded.min(axis=0), [-3.75, -3.75], atol=1e-3)
    np.testing.assert_allclose(expanded.max(axis=0), [13.75, 13.75], atol=1e-3)
    assert unclip_polygon(np.array([[0, 0], [10, 0], [20, 0]], np.float32), 1.5) is None


def test_score_polygon_is_mean_inside():
    prob = np.zeros((20, 20), np.float32)
    prob[:, :10] = 1.0
    square = np.array([[5, 5], [14, 5], [14, 14], [5, 14]], np.float32)
    assert score_polygon(prob, square) == pytest.approx(0.5)


def test_min_area_box_orders_corners_clockwise_from_top_left():
    diamond = np.array([[0, 5], [5, 0], [10, 5], [5, 10]], np.float32)
    corners, short_side = min_area_box(diamond)
    assert short_side == pytest.approx(np.sqrt(50), rel=1e-4)
    assert ShapelyPolygon(corners).exterior.is_ccw is True  # clockwise on screen with y pointing down
    assert len({tuple(np.round(c, 3)) for c in corners}) == 4


def test_boxes_from_bitmap_in_input_px():
    prob = prob_with(RECTS)[0, 0].numpy()
    polygons, scores = boxes_from_bitmap(
        prob, prob > 0.3, box_thresh=0.5, unclip_ratio=0.0, max_candidates=10, min_size=3, output="box"
    )
    np.testing.assert_allclose(polygons[1], [[10, 20], [49, 20], [49, 29], [10, 29]], atol=0.05)
    assert scores == pytest.approx([0.8, 0.9])


def test_region_with_a_hole_gives_one_detection():
    prob = prob_with([(10, 10, 60, 40, 0.9)])
    prob[..., 20:30, 30:40] = 0.0
    [(polygons, _)] = make_processor(unclip_ratio=0.0)(prob, [IDENTITY])
    assert len(polygons) == 1
    np.testing.assert_allclose(polygons[0], [[10, 10], [60, 10], [60, 40], [10, 40]], atol=0.05)
