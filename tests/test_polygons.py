"""The polygon primitives against shapely and OpenCV, on random and degenerate polygons."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import shapely
from shapely.geometry import Polygon as ShapelyPolygon
from shapely.geometry.polygon import signed_area

from ocr.polygons import (
    convex_min_rect_short_sides,
    cross,
    edge_vectors,
    group_by_point_count,
    is_convex,
    signed_areas,
    turn_crosses,
    winds_once,
)

SQUARE = np.array([[0, 0], [10, 0], [10, 10], [0, 10]], dtype=np.float64)  # clockwise on screen (y down)


def _convex(rng: np.random.Generator, k: int, even: bool = False) -> np.ndarray:
    """Convex k-gon on a random rotated ellipse: sorted random angles, or (``even``) evenly spaced
    angles moved by up to a third of their spacing, on an ellipse 3 to 8 times as wide as high."""
    if even:
        angles = (np.arange(k) + rng.uniform(-1 / 3, 1 / 3, k)) * 2 * np.pi / k
        rx = rng.uniform(30, 80)
        ry = rx / rng.uniform(3, 8)
    else:
        angles = np.sort(rng.uniform(0, 2 * np.pi, k))
        rx, ry = rng.uniform(2, 80), rng.uniform(0.5, 40)
    ellipse = np.stack([rx * np.cos(angles), ry * np.sin(angles)], axis=1)
    turn = rng.uniform(0, np.pi)
    rot = np.array([[np.cos(turn), -np.sin(turn)], [np.sin(turn), np.cos(turn)]])
    return ellipse @ rot.T + rng.uniform(0, 500, 2)


def _strictly_convex_oracle(pts: np.ndarray) -> bool:
    """Simple, with area, and every point a corner of its own convex hull (shapely)."""
    poly = ShapelyPolygon(pts)
    hull = poly.convex_hull
    return (
        poly.is_valid
        and poly.area > 0
        and len(hull.exterior.coords) - 1 == len(pts)
        and poly.area == pytest.approx(hull.area, rel=1e-12)
    )


def test_cross_and_edge_vectors_by_hand() -> None:
    assert cross(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == 1.0
    np.testing.assert_array_equal(cross(np.array([[2.0, 3.0]]), np.array([[4.0, 6.0]])), [0.0])
    np.testing.assert_array_equal(
        edge_vectors(SQUARE[None])[0], [[10, 0], [0, 10], [-10, 0], [0, -10]]
    )  # the last edge closes the polygon


def test_signed_areas_match_shapely_in_both_orientations() -> None:
    rng = np.random.default_rng(0)
    for k in (3, 4, 5, 8):
        pts = rng.uniform(-100, 600, (200, k, 2))  # most of them self-intersecting for k > 3
        expected = np.array([signed_area(ShapelyPolygon(p).exterior) for p in pts])
        np.testing.assert_allclose(signed_areas(pts), expected, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(signed_areas(pts[:, ::-1]), -expected, rtol=1e-12, atol=1e-9)
    assert signed_areas(SQUARE[None])[0] == 100.0  # positive: clockwise on screen


def test_signed_areas_of_degenerate_polygons_are_zero() -> None:
    segment = np.array([[0, 0], [5, 5], [10, 10], [5, 5]], dtype=np.float64)
    point = np.full((4, 2), 3.0)
    np.testing.assert_array_equal(signed_areas(np.stack([segment, point])), [0.0, 0.0])


def test_strict_convexity_matches_shapely_on_random_polygons() -> None:
    rng = np.random.default_rng(1)
    for k in (3, 4, 5, 6, 9):
        # Integer corners: exact cross products, and collinear or repeated points now and then.
        pts = rng.integers(0, 12, (400, k, 2)).astype(np.float64)
        pts = np.concatenate([pts, np.stack([_convex(rng, k) for _ in range(100)])])
        expected = np.array([_strictly_convex_oracle(p) for p in pts])
        assert expected.any() and not expected.all()
        np.testing.assert_array_equal(is_convex(pts, strict=True) & winds_once(pts), expected)
        if k <= 4:  # turning the same way everywhere is enough
            np.testing.assert_array_equal(is_convex(pts, strict=True), expected)


def test_convexity_strict_or_not_on_degenerate_polygons() -> None:
    midpoint = np.array([[0, 0], [5, 0], [10, 0], [10, 10], [0, 10]], dtype=np.float64)  # a straight corner
    bowtie = np.array([[0, 0], [10, 10], [10, 0], [0, 10]], dtype=np.float64)
    segment = np.array([[0, 0], [4, 0], [8, 0]], dtype=np.float64)
    assert is_convex(midpoint[None], strict=False)[0] and not is_convex(midpoint[None], strict=True)[0]
    assert not is_convex(bowtie[None], strict=False)[0]
    assert is_convex(segment[None], strict=False)[0] and not is_convex(segment[None], strict=True)[0]


def test_winds_once_tells_a_star_from_a_convex_polygon() -> None:
    angles = np.arange(5) * 2 * np.pi / 5
    pentagon = np.stack([np.cos(angles), np.sin(angles)], axis=1) * 50
    star = pentagon[[0, 2, 4, 1, 3]]  # every turn the same way, twice around
    both = np.stack([pentagon, star])
    np.testing.assert_array_equal(is_convex(both, strict=True), [True, True])
    np.testing.assert_array_equal(winds_once(both), [True, False])
    np.testing.assert_array_equal(winds_once(both[:, ::-1]), [True, False])


def test_turn_crosses_have_the_sign_of_the_area_on_convex_polygons() -> None:
    rng = np.random.default_rng(2)
    pts = np.stack([_convex(rng, 6) for _ in range(50)])
    pts[::2] = pts[::2, ::-1]
    turns = turn_crosses(pts)
    assert turns.shape == (50, 6)
    np.testing.assert_array_equal(np.sign(turns), np.sign(signed_areas(pts))[:, None] * np.ones((1, 6)))


def test_convex_min_rect_short_sides_match_opencv() -> None:
    rng = np.random.default_rng(3)
    # Long boxes, as text is: the minimum-area rectangle of a squat polygon is often tied between
    # edges (every side of an acute triangle gives the same area), and then each tool picks its own.
    boxes = [
        shapely.get_coordinates(
            shapely.affinity.rotate(
                shapely.box(0, 0, rng.uniform(30, 200), rng.uniform(3, 25)), rng.uniform(0, 180)
            )
        )[:4]
        + rng.uniform(-1, 1, (4, 2))
        for _ in range(300)
    ]
    pts = np.stack([box for box in boxes if is_convex(box[None], strict=True)[0]])
    expected = [min(cv2.minAreaRect(p.astype(np.float32))[1]) for p in pts]
    np.testing.assert_allclose(convex_min_rect_short_sides(pts), expected, rtol=1e-4, atol=1e-3)
    for k in (5, 8):
        pts = np.stack([_convex(rng, k, even=True) for _ in range(200)])
        expected = [min(cv2.minAreaRect(p.astype(np.float32))[1]) for p in pts]
        np.testing.assert_allclose(convex_min_rect_short_sides(pts), expected, rtol=1e-4, atol=1e-3)
    rotated = shapely.get_coordinates(shapely.affinity.rotate(shapely.box(0, 0, 40, 3), 33.0, origin=(0, 0)))[
        :4
    ]  # a 40 x 3 rectangle
    assert convex_min_rect_short_sides(rotated[None])[0] == pytest.approx(3.0, rel=1e-9)


def test_convex_min_rect_short_sides_of_degenerate_polygons() -> None:
    segment = np.array([[0, 0], [10, 0], [10, 0], [0, 0]], dtype=np.float64)  # zero-length edges skipped
    point = np.full((4, 2), 5.0)
    short = convex_min_rect_short_sides(np.stack([segment, point]))
    assert short[0] == 0.0
    assert np.isnan(short[1])  # no edge gives a direction


def test_group_by_point_count_keeps_positions_and_order() -> None:
    rng = np.random.default_rng(4)
    counts = [4, 3, 4, 5, 3, 4]
    polygons = [rng.uniform(0, 10, (k, 2)) for k in counts]
    groups = group_by_point_count(polygons)
    assert [stacked.shape for _, stacked in groups] == [(3, 4, 2), (2, 3, 2), (1, 5, 2)]
    assert [positions.tolist() for positions, _ in groups] == [[0, 2, 5], [1, 4], [3]]
    for positions, stacked in groups:
        for row, i in enumerate(positions.tolist()):
            np.testing.assert_array_equal(stacked[row], polygons[i])
    assert group_by_point_count([]) == []
