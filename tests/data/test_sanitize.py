from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from shapely.geometry import Polygon as ShapelyPolygon

from ocr.data.sanitize import REASONS, _clean_safe, merge_counts, sanitize_polygons
from tests.helpers.db_reference import rotated_box

W, H = 100, 80
BOX = [[10, 10], [40, 10], [40, 30], [10, 30]]


def _one(poly, **kwargs):
    return sanitize_polygons([poly], [False], W, H, **kwargs)


@pytest.mark.parametrize(
    ("poly", "reason"),
    [
        (None, "none"),
        ([], "empty"),
        (np.zeros((0, 2)), "empty"),
        ([[1, 2]], "too_few_points"),
        ([[1, 2], [5, 6]], "too_few_points"),
        ([[1, 2], [5, 6], [1, 2], [1, 2]], "too_few_points"),
        ([[1, 1], [1, 1], [1, 1]], "too_few_points"),
        ([[0, 0], [np.nan, 1], [5, 5]], "non_finite"),
        ([[0, 0], [np.inf, 1], [5, 5], [0, 5]], "non_finite"),
        ([[0, 0], [5, 5], [10, 10]], "zero_area"),
        ([[0, 0], [5, 5], [10, 10], [2, 2]], "zero_area"),
        ([[200, 200], [300, 200], [300, 300]], "out_of_image"),
        ([[-50, -50], [-10, -50], [-10, -10], [-50, -10]], "out_of_image"),
        ([[100, 0], [120, 0], [120, 20], [100, 20]], "out_of_image"),
        ([[1, 1], [50, 1], [50, 1.5], [1, 1.5]], "too_small"),
        ([[1, 2], [3]], "malformed"),
        ("abc", "malformed"),
        ([[0, 0, 1], [1, 1, 1], [2, 2, 2]], "malformed"),
        ({"x": 1}, "malformed"),
    ],
)
def test_removal_reasons(poly, reason):
    kept, flags, counts = _one(poly)
    assert kept == [] and flags == []
    assert counts == {reason: 1}
    assert reason in REASONS


def test_self_intersecting_quad_is_repaired_and_kept():
    bow_tie = [[10, 10], [40, 30], [40, 10], [10, 30]]  # corners clicked in the wrong order
    kept, flags, counts = sanitize_polygons([bow_tie], [True], W, H)
    assert counts == {"self_intersecting_repaired": 1}
    assert flags == [True]
    repaired = ShapelyPolygon(kept[0])
    assert repaired.is_valid
    assert repaired.area == pytest.approx(600.0)


def test_self_intersecting_non_convex_keeps_largest_part():
    # A figure eight whose loops have different sizes: the larger loop survives.
    poly = [[0, 0], [30, 30], [30, 0], [0, 30], [0, 20], [-10, 10]]
    kept, _, counts = sanitize_polygons([np.array(poly) + 20], [False], W, H)
    assert counts == {"self_intersecting_repaired": 1}
    assert ShapelyPolygon(kept[0]).is_valid
    assert ShapelyPolygon(kept[0]).area > 300


def test_every_reason_in_one_call_and_flags_follow_their_polygon():
    polys = [
        None,
        [],
        [[1, 2]],
        [[0, 0], [np.nan, 1], [5, 5]],
        [[1, 1], [50, 1], [50, 1.5], [1, 1.5]],
        [[0, 0], [5, 5], [10, 10]],
        [[200, 200], [300, 200], [300, 300]],
        [[10, 10], [40, 30], [40, 10], [10, 30]],
        "abc",
        BOX,
        [[-10, -10], [50, -10], [50, 20], [-10, 20]],
        [[0, 0], [1e12, 0], [1e12, 10], [0, 10]],
    ]
    ignore = [True, False, True, False, True, False, True, True, False, True, False, True]
    kept, flags, counts = sanitize_polygons(polys, ignore, W, H)
    assert set(counts) == set(REASONS)
    assert all(v == 1 for v in counts.values())
    assert flags == [True, True, False]
    assert len(kept) == 3


