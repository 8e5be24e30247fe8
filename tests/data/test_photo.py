"""The photo augmentation: every geometric op moves points exactly where it moves pixels (0.5 px), and its
values are refused in one line by the config check."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest
from omegaconf import DictConfig

from ocr.data.photo import BendParams, CameraParams, PerspectiveParams, PhotoAugment, SceneParams
from ocr.data.photo_geometry import Bend, PageWarp, remap_page
from ocr.data.photo_scene import BACKGROUNDS
from ocr.data.warp import render_crop
from ocr.utils.config_types import check_config_types
from ocr.utils.errors import UsageError
from tests.helpers.paths import REPO_ROOT
from tests.helpers.receipt_fixtures import train_transform

PAGE_W, PAGE_H = 240, 360
DOT = 5  # px side of the rendered dots


def _dotted_page() -> tuple[np.ndarray, np.ndarray]:
    """A white page with black DOT x DOT squares on a grid: the page and the (N, 2) dot centres."""
    page = np.full((PAGE_H, PAGE_W, 3), 255, np.uint8)
    centres = []
    for y in range(30, PAGE_H - 30, 40):
        for x in range(30, PAGE_W - 30, 40):
            x0, y0 = x + (y // 40) % 3, y + (x // 40) % 2  # not all on one sub-pixel phase
            page[y0 : y0 + DOT, x0 : x0 + DOT] = 0
            centres.append((x0 + DOT / 2.0, y0 + DOT / 2.0))  # continuous coordinates
    return page, np.array(centres, np.float64)


def _centroid(image: np.ndarray, near: np.ndarray, radius: int = 9) -> np.ndarray:
    """Darkness-weighted centroid (continuous px) of the blob within ``radius`` of ``near``."""
    grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float64)
    cx, cy = (int(v) for v in np.floor(near))
    window = grey[cy - radius : cy + radius + 1, cx - radius : cx + radius + 1]
    weight = np.clip(window.max() - window - 8.0, 0, None)  # the page's white minus a margin
    ys, xs = np.mgrid[cy - radius : cy + radius + 1, cx - radius : cx + radius + 1] + 0.5
    return np.array([(weight * xs).sum(), (weight * ys).sum()]) / weight.sum()


def _max_error(warp: PageWarp) -> float:
    page, centres = _dotted_page()
    photo, _ = remap_page(page, warp)
    mapped = warp.map_points(centres)
    return max(float(np.linalg.norm(_centroid(photo, p) - p)) for p in mapped)


def _shifted(homography: np.ndarray, dx: float, dy: float) -> np.ndarray:
    return np.array([[1.0, 0.0, dx], [0.0, 1.0, dy], [0.0, 0.0, 1.0]]) @ homography


@pytest.mark.parametrize(
    ("amp_x", "periods_x", "amp_y", "periods_y"),
    [(6.0, 1.2, 0.0, 0.0), (0.0, 0.0, -5.0, 0.7), (7.0, 0.4, 4.0, 1.1)],
)
def test_bend_points_follow_pixels(amp_x: float, periods_x: float, amp_y: float, periods_y: float) -> None:
    bend = Bend(PAGE_W, PAGE_H, amp_x, periods_x, 0.7, amp_y, periods_y, 2.1)
    warp = PageWarp(bend, np.eye(3), (PAGE_W, PAGE_H))
    _, centres = _dotted_page()
    moved = np.abs(warp.map_points(centres) - centres).max()
    assert moved > 0.8 * max(abs(amp_x), abs(amp_y))  # the op really moves the dots
    assert _max_error(warp) < 0.5


def test_drawn_warps_points_follow_pixels() -> None:
    """Bend and margins together, drawn as training draws them (strong settings)."""
    augment = _augment(p=1.0)
    for seed in range(4):
        augment.set_random_seed(seed)
        warp = augment.draw_bend(PAGE_W, PAGE_H)
        assert not warp.bend.flat
        assert _max_error(warp) < 0.5


def test_bent_polygon_is_densified_to_follow_the_curve() -> None:
    bend = Bend(PAGE_W, PAGE_H, 8.0, 1.0, 0.3, 8.0, 1.0, 1.3)
    warp = PageWarp(bend, _shifted(np.eye(3), 10, 10), (PAGE_W + 20, PAGE_H + 20))
    box = np.array([[20, 50], [220, 50], [220, 80], [20, 80]], np.float64)
    mapped = warp.map_polygon(box)
    assert len(mapped) > 8
    np.testing.assert_allclose(mapped[0], warp.map_points(box[:1])[0], atol=1e-4)  # corners kept, in order
    t = np.linspace(0, 1, 400)[:, None]
    along = np.concatenate([a + t * (b - a) for a, b in zip(box, np.roll(box, -1, axis=0), strict=True)])
    truth = warp.map_points(along)
    contour = mapped.reshape(-1, 1, 2).astype(np.float32)
    distance = [abs(cv2.pointPolygonTest(contour, (float(x), float(y)), True)) for x, y in truth]
    assert max(distance) < 0.5
    # without densification the straight chords miss the curve by pixels
    chords = warp.map_points(box).reshape(-1, 1, 2).astype(np.float32)
    assert max(abs(cv2.pointPolygonTest(chords, (float(x), float(y)), True)) for x, y in truth) > 2.0


def test_folding_bend_is_refused() -> None:
    with pytest.raises(ValueError, match="fold"):
        Bend(100, 100, 30.0, 1.0, 0.0).invert(np.zeros((1, 2)))


def _augment(
    p: float, max_long_side: int | None = None, pixels: bool = True, **changes: object
) -> PhotoAugment:
    """Strong settings; ``pixels=False``: no light or camera op (a shadow's edge would move centroids)."""
    camera = CameraParams(0.5, 0.12, 0.3, (0.8, 2.5), 0.3, (2.0, 7.0), 0.6, (2.0, 8.0), 0.6, (20, 60))
    scene = SceneParams((0.02, 0.15), BACKGROUNDS, (0.1, 0.5), 0.8, (0.1, 0.5), 0.5, (0.2, 0.55))
    if not pixels:
        camera = CameraParams(0.0, 0.12, 0.0, (0.8, 2.5), 0.0, (2.0, 7.0), 0.0, (2.0, 8.0), 0.0, (20, 60))
        scene = dataclasses.replace(scene, p_light=0.0, p_shadow=0.0)
    return PhotoAugment(
        p=p,
        max_long_side=max_long_side,
        perspective=PerspectiveParams(1.0, (0.03, 0.07), 8.0),
        bend=BendParams(1.0, (0.01, 0.02), (0.3, 1.2)),
        scene=scene,
        camera=dataclasses.replace(camera, **changes),  # type: ignore[arg-type]
    )


def _squares(centres: np.ndarray, half: float = 2.5) -> list[np.ndarray]:
    return [
        np.array([[x - half, y - half], [x + half, y - half], [x + half, y + half], [x - half, y + half]])
        for x, y in centres
    ]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_photo_points_follow_pixels_through_bend_camera_and_turn(seed: int) -> None:
    """The whole geometry as training draws it: the bend (ours), albumentations' perspective and turn."""
    page, centres = _dotted_page()
    augment = _augment(p=1.0, pixels=False)
    augment.set_random_seed(seed)
    photo, polygons = augment.render(page, _squares(centres))
    errors = [np.linalg.norm(_centroid(photo, p.mean(axis=0), radius=7) - p.mean(axis=0)) for p in polygons]
    assert max(errors) < 0.5
    assert photo.shape[:2] != page.shape[:2]  # the camera really moved the page


def test_a_large_page_is_scaled_down_first_and_its_polygons_with_it() -> None:
    page, centres = _dotted_page()
    augment = _augment(p=1.0, max_long_side=PAGE_H // 2, pixels=False)
    augment.set_random_seed(5)
    photo, polygons = augment.render(page, _squares(centres))
    assert max(photo.shape[:2]) < PAGE_H * 0.8  # half-size page plus margins
    errors = [np.linalg.norm(_centroid(photo, p.mean(axis=0), radius=5) - p.mean(axis=0)) for p in polygons]
    assert max(errors) < 0.5


def test_same_seed_same_photo_and_points_other_seed_differs() -> None:
    page, centres = _dotted_page()
    polygons = [
        np.array([[c[0] - 3, c[1] - 3], [c[0] + 3, c[1] - 3], [c[0] + 3, c[1] + 3], [c[0] - 3, c[1] + 3]])
        for c in centres
    ]
    augment = _augment(p=1.0)
    shots = []
    for seed in (7, 7, 8):
        augment.set_random_seed(seed)
        shot = augment(page, polygons)
        assert shot is not None
        shots.append(shot)
    (a, pa), (b, pb), (c, _) = shots
    assert a.tobytes() == b.tobytes() and all(np.array_equal(x, y) for x, y in zip(pa, pb, strict=True))
    assert a.shape != c.shape or a.tobytes() != c.tobytes()
    assert len(pa) == len(polygons)


def test_p_zero_is_off_and_unknown_backgrounds_and_reversed_ranges_are_refused() -> None:
    augment = _augment(p=0.0)
    assert augment(np.zeros((8, 8, 3), np.uint8), []) is None
    parts = {"perspective": augment.perspective, "bend": augment.bend, "camera": augment.camera}
    lawn = dataclasses.replace(augment.scene, backgrounds=("lawn",))
    with pytest.raises(ValueError, match=r"photo\.scene\.backgrounds: expected some of"):
        PhotoAugment(p=1.0, max_long_side=None, scene=lawn, **parts)  # type: ignore[arg-type]
    reversed_margin = dataclasses.replace(augment.scene, margin=(0.2, 0.1))
    with pytest.raises(ValueError, match=r"photo\.scene\.margin: expected \[min, max\], got \[0.2, 0.1\]"):
        PhotoAugment(p=1.0, max_long_side=None, scene=reversed_margin, **parts)  # type: ignore[arg-type]


def test_bad_photo_values_are_refused_by_the_runner_naming_their_keys(tmp_path: Path) -> None:
    """Issue 40: both were accepted (and the JPEG quality clamped to 100); now the config check refuses
    them before any data loads, each line naming its key."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    photo = "data.train_transform.photo"
    cmd = [
        sys.executable,
        "runners/train.py",
        "data=receipts",
        f"data.root={tmp_path / 'receipts'}",
        f"{photo}.perspective.p=2",
        f"{photo}.camera.jpeg_quality=[200,300]",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    console = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in console, console
    assert f"{photo}.perspective.p: expected a value in [0.0, 1.0], got 2\n" in console
    assert f"{photo}.camera.jpeg_quality[0]: expected a value in [1, 100], got 200\n" in console
    assert f"{photo}.camera.jpeg_quality[1]: expected a value in [1, 100], got 300" in console


@pytest.mark.parametrize(
    ("add", "override", "message"),
    [
        ("", "bend.amplitude=[0.1]", "bend.amplitude: expected 2 items"),
        ("", "scene.light=[0.1,1.5]", "scene.light[1]: expected a value in [0.0, 1.0], got 1.5"),
        ("+", "scene.blur=3", "scene.blur: not an argument of ocr.data.photo.SceneParams"),
    ],
)
def test_the_config_check_types_every_photo_value(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, add: str, override: str, message: str
) -> None:
    photo = "data.train_transform.photo"
    cfg = compose_cfg("train", ["data=receipts", "data.root=/receipts", f"{add}{photo}.{override}"], tmp_path)
    with pytest.raises(UsageError, match=re.escape(f"{photo}.{message}")):
        check_config_types(cfg)


def test_train_transform_with_photo_is_seeded_and_renders_as_the_device_path() -> None:
    page, centres = _dotted_page()
    polygons = [
        np.array(
            [[c[0] - 4, c[1] - 4], [c[0] + 4, c[1] - 4], [c[0] + 4, c[1] + 4], [c[0] - 4, c[1] + 4]],
            np.float32,
        )
        for c in centres
    ]
    from ocr.data.transforms import SourceImage

    source = SourceImage(page, 1.0, PAGE_W, PAGE_H)
    plain, photographed = train_transform(), train_transform(photo=_augment(p=1.0))
    off = train_transform(photo=_augment(p=0.0))
    for transform in (plain, photographed, off):
        transform.set_random_seed(3)
    base, shot, same = (t(source, polygons, [False] * len(polygons)) for t in (plain, photographed, off))
    assert base.image.equal(same.image)  # an idle photo leaves the other draws alone
    assert (shot.geometry.orig_width, shot.geometry.orig_height) != (PAGE_W, PAGE_H)  # the photo's frame
    photographed.set_random_seed(3)
    region, result = photographed.crop_region(source, polygons, [False] * len(polygons))
    assert result.warp is not None
    assert np.array_equal(render_crop(region, result.warp), shot.image.permute(1, 2, 0).numpy())
    assert all(np.array_equal(a, b) for a, b in zip(result.polygons, shot.polygons, strict=True))
