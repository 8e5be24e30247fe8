"""The numpy intersection paths agree with shapely (GEOS)."""

from __future__ import annotations

import numpy as np
import shapely

from ocr.metrics.cleval.area import (
    QuadSet,
    axis_aligned,
    convex_intersection_areas,
    intersection_areas,
)
from ocr.polygons import is_convex


def _random_quads(rng: np.random.Generator, n: int) -> np.ndarray:
    base = np.array([[0, 0], [20, 0], [20, 10], [0, 10]], dtype=np.float64)
    return rng.integers(0, 30, (n, 1, 2)) + base + rng.integers(-4, 5, (n, 4, 2))


def test_convex_intersection_matches_shapely_in_both_orientations() -> None:
    rng = np.random.default_rng(0)
    a, b = _random_quads(rng, 3000), _random_quads(rng, 3000)
    b[:300] = a[:300]  # identical boxes: shared edges count once
    b[300:400] = a[300:400, [2, 3, 0, 1]]
    b[400:500] = a[400:500] + [[20, 0]]  # touching along an edge
    pa, pb = shapely.polygons(a), shapely.polygons(b)
    ok = (
        is_convex(a, strict=False)
        & is_convex(b, strict=False)
        & (shapely.area(pa) > 0)
        & (shapely.area(pb) > 0)
    )
    expected = shapely.area(shapely.intersection(pa[ok], pb[ok]))
    np.testing.assert_allclose(convex_intersection_areas(a[ok], b[ok]), expected, atol=1e-9)
    np.testing.assert_allclose(convex_intersection_areas(a[ok][:, ::-1], b[ok][:, ::-1]), expected, atol=1e-9)


def test_intersection_areas_uses_every_path_consistently() -> None:
    rect = np.array([[[0, 0], [10, 0], [10, 10], [0, 10]]], dtype=np.float64)
    tilted = np.array([[[5, 0], [15, 5], [10, 15], [0, 10]]], dtype=np.float64)
    bowtie = np.array([[[0, 0], [10, 10], [10, 0], [0, 10]]], dtype=np.float64)
    verts = np.concatenate([rect, tilted, bowtie, rect + 5])
    boxes = QuadSet(verts, np.full(4, 4))
    assert boxes.rect.tolist() == [True, False, False, True] and boxes.fast.tolist() == [
        True,
        True,
        False,
        True,
    ]
    g, d = np.repeat(np.arange(4), 4), np.tile(np.arange(4), 4)
    polys = shapely.make_valid(shapely.polygons(verts))
    expected = shapely.area(shapely.intersection(polys[g], polys[d]))
    np.testing.assert_allclose(intersection_areas(boxes, boxes, g, d), expected, atol=1e-9)
    assert axis_aligned(rect[:, [1, 2, 3, 0]]).all()
