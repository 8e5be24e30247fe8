from __future__ import annotations

import cv2
import numpy as np
import pytest
from shapely.geometry import Polygon as ShapelyPolygon

from ocr.data.targets.geometry import (
    AXIS_RECT,
    GENERAL,
    ROTATED_RECT,
    clip_to_box,
    fill_polygons,
    measure_polygons,
    offset_polygon,
    shrink_convex,
)
from tests.helpers.db_reference import rotated_box


def _random_convex(rng: np.random.Generator, k: int) -> np.ndarray:
    """Convex polygon: k sorted angles on a random ellipse, so every turn has the same sign."""
    angles = np.sort(rng.uniform(0, 2 * np.pi, k))
    rx, ry = rng.uniform(8, 80), rng.uniform(8, 40)
    return np.stack([300 + rx * np.cos(angles), 200 + ry * np.sin(angles)], axis=1)


def test_measurements_match_shapely_and_opencv() -> None:
    rng = np.random.default_rng(0)
    polygons = [
        rotated_box(*rng.uniform(50, 400, 2), *rng.uniform(5, 120, 2), rng.uniform(-90, 90))
        for _ in range(40)
    ]
    polygons += [_random_convex(rng, int(rng.integers(3, 10))) for _ in range(20)]
    polygons += [
        rng.uniform(0, 100, (int(rng.integers(5, 9)), 2)) for _ in range(10)
    ]  # self-intersecting too
    measures = measure_polygons(polygons)
    np.testing.assert_array_equal(np.sort(measures.index), np.arange(len(polygons)))
    for row, i in enumerate(measures.index.tolist()):
        pts = polygons[i]
        np.testing.assert_array_equal(measures.points(row), pts)
        shape = ShapelyPolygon(pts)
        assert measures.area[row] == pytest.approx(abs(shape.area), rel=1e-6, abs=1e-6)
        assert measures.perimeter[row] == pytest.approx(shape.length, rel=1e-9)
        _, (w, h), _ = cv2.minAreaRect(np.asarray(pts, np.float32))
        assert measures.short_side[row] == pytest.approx(min(w, h), rel=1e-3, abs=1e-3)
        assert (measures.kind[row] != GENERAL) == (i < 40)


def test_rectangle_kinds_and_frames() -> None:
    axis_aligned = np.array([[10, 20], [50, 20], [50, 30], [10, 30]], np.float32)
    rotated = rotated_box(100, 100, 60, 12, 30)
    skewed = np.array([[10, 20], [50, 20], [55, 30], [10, 30]], np.float32)
    measures = measure_polygons([axis_aligned, rotated, skewed])
    assert measures.kind.tolist() == [AXIS_RECT, ROTATED_RECT, GENERAL]
    np.testing.assert_allclose(measures.center[0], [30, 25])
    np.testing.assert_allclose(measures.half[0], [20, 5])
    np.testing.assert_allclose(measures.center[1], [100, 100], atol=1e-4)
    np.testing.assert_allclose(measures.half[1], [30, 6], atol=1e-4)
    np.testing.assert_allclose(measures.axis[1], [np.cos(np.pi / 6), np.sin(np.pi / 6)], atol=1e-6)


def test_unusable_polygons_are_left_out() -> None:
    polygons = [np.zeros((0, 2)), [[1, 1], [2, 2]], [[0, 0], [np.nan, 1], [1, 1]], [[0, 0], [4, 0], [4, 4]]]
    measures = measure_polygons(polygons)
    assert measures.index.tolist() == [3] and measures.area.tolist() == [8.0]


