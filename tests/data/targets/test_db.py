from __future__ import annotations

import cv2
import numpy as np
import pytest
from shapely.geometry import Polygon as ShapelyPolygon

from ocr.data.targets import db
from ocr.data.targets.db import make_db_targets
from ocr.data.targets.geometry import GENERAL, measure_polygons
from ocr.types import TargetParams
from tests.helpers.db_reference import jitter_corners, receipt_word_boxes, reference_db_targets, rotated_box

KEYS = ("prob_map", "prob_mask", "thresh_map", "thresh_mask")


def _boundary(mask: np.ndarray, radius: int = 1) -> np.ndarray:
    """Pixels within ``radius`` px of the edge of a binary mask, the image border counting as an edge."""
    kernel = np.ones((2 * radius + 1, 2 * radius + 1), np.uint8)
    binary = (mask > 0.5).astype(np.uint8)
    eroded = cv2.erode(binary, kernel, borderType=cv2.BORDER_CONSTANT, borderValue=0)
    return cv2.dilate(binary, kernel) != eroded


def _region_boundaries(
    polygons: list[np.ndarray], ignore: list[bool], height: int, width: int, **params: float
) -> np.ndarray:
    """Union of the 2-px boundary bands of each polygon's own oracle ``thresh_mask``.

    The classic mask fills pyclipper's integer dilation, which truncates the input and rounds the
    output: its edge sits up to ~1.5 px off the exact ``d <= D`` region, also where two regions touch.
    """
    bands = np.zeros((height, width), bool)
    for polygon, flag in zip(polygons, ignore, strict=True):
        bands |= _boundary(reference_db_targets([polygon], [flag], height, width, **params)["thresh_mask"], 2)
    return bands


def assert_matches_oracle(
    polygons: list[np.ndarray], ignore: list[bool], height: int, width: int, **params: float
) -> None:
    fast = make_db_targets(polygons, ignore, height, width, TargetParams(**params))
    ref = reference_db_targets(polygons, ignore, height, width, **params)
    for key in KEYS:
        assert fast[key].shape == (height, width) and fast[key].dtype == np.float32, key
    prob_fast, prob_ref = fast["prob_map"] > 0.5, ref["prob_map"] > 0.5
    if prob_ref.any() or prob_fast.any():
        assert (prob_fast & prob_ref).sum() / (prob_fast | prob_ref).sum() >= 0.99
    for key in ("prob_map", "prob_mask"):
        differs = (fast[key] > 0.5) != (ref[key] > 0.5)
        assert not (differs & ~_boundary(ref[key])).any(), f"{key} differs away from boundaries"
    differs = (fast["thresh_mask"] > 0.5) != (ref["thresh_mask"] > 0.5)
    assert not (differs & ~_region_boundaries(polygons, ignore, height, width, **params)).any()
    inside = ref["thresh_mask"] > 0.5
    if inside.any():
        assert np.abs(fast["thresh_map"] - ref["thresh_map"])[inside].mean() <= 0.01


def _blob(rng: np.random.Generator, cx: float, cy: float, radius: float) -> np.ndarray:
    """A simple polygon of 6-12 points around (cx, cy): an ellipse with radial jitter (often non-convex)."""
    k = int(rng.integers(6, 13))
    angles = np.sort(rng.uniform(0, 2 * np.pi, k))
    radii = radius * rng.uniform(0.6, 1.0, k)
    squash, tilt = rng.uniform(0.3, 1.0), rng.uniform(0, np.pi)
    x, y = radii * np.cos(angles), squash * radii * np.sin(angles)
    rot = np.array([[np.cos(tilt), -np.sin(tilt)], [np.sin(tilt), np.cos(tilt)]])
    return (np.stack([x, y], axis=1) @ rot.T + [cx, cy]).astype(np.float32)