def test_dont_care_polygons_are_never_dropped_for_being_dont_care():
    polys = [np.array(BOX, np.float32)] * 3
    kept, flags, counts = sanitize_polygons(polys, [True, True, True], W, H)
    assert len(kept) == 3 and flags == [True, True, True] and counts == {}


def test_valid_polygon_inside_keeps_vertex_order_and_dtype():
    poly = np.array([[40, 10], [40, 30], [10, 30], [10, 10]], np.float64)
    kept, _, counts = _one(poly)
    assert counts == {}
    assert kept[0].dtype == np.float32 and kept[0].shape == (4, 2)
    np.testing.assert_array_equal(kept[0], poly)


def test_closing_point_and_flat_list_are_accepted():
    closed = [*BOX, BOX[0]]
    flat = [v for p in BOX for v in p]
    kept, _, counts = sanitize_polygons([closed, flat], [False, False], W, H)
    assert counts == {}
    for k in kept:
        np.testing.assert_array_equal(k, np.array(BOX, np.float32))


def test_clipping_keeps_the_inside_part_and_orientation_and_is_counted():
    poly = np.array([[-10, -10], [50, -10], [50, 20], [-10, 20]], np.float32)
    kept, _, counts = _one(poly)
    assert counts == {"clipped": 1}
    clipped = ShapelyPolygon(kept[0])
    assert clipped.equals(ShapelyPolygon([[0, 0], [50, 0], [50, 20], [0, 20]]))
    assert clipped.exterior.is_ccw == ShapelyPolygon(poly).exterior.is_ccw


@pytest.mark.parametrize("big", [1e12, 1e300, 2e9])
def test_coordinates_beyond_any_image_remove_the_polygon_and_are_counted(big):
    """They used to be clamped, then clipped: a whole-image text box, without a count."""
    poly = [[-big, -big], [big, -big], [big, big], [-big, big]]
    assert _one(poly) == ([], [], {"out_of_range": 1})
    one_wild_point = [[10, 10], [40, 10], [big, 30], [10, 30]]
    assert _one(one_wild_point) == ([], [], {"out_of_range": 1})


def test_every_kept_polygon_that_changed_is_counted():
    """Unchanged polygons count nothing; each repair counts one reason (clipped, self-intersecting)."""
    polys = [BOX, [[-5, 10], [40, 10], [40, 30], [-5, 30]], [[10, 10], [40, 30], [40, 10], [10, 30]]]
    kept, _, counts = sanitize_polygons(polys, [False] * 3, W, H)
    changed = sum(not np.array_equal(k, np.asarray(p, np.float32)) for k, p in zip(kept, polys, strict=True))
    assert counts == {"clipped": 1, "self_intersecting_repaired": 1} and changed == 2


@pytest.mark.parametrize("angle", [0.0, 17.0, 45.0, 90.0, 133.0])
def test_too_small_uses_the_minimum_area_rectangle(angle):
    thin = rotated_box(50, 40, 30, 0.9, angle)
    ok = rotated_box(50, 40, 30, 1.1, angle)
    assert _one(thin)[2] == {"too_small": 1}
    assert _one(ok)[2] == {}
    assert _one(thin, min_size=0.0)[2] == {}
    # The clipped (shapely) path applies the same rule: move the centre onto the border along the long axis.
    d = np.array([np.cos(np.deg2rad(angle)), np.sin(np.deg2rad(angle))])
    with np.errstate(divide="ignore"):
        shift = min(50 / abs(d[0]), 40 / abs(d[1])) * d  # the centre (50, 40) walks to the nearest border
    assert _one(thin + shift)[2] == {"too_small": 1}
    kept, _, counts = _one(ok + shift)
    assert counts == {"clipped": 1} and ShapelyPolygon(kept[0]).area < ShapelyPolygon(ok).area * 0.75


