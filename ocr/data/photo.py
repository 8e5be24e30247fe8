"""Photo augmentation: a flat scan or synthetic page becomes a plausible phone photo of it.

With probability ``p`` a sample's page is bent, seen by a tilted camera on a procedural background
(``ocr.data.photo_geometry``), then lit unevenly, shadowed, colour-cast, blurred, noised and JPEG-compressed
(``ocr.data.photo_light``). Polygons follow every geometric step exactly. It runs in the DataLoader worker
on the decoded source image, before the train transform draws its crop (``TrainTransform.crop_region``),
so both ``data.render_on`` paths see it. Its draws come from its own generator, re-seeded with each
sample's seed, so a resumed run gets the same photos and the other draws are unchanged by it.
Built from ``data.train_transform.photo`` (configs/data/photo/); docs/data.md, "Photographed scans".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import cv2
import numpy as np
import numpy.typing as npt

from ocr.data.photo_geometry import EDGE, Bend, PageWarp, camera_homography, densify, remap_page
from ocr.data.photo_light import (
    BACKGROUNDS,
    background,
    colour_cast,
    composite,
    defocus,
    jpeg,
    motion_blur,
    sensor_noise,
    uneven_light,
)

__all__ = ["BendParams", "CameraParams", "PerspectiveParams", "PhotoAugment", "SceneParams"]

_STREAM = 0x70686F74  # "phot": the photo draws' own stream, apart from the crop's draws of the same seed
Range = tuple[float, float]


@dataclass(frozen=True)
class PerspectiveParams:
    """p: probability of a tilted camera; max_tilt: pitch and yaw within +-this (deg); max_roll: in-plane
    turn within +-this (deg); focal: camera distance range, in page long sides (short: strong perspective).
    """

    p: float
    max_tilt: float
    max_roll: float
    focal: Range


@dataclass(frozen=True)
class BendParams:
    """p: probability of a bend; amplitude: range of each wave's height, as a fraction of the page side it
    runs along; periods: range of the number of waves across the page."""

    p: float
    amplitude: Range
    periods: Range


@dataclass(frozen=True)
class SceneParams:
    """margin: background visible on each side, fraction of the page long side; backgrounds: the surfaces
    drawn from; drop_shadow: darkness range of the page's shadow on the surface; p_light, light: uneven
    light's probability and depth range; p_shadow, shadow: a cast shadow's probability and darkness range."""

    margin: Range
    backgrounds: tuple[str, ...]
    drop_shadow: Range
    p_light: float
    light: Range
    p_shadow: float
    shadow: Range


@dataclass(frozen=True)
class CameraParams:
    """p_cast, cast: colour cast (per-channel gain within 1 +- cast); p_defocus, defocus: disk radius range
    and p_motion, motion: line length range (px at a 1024 px long side; one blur at most, defocus drawn
    first); p_noise, noise: sensor noise std range (grey levels); p_jpeg, jpeg_quality: JPEG quality range."""

    p_cast: float
    cast: float
    p_defocus: float
    defocus: Range
    p_motion: float
    motion: Range
    p_noise: float
    noise: Range
    p_jpeg: float
    jpeg_quality: Range


P = TypeVar("P", PerspectiveParams, BendParams, SceneParams, CameraParams)


def _params(kind: type[P], key: str, value: P | Mapping[str, Any]) -> P:
    """``value`` (a config mapping) as ``kind``: exactly its keys, ranges as (lo, hi) with lo <= hi."""
    if isinstance(value, kind):
        return value
    names = [f.name for f in fields(kind)]
    if not isinstance(value, Mapping) or set(value) != set(names):
        got = sorted(value) if isinstance(value, Mapping) else repr(value)
        raise ValueError(f"data.train_transform.photo.{key}: expected exactly the keys {names}, got {got}")
    typed: dict[str, Any] = {}
    for name in names:
        item = value[name]
        if name == "backgrounds":
            typed[name] = tuple(str(v) for v in item)
            unknown = set(typed[name]) - set(BACKGROUNDS)
            if unknown or not typed[name]:
                raise ValueError(
                    f"data.train_transform.photo.{key}.{name}: expected some of {BACKGROUNDS}, got {item}"
                )
        elif isinstance(item, (int, float)):
            typed[name] = float(item)
        else:
            lo, hi = (float(v) for v in item)
            if lo > hi:
                raise ValueError(
                    f"data.train_transform.photo.{key}.{name}: expected [min, max], got {list(item)}"
                )
            typed[name] = (lo, hi)
    return kind(**typed)


class PhotoAugment:
    """Draws and renders one sample's photo (worker side); built from ``data.train_transform.photo``.

    Args:
        p: probability that a sample is photographed (0 turns the augmentation off).
        max_long_side: a page with a longer side is first scaled down to it (INTER_AREA), which bounds the
            cost (every op is a pass over the photo); None: never.
        perspective: see :class:`PerspectiveParams`.
        bend: see :class:`BendParams`.
        scene: see :class:`SceneParams`.
        camera: see :class:`CameraParams`.
    """

    def __init__(
        self,
        *,
        p: float,
        max_long_side: int | None,
        perspective: PerspectiveParams | Mapping[str, Any],
        bend: BendParams | Mapping[str, Any],
        scene: SceneParams | Mapping[str, Any],
        camera: CameraParams | Mapping[str, Any],
    ) -> None:
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"data.train_transform.photo.p: expected a probability in [0, 1], got {p!r}")
        if max_long_side is not None and int(max_long_side) < 16:
            raise ValueError(
                f"data.train_transform.photo.max_long_side: expected null or an int >= 16, "
                f"got {max_long_side!r}"
            )
        self.p = float(p)
        self.max_long_side = None if max_long_side is None else int(max_long_side)
        self.perspective = _params(PerspectiveParams, "perspective", perspective)
        self.bend = _params(BendParams, "bend", bend)
        self.scene = _params(SceneParams, "scene", scene)
        self.camera = _params(CameraParams, "camera", camera)
        self.set_random_seed(0)

    def set_random_seed(self, seed: int) -> None:
        """Re-seed the draws (per sample, through ``TrainTransform.set_random_seed``)."""
        self._rng = np.random.default_rng([seed, _STREAM])

    def __call__(
        self, image: npt.NDArray[np.uint8], polygons: Sequence[npt.NDArray[np.floating[Any]]]
    ) -> tuple[npt.NDArray[np.uint8], list[npt.NDArray[np.float32]]] | None:
        """Photograph ``image`` with probability ``p``.

        Args:
            image: (h, w, 3) uint8 RGB page.
            polygons: (K, 2) points in ``image`` px each.

        Returns:
            None (not drawn), or the (H, W, 3) uint8 photo and the polygons in its px, in the same order
            (each with K or more points: a bent outline is densified).
        """
        if self.p <= 0.0 or self._rng.random() >= self.p:
            return None
        return self.render(image, polygons)

    def render(
        self, image: npt.NDArray[np.uint8], polygons: Sequence[npt.NDArray[np.floating[Any]]]
    ) -> tuple[npt.NDArray[np.uint8], list[npt.NDArray[np.float32]]]:
        """Photograph ``image`` (always): the photo and the mapped polygons, as ``__call__`` returns them."""
        scale = 1.0 if self.max_long_side is None else min(1.0, self.max_long_side / max(image.shape[:2]))
        if scale < 1.0:
            image = cv2.resize(image, (0, 0), fx=scale, fy=scale, interpolation=cv2.INTER_AREA)  # type: ignore[assignment]
            polygons = [np.asarray(p, np.float64) * scale for p in polygons]
        warp = self.draw_warp(image.shape[1], image.shape[0])
        page, coverage = remap_page(image, warp)
        photo = self._scene(page, coverage)
        photo = self._camera(photo)
        return photo, [warp.map_polygon(np.asarray(p, np.float64)) for p in polygons]

    def draw_warp(self, width: int, height: int) -> PageWarp:
        """Draw the bend, the camera and the margins for a ``width`` x ``height`` page."""
        rng = self._rng
        bend = Bend(float(width), float(height))
        if rng.random() < self.bend.p:
            amp = rng.uniform(*self.bend.amplitude, 2) * rng.choice([-1.0, 1.0], 2) * (height, width)
            periods, phases = rng.uniform(*self.bend.periods, 2), rng.uniform(0, 2 * math.pi, 2)
            bend = Bend(width, height, amp[0], periods[0], phases[0], amp[1], periods[1], phases[1])
            if bend.lipschitz() > 0.5:  # keep the page from folding over itself
                shrink = 0.5 / bend.lipschitz()
                bend = Bend(
                    width,
                    height,
                    amp[0] * shrink,
                    periods[0],
                    phases[0],
                    amp[1] * shrink,
                    periods[1],
                    phases[1],
                )
        homography = np.eye(3)
        pers = self.perspective
        if rng.random() < pers.p:
            pitch, yaw = rng.uniform(-pers.max_tilt, pers.max_tilt, 2)
            roll = rng.uniform(-pers.max_roll, pers.max_roll)
            homography = camera_homography(width, height, pitch, yaw, roll, rng.uniform(*pers.focal))
        outline = np.array([[0, 0], [width, 0], [width, height], [0, height]], np.float64)
        placed = PageWarp(bend, homography, (1, 1)).map_points(densify(outline, 16.0))
        lo, hi = placed.min(axis=0), placed.max(axis=0)
        margins = np.maximum(rng.uniform(*self.scene.margin, 4) * max(width, height), EDGE)  # l, t, r, b
        shift = np.array([[1.0, 0.0, margins[0] - lo[0]], [0.0, 1.0, margins[1] - lo[1]], [0.0, 0.0, 1.0]])
        size = np.ceil(hi - lo + margins[:2] + margins[2:]).astype(int)
        return PageWarp(bend, shift @ homography, (int(size[0]), int(size[1])))

    def _scene(self, page: npt.NDArray[np.uint8], coverage: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        """Lay the page (premultiplied by ``coverage``) on a background, then light the scene."""
        rng, scene = self._rng, self.scene
        kind = scene.backgrounds[int(rng.integers(len(scene.backgrounds)))]
        surface = background(rng, kind, coverage, rng.uniform(*scene.drop_shadow))
        photo = composite(page, coverage, surface)
        if rng.random() < scene.p_light:
            shadow = rng.uniform(*scene.shadow) if rng.random() < scene.p_shadow else 0.0
            photo = uneven_light(rng, photo, rng.uniform(*scene.light), shadow)
        return photo

    def _camera(self, photo: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        """Colour cast, one blur, sensor noise and JPEG, each with its probability."""
        rng, cam = self._rng, self.camera
        px = max(photo.shape[:2]) / 1024.0  # lengths are given at a 1024 px long side
        if rng.random() < cam.p_cast:
            photo = colour_cast(rng, photo, cam.cast)
        if rng.random() < cam.p_defocus:
            photo = defocus(photo, rng.uniform(*cam.defocus) * px)
        elif rng.random() < cam.p_motion:
            photo = motion_blur(photo, max(2.0, rng.uniform(*cam.motion) * px), rng.uniform(0, 180))
        if rng.random() < cam.p_noise:
            photo = sensor_noise(rng, photo, rng.uniform(*cam.noise))
        if rng.random() < cam.p_jpeg:
            photo = jpeg(photo, int(round(rng.uniform(*cam.jpeg_quality))))
        return photo