def test_vectorised_shrink_reproduces_pyclipper_on_rectangles() -> None:
    rng = np.random.default_rng(4)
    boxes = [
        rotated_box(
            *rng.uniform(50, 400, 2),
            rng.uniform(20, 200),
            rng.uniform(8, 30),
            rng.uniform(-15, 15) * (rng.random() < 0.6),
        )
        for _ in range(300)
    ]
    measures = measure_polygons(boxes)
    offsets = measures.area * (1 - 0.4**2) / measures.perimeter
    vertices, ok = shrink_convex(np.stack(boxes).astype(np.float64), offsets)
    same = 0
    for ring, fast, box, offset in zip(vertices, ok, boxes, offsets, strict=True):
        reference = offset_polygon(box, -offset)
        assert fast == (reference is not None)
        if fast:
            assert np.abs(np.sort(ring, axis=0) - np.sort(reference, axis=0)).max() <= 1
            same += {tuple(p) for p in ring.tolist()} == {tuple(p) for p in reference.tolist()}
    assert ok.mean() > 0.95 and same >= ok.sum() - 3


@pytest.mark.parametrize("k", [3, 5, 8])
def test_vectorised_shrink_stays_close_to_pyclipper_on_convex_polygons(k: int) -> None:
    rng = np.random.default_rng(k)
    polygons = np.stack([_random_convex(rng, k) for _ in range(100)])
    measures = measure_polygons(list(polygons))
    offsets = measures.area * (1 - 0.4**2) / measures.perimeter
    vertices, ok = shrink_convex(polygons, offsets)
    assert ok.any()
    for ring, pts, offset in zip(vertices[ok], polygons[ok], offsets[ok], strict=True):
        mask_fast, mask_ref = np.zeros((400, 500), np.uint8), np.zeros((400, 500), np.uint8)
        cv2.fillPoly(mask_fast, [ring], 1)
        cv2.fillPoly(mask_ref, [offset_polygon(pts, -offset)], 1)
        differs = mask_fast != mask_ref
        assert not (differs & (cv2.erode(mask_ref, np.ones((5, 5), np.uint8)) > 0)).any()


def test_shrink_flags_what_it_cannot_do() -> None:
    nonconvex = np.array([[0, 0], [100, 0], [100, 40], [50, 10], [0, 40]], np.float64)
    too_thin = np.array([[0, 0], [100, 0], [100, 2.5], [0, 2.5], [0, 1]], np.float64)
    _, ok = shrink_convex(np.stack([nonconvex, too_thin]), np.array([6.0, 3.0]))
    assert not ok.any()


def test_clip_to_box() -> None:
    square = np.array([[-10, -10], [30, -10], [30, 30], [-10, 30]], np.float64)
    clipped = clip_to_box(square, 0, 0, 20, 20)
    assert ShapelyPolygon(clipped).area == pytest.approx(400)
    inside = np.array([[2, 2], [8, 2], [5, 9]], np.float64)
    np.testing.assert_array_equal(clip_to_box(inside, 0, 0, 20, 20), inside)
    assert len(clip_to_box(inside + 100, 0, 0, 20, 20)) == 0
    triangle = np.array([[-1e9, 0], [1e9, 0], [0, 1e9]], np.float64)
    assert ShapelyPolygon(clip_to_box(triangle, 0, 0, 10, 10)).area == pytest.approx(100)


def test_fill_polygons_fills_overlapping_polygons_completely() -> None:
    """One cv2.fillPoly call fills by parity; overlapping polygons must still all be filled."""
    rng = np.random.default_rng(9)
    rings = [
        np.round(_random_convex(rng, 5) * 0.2 - [10, 0] + rng.uniform(0, 30, 2)).astype(np.int32)
        for _ in range(12)
    ]
    rings.append(np.array([[-9000, 5], [9000, 5], [9000, 20], [-9000, 20]], np.int32))  # far outside: clipped
    boxes = np.array([[*r.min(axis=0), *r.max(axis=0)] for r in rings])
    canvas = np.zeros((90, 120), np.float32)
    fill_polygons(canvas, rings, boxes, np.zeros(len(rings), bool), 1.0)
    expected = np.zeros((90, 120), np.float32)
    for ring in rings:
        cv2.fillPoly(expected, [ring], 1.0)
    overlapping = (boxes[:, None, :2] <= boxes[None, :, 2:]).all(axis=2) & (
        boxes[None, :, :2] <= boxes[:, None, 2:]
    ).all(axis=2)
    assert overlapping.sum() > len(rings) + 4  # the case under test: several pairs overlap
    np.testing.assert_array_equal(canvas, expected)