def _curved_band(
    rng: np.random.Generator, cx: float, cy: float, length: float, thickness: float
) -> np.ndarray:
    """Curved text region: 3-6 points along an arc and back along a parallel arc (6-12 points)."""
    k = int(rng.integers(3, 7))
    t = np.linspace(-0.5, 0.5, k)
    bend = rng.uniform(-0.3, 0.3) * length
    upper = np.stack([cx + t * length, cy + bend * (t**2 - 0.25)], axis=1)
    return np.concatenate([upper, (upper + [0, thickness])[::-1]]).astype(np.float32)


def _perspective_quad(rng: np.random.Generator, cx: float, cy: float) -> np.ndarray:
    box = rotated_box(cx, cy, rng.uniform(20, 90), rng.uniform(9, 25), rng.uniform(-20, 20))
    return (box + rng.uniform(-3, 3, box.shape)).astype(np.float32)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("rotated_fraction", [0.0, 0.5, 1.0])
def test_receipt_layouts_match_oracle(seed: int, rotated_fraction: float) -> None:
    rng = np.random.default_rng(seed)
    height, width = 192 + 32 * seed, 256
    boxes = receipt_word_boxes(rng, 24, height, width, rotated_fraction=rotated_fraction, max_angle_deg=25)
    ignore = (rng.random(len(boxes)) < 0.15).tolist()
    assert_matches_oracle(boxes, ignore, height, width)


@pytest.mark.parametrize(("seed", "jitter_px"), [(0, 0.3), (1, 1.0), (2, 1.0), (3, 3.0)])
def test_jittered_quads_match_oracle(seed: int, jitter_px: float) -> None:
    """Word boxes whose corners moved a little: general quads, the edge-wise threshold field."""
    rng = np.random.default_rng(200 + seed)
    boxes = receipt_word_boxes(rng, 30, 160, 256, rotated_fraction=0.5, max_angle_deg=20)
    quads = jitter_corners(
        rng, [*boxes, rotated_box(-4, 80, 50, 20, 3), rotated_box(250, 5, 40, 16, 0)], jitter_px
    )
    ignore = (rng.random(len(quads)) < 0.1).tolist()
    assert_matches_oracle(quads, ignore, 160, 256)
    fast = make_db_targets(quads, ignore, 160, 256)
    ref = reference_db_targets(quads, ignore, 160, 256)
    both = (fast["thresh_mask"] > 0.5) & (ref["thresh_mask"] > 0.5)
    assert np.quantile(np.abs(fast["thresh_map"] - ref["thresh_map"])[both], 0.999) <= 0.01


def test_benchmark_page_of_jittered_quads_matches_oracle() -> None:
    """The jittered layout of scripts/benchmark_targets.py (a 640 px page of 200 word boxes, every corner
    moved by up to 1 px): the targets whose speed it measures are general quads and correct ones."""
    rng = np.random.default_rng(0)
    quads = jitter_corners(rng, receipt_word_boxes(rng, 200, 640, 640), 1.0)
    assert (measure_polygons(quads).kind == GENERAL).all(), "expected general quads, not rectangles"
    quads = [quad for quad in quads if quad.max() < 320]  # the top-left quarter: the oracle's check is slow
    assert len(quads) >= 30
    assert_matches_oracle(quads, [False] * len(quads), 320, 320)
    fast = make_db_targets(quads, [False] * len(quads), 320, 320)
    ref = reference_db_targets(quads, [False] * len(quads), 320, 320)
    both = (fast["thresh_mask"] > 0.5) & (ref["thresh_mask"] > 0.5)
    assert np.quantile(np.abs(fast["thresh_map"] - ref["thresh_map"])[both], 0.999) <= 0.01


