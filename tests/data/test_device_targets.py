"""The device DB targets against their CPU reference (``make_db_targets``) on the same polygons.

Tolerances, and why:
- ``thresh_map`` and ``thresh_mask``: the same field, in float32 on both sides (1e-5; the uint8 code of
  the compact batch adds at most 7.8e-4 on the worker path, tests/data/test_coding.py).
- ``prob_map`` and ``prob_mask`` of axis-aligned boxes: identical (the same truncation, and the reference
  fills whole-pixel rectangles).
- ``prob_map`` of rotated and jittered polygons: the reference rounds twice to whole pixels (the ends of
  the moved edges, then their intersections: up to 0.71 px each) and ``cv2.fillPoly`` takes pixels within
  half a pixel of the rounded edges; the device takes the exact inward offset, less half a pixel. They
  differ only within 2 px (0.71 + 0.71 + 0.5) of the exact shrunk border, in about 5 % of the probability
  pixels on these pages; ``prob_mask`` likewise, far less. Along a thin line whose sides meet at a shallow
  angle, that band is tens of pixels long: the tip of the shrunk shape moves along the line.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

import ocr.data.device_targets as device_targets
from ocr.data.device_targets import draw_db_targets, pack_polygons
from ocr.data.sanitize import sanitize_polygons
from ocr.data.targets.db import make_db_targets
from ocr.types import TARGET_KEYS, TargetParams, TargetPolygons
from tests.helpers.db_reference import jitter_corners, receipt_word_boxes

PARAMS = TargetParams(shrink_ratio=0.4, thresh_min=0.3, thresh_max=0.7, min_text_size=8)
SIZE = 192


def border_distance(key: str, differ: np.ndarray, polygons: TargetPolygons, index: int) -> float:
    """Largest distance (px) from a pixel where sample ``index``'s ``key`` maps differ (``differ``, (H, W)
    bool) to the exact border that map draws: the inward DB offset of the drawn polygons for ``prob_map``,
    the masked polygons for ``prob_mask``, the outward offset for ``thresh_mask``; 0 where they agree.

    Measured to the exact border, not to the reference's pixels: along a thin line whose sides meet at a
    shallow angle, a border moved by half a pixel moves the shrunk tip by tens of pixels along the line.
    """
    ys, xs = np.nonzero(differ)
    if not len(xs):
        return 0.0
    role, side = {"prob_map": (1, 1.0), "prob_mask": (2, 0.0), "thresh_mask": (1, -1.0)}[key]
    points = polygons.points[index].numpy()
    if key != "thresh_mask":
        points = np.trunc(points)  # the fills use the truncated coordinates, as both paths do
    pixels = list(zip(xs.astype(float).tolist(), ys.astype(float).tolist(), strict=True))
    nearest = np.full(len(pixels), np.inf)
    for n in np.flatnonzero(polygons.roles[index].numpy() == role).tolist():
        contour = points[n].reshape(-1, 1, 2)
        inside = np.array([cv2.pointPolygonTest(contour, pixel, True) for pixel in pixels])
        nearest = np.minimum(nearest, np.abs(inside - side * float(polygons.offsets[index, n])))
    return float(nearest.max())


def _device(
    polygons: list[list[np.ndarray]], ignore: list[list[bool]], height: int = SIZE, width: int = SIZE
) -> dict[str, np.ndarray]:
    packed = pack_polygons(polygons, ignore, height, width, PARAMS)
    maps = draw_db_targets(packed, height, width, PARAMS.thresh_min, PARAMS.thresh_max, torch.device("cpu"))
    return {key: value[:, 0].numpy() for key, value in maps.items()}  # (B, H, W) each


def _page(rotated_fraction: float, jitter: float, seed: int = 0) -> tuple[list[np.ndarray], list[bool]]:
    """A dense receipt page (some words don't-care, some below min_text_size), sanitised as in a sample."""
    rng = np.random.default_rng(seed)
    boxes = receipt_word_boxes(rng, 90, SIZE, SIZE, rotated_fraction=rotated_fraction, max_angle_deg=12)
    if jitter:
        boxes = jitter_corners(rng, boxes, jitter)
    polygons, ignore, _ = sanitize_polygons(boxes, [i % 7 == 0 for i in range(len(boxes))], SIZE, SIZE)
    return polygons, ignore


def _only_on_the_border(reference: np.ndarray, got: np.ndarray) -> bool:
    """Whether the {0, 1} maps differ only on borders: at each differing pixel, one of the two maps has
    both values among the pixel and its 8 neighbours (no shape's inside is missing or added)."""
    kernel = np.ones((3, 3), np.uint8)

    def border(mask: np.ndarray) -> np.ndarray:
        mask = mask.astype(np.uint8)
        return cv2.dilate(mask, kernel) != cv2.erode(mask, kernel)

    return bool(np.all((border(reference) | border(got))[reference != got]))


def test_axis_aligned_boxes_give_the_reference_maps() -> None:
    polygons, ignore = _page(rotated_fraction=0.0, jitter=0.0)
    reference = make_db_targets(polygons, ignore, SIZE, SIZE, PARAMS)
    got = _device([polygons], [ignore])
    for key in ("prob_map", "prob_mask", "thresh_mask"):
        np.testing.assert_array_equal(got[key][0], reference[key], err_msg=key)
    np.testing.assert_allclose(got["thresh_map"][0], reference["thresh_map"], atol=1e-5)
    assert 0 < reference["prob_mask"].mean() < 1 and reference["prob_map"].mean() > 0.05  # masked and drawn


@pytest.mark.parametrize(("rotated_fraction", "jitter"), [(1.0, 0.0), (0.3, 1.0)])
def test_rotated_and_jittered_polygons_differ_only_on_the_shrunk_border(
    rotated_fraction: float, jitter: float
) -> None:
    polygons, ignore = _page(rotated_fraction, jitter)
    reference = make_db_targets(polygons, ignore, SIZE, SIZE, PARAMS)
    got = _device([polygons], [ignore])
    np.testing.assert_allclose(got["thresh_map"][0], reference["thresh_map"], atol=1e-5)
    np.testing.assert_array_equal(got["thresh_mask"][0], reference["thresh_mask"])
    packed = pack_polygons([polygons], [ignore], SIZE, SIZE, PARAMS)
    for key in ("prob_map", "prob_mask"):
        assert _only_on_the_border(reference[key], got[key][0]), key
        assert border_distance(key, reference[key] != got[key][0], packed, 0) <= 2.0, key
    differing = (got["prob_map"][0] != reference["prob_map"]).sum()
    assert 0 < differing < 0.12 * reference["prob_map"].sum()


def test_a_thin_line_cut_by_the_crop_edge_differs_only_next_to_its_shrunk_border() -> None:
    """A text line cut by the crop's top edge (its sides meet at 1 degree): the reference's rounded
    vertices end the shrunk shape tens of pixels before the exact offset does, along a one-pixel row."""
    wedge = np.array([[346.7, 0.0], [346.9, 11.3], [0.0, 17.7], [0.0, 0.0]], np.float32)
    params = TargetParams()  # the data config's defaults: shrink 0.4, min_text_size 8
    packed = pack_polygons([[wedge]], [[False]], 40, 400, params)
    got = draw_db_targets(packed, 40, 400, params.thresh_min, params.thresh_max, torch.device("cpu"))
    got_map = got["prob_map"][0, 0].numpy()
    reference = make_db_targets([wedge], [False], 40, 400, params)["prob_map"]
    differ = got_map != reference
    tips = [int(np.nonzero(m.any(axis=0))[0].max()) for m in (reference, got_map)]
    assert tips[1] - tips[0] > 20  # 288 and 326 px: the far pixels of the full-size comparison
    assert border_distance("prob_map", differ, packed, 0) <= 2.0
    assert tips[0] < 317 < tips[1]  # the exact offset's last row ends at x = 317, D = 5.85 below the top


def test_a_batch_is_its_samples_drawn_alone_whatever_the_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Padding (samples with fewer polygons, polygons with fewer points) and chunking change nothing."""
    pages = [_page(0.3, 1.0, seed) for seed in range(3)]
    pages[1] = ([], [])  # a crop without text
    clipped = sanitize_polygons(
        [np.array([[-20, 40], [90, 30], [100, 70], [-10, 80]], np.float32)], [False], 80, 80
    )
    pages[2] = (pages[2][0][:5] + clipped[0], pages[2][1][:5] + clipped[1])  # 4- and 5-point polygons
    alone = [_device([p], [i]) for p, i in pages]
    monkeypatch.setattr(device_targets, "_CHUNK_EVALUATIONS", 5 * 16 * 16 * 40)  # 40 tiles per chunk
    together = _device([p for p, _ in pages], [i for _, i in pages])
    for index, maps in enumerate(alone):
        for key in TARGET_KEYS:
            np.testing.assert_array_equal(together[key][index], maps[key][0], err_msg=f"{key} of {index}")
    assert together["prob_map"][1].max() == 0 and together["prob_mask"][1].min() == 1
    assert (together["thresh_map"][1] == np.float32(PARAMS.thresh_min)).all()
    assert together["thresh_mask"][1].max() == 0


def test_general_polygons_and_maps_that_are_not_whole_tiles() -> None:
    """A concave polygon and a tall map whose sides are not multiples of the tile: the field and the
    masks as the reference draws them."""
    concave = np.array([[10, 10], [70, 10], [70, 60], [45, 60], [45, 30], [10, 30]], np.float32)
    small = np.array([[80, 70], [86, 70], [86, 74], [80, 74]], np.float32)  # below min_text_size: masked
    height, width = 100, 90
    reference = make_db_targets([concave, small], [False, False], height, width, PARAMS)
    got = _device([[concave, small]], [[False, False]], height, width)
    np.testing.assert_allclose(got["thresh_map"][0], reference["thresh_map"], atol=1e-5)
    np.testing.assert_array_equal(got["thresh_mask"][0], reference["thresh_mask"])
    np.testing.assert_array_equal(got["prob_mask"][0], reference["prob_mask"])
    assert _only_on_the_border(reference["prob_map"], got["prob_map"][0])
    assert got["prob_mask"][0, 72, 83] == 0 and got["prob_map"][0, 20, 60] == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_drawing_on_cuda_never_waits_for_the_device() -> None:
    polygons, ignore = _page(0.3, 1.0)
    packed = pack_polygons([polygons] * 4, [ignore] * 4, SIZE, SIZE, PARAMS)
    device = torch.device("cuda")
    draw_db_targets(packed, SIZE, SIZE, 0.3, 0.7, device)  # warm-up (allocator, kernels)
    torch.cuda.set_sync_debug_mode("error")
    try:
        maps = draw_db_targets(packed, SIZE, SIZE, 0.3, 0.7, device)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    reference = make_db_targets(polygons, ignore, SIZE, SIZE, PARAMS)
    np.testing.assert_allclose(maps["thresh_map"][3, 0].cpu().numpy(), reference["thresh_map"], atol=1e-5)