def test_zero_or_negative_image_size_removes_everything_without_raising():
    kept, _, counts = sanitize_polygons([BOX], [False], 0, 0)
    assert kept == [] and counts == {"out_of_image": 1}


def test_mismatched_flags_are_a_caller_error():
    with pytest.raises(ValueError, match="one ignore flag per polygon"):
        sanitize_polygons([BOX, BOX], [False], W, H)


def test_random_garbage_never_raises_and_kept_polygons_are_valid_and_inside():
    rng = np.random.default_rng(0)
    polys = []
    for _ in range(400):
        k = int(rng.integers(0, 8))
        pts = rng.uniform(-30, 130, (k, 2))
        pts[rng.random((k, 2)) < 0.03] = rng.choice([np.nan, np.inf, 1e200])
        pts[rng.random(k) < 0.2] = pts[0] if k else 0
        polys.append(pts if rng.random() < 0.5 else pts.tolist())
    kept, flags, counts = sanitize_polygons(polys, [bool(i % 3) for i in range(400)], W, H)
    assert len(kept) == len(flags) and sum(counts.values()) >= 400 - len(kept)
    assert set(counts) <= set(REASONS)
    for poly in kept:
        shape = ShapelyPolygon(poly)
        assert poly.dtype == np.float32 and poly.ndim == 2 and len(poly) >= 3
        assert shape.is_valid and shape.area > 0
        assert poly.min() >= 0 and poly[:, 0].max() <= W and poly[:, 1].max() <= H


def test_merge_counts_sums_and_drops_zeros():
    assert merge_counts({"none": 1, "empty": 0}, {"none": 2, "too_small": 3}, {}) == {
        "none": 3,
        "too_small": 3,
    }


def test_the_vectorised_paths_agree_with_the_per_polygon_one():
    """Quads inside, across and outside a crop (as a training crop sees them): same result as shapely's,
    clipped ones the same polygon in the same orientation (its first vertex may differ)."""
    rng = np.random.default_rng(0)
    centres = rng.uniform(-150, 250, (300, 1, 2))
    quads = centres + rng.uniform(-30, 30, (300, 4, 2))
    quads[::7] = centres[::7] + np.array([[0, 0], [40, 0], [40, 10], [0, 10]])  # convex, some outside
    quads[::11] = [[-50, 0], [-50, 10], [-50, 20], [-50, 30]]  # zero area, outside
    for i in range(0, 300, 3):  # word boxes across the border, rotated
        x, y, angle = rng.uniform(-10, W + 10), rng.uniform(-10, H + 10), rng.uniform(0, 180)
        quads[i] = rotated_box(x, y, rng.uniform(10, 60), rng.uniform(4, 20), angle)
    # A clipped corner can be a right triangle, whose minimum-area rectangle ties between its legs and its
    # hypotenuse: each vertex order picks its own short side (tests/test_polygons.py), so the size rule
    # stays below those triangles here.
    kept, _, counts = sanitize_polygons(list(quads), [False] * len(quads), W, H, min_size=0.5)
    expected = [_clean_safe(q, float(W), float(H), 0.5) for q in quads]
    expected_kept = [p for p, _ in expected if p is not None]
    assert len(kept) == len(expected_kept)
    clipped = 0
    for got, want in zip(kept, expected_kept, strict=True):
        assert got.dtype == np.float32
        if got.shape == want.shape and (got == want).all():
            continue
        clipped += 1
        got_shape, want_shape = ShapelyPolygon(got), ShapelyPolygon(want)
        assert got_shape.symmetric_difference(want_shape).area < 1e-3 * want_shape.area
        assert got_shape.exterior.is_ccw == want_shape.exterior.is_ccw
        assert got.min() >= 0 and got[:, 0].max() <= W and got[:, 1].max() <= H
    assert counts == merge_counts(dict(Counter(r for _, r in expected if r is not None)))
    assert counts["out_of_image"] > 50 and clipped > 20