def test_convex_quads_are_shrunk_as_arrays_and_only_others_by_pyclipper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dispatch: jittered word boxes (convex, not rectangles) never reach the per-polygon pyclipper
    offset; a non-convex polygon does."""
    calls: list[int] = []
    pyclipper_offset = db.offset_polygon

    def counted(points: np.ndarray, delta: float) -> np.ndarray | None:
        calls.append(len(points))
        return pyclipper_offset(points, delta)

    monkeypatch.setattr(db, "offset_polygon", counted)
    rng = np.random.default_rng(11)
    quads = jitter_corners(rng, receipt_word_boxes(rng, 40, 256, 256, rotated_fraction=0.5), 1.0)
    out = make_db_targets(quads, [False] * len(quads), 256, 256)
    assert calls == [] and out["prob_map"].any()
    dart = np.array([[20, 200], [120, 200], [120, 240], [70, 215], [20, 240]], np.float64)
    make_db_targets([*quads, dart], [False] * (len(quads) + 1), 256, 256)
    assert calls == [5]


def _concave_quad(rng: np.random.Generator, cx: float, cy: float) -> np.ndarray:
    """An arrowhead: a quad with one reflex corner (non-convex), jittered."""
    size = rng.uniform(20, 50)
    dart = np.array([[-1, -0.6], [1, 0], [-1, 0.6], [-0.3, 0]]) * size + [cx, cy]
    return (dart + rng.uniform(-1, 1, dart.shape)).astype(np.float32)


@pytest.mark.parametrize("seed", range(3))
def test_concave_quads_among_convex_ones_match_oracle(seed: int) -> None:
    rng = np.random.default_rng(400 + seed)
    polygons = jitter_corners(rng, receipt_word_boxes(rng, 12, 200, 240, rotated_fraction=0.5), 1.0)
    polygons += [_concave_quad(rng, *rng.uniform(40, 180, 2)) for _ in range(4)]
    assert_matches_oracle(polygons, [False] * len(polygons), 200, 240)


def _tiny_jittered_quads(rng: np.random.Generator) -> list[np.ndarray]:
    """Quads of 0-6 px whose corners moved by up to 1 px (many become slivers and bow-ties), two that
    collapse to a point and to a segment before the jitter, and one with a repeated corner."""
    tiny = [
        rotated_box(*rng.uniform(10, 150, 2), rng.uniform(0, 6), rng.uniform(0, 6), rng.uniform(-30, 30))
        for _ in range(30)
    ]
    point = np.repeat(rng.uniform(10, 150, (1, 2)), 4, axis=0)
    segment = np.array([[20, 20], [40, 20], [40, 20], [20, 20]], np.float64)
    triangle = np.array([[60, 60], [60, 60], [90, 75], [60, 90]], np.float32)
    return [*jitter_corners(rng, [*tiny, point, segment], 1.0), triangle]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("min_text_size", [0, 8])
def test_tiny_and_degenerate_jittered_quads_never_fail(seed: int, min_text_size: int) -> None:
    rng = np.random.default_rng(500 + seed)
    good = rotated_box(120, 130, 50, 16, 0)
    polygons = [*_tiny_jittered_quads(rng), good]
    params = TargetParams(min_text_size=min_text_size)
    out = make_db_targets(polygons, [False] * len(polygons), 160, 160, params)
    for key in KEYS:
        assert out[key].dtype == np.float32 and np.isfinite(out[key]).all(), key
    assert out["thresh_map"].min() >= 0.3 - 1e-6 and out["thresh_map"].max() <= 0.7 + 1e-6
    assert out["prob_map"][128:133, 105:136].all(), "the good box is still drawn"
    if min_text_size == 8:  # the tiny ones are masked as too small (no border), as in the oracle
        assert_matches_oracle(polygons, [False] * len(polygons), 160, 160)


@pytest.mark.parametrize("seed", range(3))
def test_tiny_simple_jittered_quads_drawn_match_oracle(seed: int) -> None:
    """With no minimum text size the tiny quads are drawn. Bow-ties are left out of this comparison:
    the oracle offsets them after truncating their corners to integers, which on a 1 px sliver moves
    or cuts its region by more than the comparison's 2 px bands."""
    rng = np.random.default_rng(500 + seed)
    simple = [quad for quad in _tiny_jittered_quads(rng) if ShapelyPolygon(quad).is_valid]
    assert len(simple) >= 10
    assert_matches_oracle(
        [*simple, rotated_box(120, 130, 50, 16, 0)], [False] * (len(simple) + 1), 160, 160, min_text_size=0
    )


@pytest.mark.parametrize("seed", range(4))
def test_polygons_with_many_points_and_perspective_quads_match_oracle(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    polygons = [_blob(rng, *rng.uniform(30, 200, 2), rng.uniform(8, 30)) for _ in range(5)]
    polygons += [
        _curved_band(rng, *rng.uniform(40, 180, 2), rng.uniform(40, 120), rng.uniform(8, 20))
        for _ in range(4)
    ]
    polygons += [_perspective_quad(rng, *rng.uniform(20, 220, 2)) for _ in range(6)]
    ignore = (rng.random(len(polygons)) < 0.2).tolist()
    assert_matches_oracle(polygons, ignore, 224, 240)


@pytest.mark.parametrize("min_text_size", [0, 8, 12])
def test_tiny_text_is_masked_like_the_oracle(min_text_size: int) -> None:
    rng = np.random.default_rng(7)
    polygons = [
        rotated_box(*rng.uniform(20, 140, 2), rng.uniform(4, 60), rng.uniform(1.5, 14), rng.uniform(-30, 30))
        for _ in range(30)
    ]
    assert_matches_oracle(polygons, [False] * len(polygons), 160, 160, min_text_size=min_text_size)


@pytest.mark.parametrize("shrink_ratio", [0.2, 0.4, 0.7])
def test_other_parameters_match_oracle(shrink_ratio: float) -> None:
    boxes = receipt_word_boxes(np.random.default_rng(3), 20, 160, 200, rotated_fraction=0.5)
    assert_matches_oracle(
        boxes, [False] * len(boxes), 160, 200, shrink_ratio=shrink_ratio, thresh_min=0.2, thresh_max=0.9
    )


def test_polygons_crossing_the_image_edge_match_oracle() -> None:
    polygons = [
        rotated_box(-5, 40, 60, 20, 0),
        rotated_box(150, 10, 50, 30, 10),
        rotated_box(80, 158, 90, 16, -5),
        rotated_box(158, 90, 12, 60, 0),
    ]
    assert_matches_oracle(polygons, [False] * 4, 160, 160)


@pytest.mark.parametrize("reach_px", [1e3, 1e7])
def test_long_edge_crossing_the_map_keeps_an_exact_threshold_field(reach_px: float) -> None:
    """A thin general quad whose long edges reach far beyond the map: the field beyond its upper-left
    edge is ``1 - d / D`` with ``d`` the distance to that edge's line (the oracle cannot allocate it)."""
    quad = np.array([[0, 20], [reach_px, reach_px + 20.5], [reach_px + 15, reach_px + 5], [15, 5.3]])
    out = make_db_targets([quad], [False], 100, 100)
    area = 0.5 * abs(
        np.cross(quad[1] - quad[0], quad[3] - quad[0]) + np.cross(quad[3] - quad[2], quad[1] - quad[2])
    )
    perimeter = float(np.linalg.norm(np.roll(quad, -1, axis=0) - quad, axis=1).sum())
    offset = area * (1 - 0.4**2) / perimeter  # DB's D = A (1 - r^2) / L
    ys, xs = np.mgrid[0:100, 0:100].astype(np.float64)
    direction = (quad[1] - quad[0]) / np.linalg.norm(quad[1] - quad[0])
    across = (xs - quad[0, 0]) * -direction[1] + (ys - quad[0, 1]) * direction[0]
    beyond = (across > 0) & (xs > 30) & (xs < 90)
    expected = 0.3 + 0.4 * np.clip(1 - across / offset, 0, 1)
    assert beyond.sum() > 1000
    np.testing.assert_allclose(out["thresh_map"][beyond], expected[beyond], atol=1e-4)


def test_single_rectangle_threshold_profile() -> None:
    box = np.array([[40, 30], [140, 30], [140, 50], [40, 50]], np.float32)  # 100 x 20 px
    out = make_db_targets([box], [False], 80, 180)
    # DB's D = A (1 - r^2) / L = 2000 x 0.84 / 240 = 7 px
    column = out["thresh_map"][:, 90]
    assert column[30] == pytest.approx(0.7) and column[50] == pytest.approx(0.7)
    assert column[30 - 7] == pytest.approx(0.3, abs=1e-6) and column[10] == pytest.approx(0.3)
    assert column[40] == pytest.approx(0.3, abs=1e-6)  # 10 px from both edges, beyond D = 7
    assert column[33] == pytest.approx(0.7 - 0.4 * 3 / 7, abs=1e-5)
    assert (
        out["prob_map"][37:44, 47:134].all()
        and not out["prob_map"][36].any()
        and not out["prob_map"][44].any()
    )
    assert (
        out["thresh_mask"][23:58, 90].all()
        and not out["thresh_mask"][22, 90]
        and not out["thresh_mask"][58, 90]
    )
    assert out["prob_mask"].all()


def test_ignored_and_small_text_are_masked_without_border() -> None:
    ignored, small = rotated_box(50, 30, 60, 20, 0), rotated_box(50, 80, 60, 5, 0)
    out = make_db_targets([ignored, small], [True, False], 120, 120)
    assert out["prob_mask"][30, 50] == 0 and out["prob_mask"][80, 50] == 0 and out["prob_mask"][5, 5] == 1
    assert not out["prob_map"].any() and not out["thresh_mask"].any()
    assert np.all(out["thresh_map"] == np.float32(0.3))


def test_empty_input_gives_empty_targets() -> None:
    out = make_db_targets([], [], 32, 48)
    assert not out["prob_map"].any() and out["prob_mask"].all() and not out["thresh_mask"].any()
    assert np.all(out["thresh_map"] == np.float32(0.3))


DEGENERATE = {
    "no_points": np.zeros((0, 2)),
    "one_point": [[10, 10]],
    "two_points": [[10, 10], [50, 10]],
    "collinear": [[10, 10], [30, 10], [60, 10], [90, 10]],
    "repeated_point": [[20, 20]] * 5,
    "bow_tie": [[10, 10], [60, 40], [60, 10], [10, 40]],
    "nan": [[10, 10], [np.nan, 10], [50, 40], [10, 40]],
    "inf": [[10, 10], [np.inf, 10], [50, 40], [10, 40]],
    "outside": [[-90, -90], [-30, -90], [-30, -60], [-90, -60]],
    "far_away": [[1e9, 1e9], [2e9, 1e9], [2e9, 2e9], [1e9, 2e9]],
    "huge": [[-1e7, -1e7], [1e7, -1e7], [1e7, 1e7], [-1e7, 1e7]],
    "astronomical": [[-1e19, 5], [1e19, 5], [1e19, 40], [-1e19, 40]],  # beyond pyclipper's range
    "rotated_astronomical": [[-1e15, -1e15], [1e15, -1e15 + 1e9], [1e15 - 1e9, 1e15], [-1e15, 1e15]],
    "huge_pentagon": [[-1e9, -1e9], [1e9, -1e9], [1e9, 1e9], [0, 2e9], [-1e9, 1e9]],
    "empty_shrink": [[2.5, 20.1], [196.4, 20.1], [196.4, 28.9], [2.5, 28.9]],  # 8.8 px high
    "sliver": [[10, 10], [90, 10.5], [10, 11]],
    "spike": [[10, 10], [90, 10], [50, 60], [50.5, 11], [49.5, 11]],
}


@pytest.mark.parametrize("name", sorted(DEGENERATE))
@pytest.mark.parametrize("ignored", [False, True])
def test_degenerate_polygon_never_raises(name: str, ignored: bool) -> None:
    good = rotated_box(70, 70, 40, 16, 0)
    polygons = [np.asarray(DEGENERATE[name], dtype=np.float64), good]
    out = make_db_targets(polygons, [ignored, False], 100, 100)
    alone = make_db_targets([good], [False], 100, 100)
    for key in KEYS:
        assert out[key].shape == (100, 100) and out[key].dtype == np.float32 and np.isfinite(out[key]).all()
    assert set(np.unique(out["prob_map"])) <= {0, 1} and set(np.unique(out["prob_mask"])) <= {0, 1}
    assert out["thresh_map"].min() >= 0.3 - 1e-6 and out["thresh_map"].max() <= 0.7 + 1e-6
    assert out["prob_map"][68:73, 56:85].all(), "the good polygon is still drawn"
    if name in ("no_points", "one_point", "two_points", "nan", "inf", "outside", "far_away"):
        for key in KEYS:
            np.testing.assert_array_equal(out[key], alone[key], err_msg=key)


def test_degenerate_polygons_match_oracle() -> None:
    names = ("collinear", "repeated_point", "bow_tie", "outside", "empty_shrink", "sliver", "spike")
    polygons = [np.asarray(DEGENERATE[name], dtype=np.float64) for name in names]
    assert_matches_oracle([*polygons, rotated_box(70, 70, 40, 16, 0)], [False] * (len(names) + 1), 100, 100)


@pytest.mark.parametrize("ignored", [False, True])
def test_polygon_reaching_far_outside_covers_the_map(ignored: bool) -> None:
    pentagon = np.asarray(DEGENERATE["huge_pentagon"], dtype=np.float64)
    out = make_db_targets([pentagon], [ignored], 40, 60)
    assert np.all(out["prob_map"] == (0 if ignored else 1))
    assert np.all(out["prob_mask"] == (0 if ignored else 1))
    assert np.all(out["thresh_mask"] == (0 if ignored else 1))


def test_empty_shrink_is_masked() -> None:
    polygon = np.asarray(DEGENERATE["empty_shrink"])
    out = make_db_targets([polygon], [False], 40, 200)
    assert not out["prob_map"].any() and not out["thresh_mask"].any()
    assert out["prob_mask"][24, 50] == 0 and out["prob_mask"][5, 50] == 1


def test_inputs_are_not_modified() -> None:
    polygons = receipt_word_boxes(np.random.default_rng(5), 10, 128, 128)
    copies = [p.copy() for p in polygons]
    make_db_targets(polygons, [False] * 10, 128, 128)
    for before, after in zip(copies, polygons, strict=True):
        np.testing.assert_array_equal(before, after)


def test_list_inputs_and_mixed_point_counts() -> None:
    polygons = [
        [[10, 10], [60, 10], [60, 30], [10, 30]],
        [[70, 50], [110, 50], [120, 60], [110, 75], [70, 75]],
    ]
    assert_matches_oracle([np.asarray(p, np.float64) for p in polygons], [False, False], 100, 130)
    np.testing.assert_array_equal(
        make_db_targets(polygons, [False, False], 100, 130)["prob_map"],
        make_db_targets([np.asarray(p) for p in polygons], [False, False], 100, 130)["prob_map"],
    )


@pytest.mark.parametrize(
    ("polygons", "ignore", "height", "width", "message"),
    [
        ([], [], 0, 10, "positive size"),
        ([rotated_box(5, 5, 4, 4, 0)], [], 10, 10, "one ignore flag per polygon"),
        ([[[1, 2], [3, 4, 5]]], [False], 10, 10, r"polygons\[0\]"),
        ([[[1, 2, 3]]], [False], 10, 10, r"polygons\[0\]"),
    ],
)
def test_bad_arguments_raise_value_error(polygons, ignore, height, width, message) -> None:
    with pytest.raises(ValueError, match=message):
        make_db_targets(polygons, ignore, height, width)
