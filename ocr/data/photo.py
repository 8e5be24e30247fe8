"""Photo augmentation: a flat scan or synthetic page becomes a plausible phone photo of it.

With probability ``p`` a page is bent onto a larger canvas (``ocr.data.photo_geometry``), seen by a tilted
camera (albumentations' ``Perspective`` and ``Affine``), put on a background and lit unevenly
(``ocr.data.photo_scene``), then shadowed, colour-cast, blurred, noised and JPEG-compressed by
albumentations. Polygons follow every geometric step (as keypoints). It runs in the worker before the
train crop, from its own generator re-seeded per sample. docs/data.md, "Photographed scans".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Annotated, Any

import albumentations as A
import cv2
import numpy as np
import numpy.typing as npt

from ocr.data.photo_geometry import EDGE, Bend, PageWarp, densify, remap_page
from ocr.data.photo_scene import BACKGROUNDS, background, composite, uneven_light
from ocr.utils.config_types import Bounds, NonNegativeFloat, Probability

__all__ = ["BendParams", "CameraParams", "PerspectiveParams", "PhotoAugment", "SceneParams"]

_STREAM = 0x70686F74  # "phot": the photo draws' own stream, apart from the crop's draws of the same seed
_SEEDS = 2**31
Range = tuple[NonNegativeFloat, NonNegativeFloat]
Shares = tuple[Probability, Probability]
Quality = Annotated[int, Bounds(1, 100)]
# albumentations maps points with OpenCV's matrices (pixel centres at integers); ours are continuous.
_KEYPOINTS = A.KeypointParams(format="xy", remove_invisible=False)


@dataclass(frozen=True)
class PerspectiveParams:
    """p: probability of a tilted and turned camera; scale: range of the corners' random shift, a fraction
    of the canvas side (``A.Perspective``); max_roll: in-plane turn within +-this (deg)."""

    p: Probability
    scale: Range
    max_roll: NonNegativeFloat


@dataclass(frozen=True)
class BendParams:
    """p: probability of a bend; amplitude: range of each wave's height, as a fraction of the page side it
    runs along; periods: range of the number of waves across the page."""

    p: Probability
    amplitude: Range
    periods: Range


@dataclass(frozen=True)
class SceneParams:
    """margin: background visible on each side, fraction of the page long side; backgrounds: the surfaces
    drawn from; drop_shadow: darkness range of the page's shadow on the surface; p_light, light: uneven
    light's probability and depth range; p_shadow, shadow: a cast shadow's probability and darkness
    range."""

    margin: Range
    backgrounds: Sequence[str]
    drop_shadow: Shares
    p_light: Probability
    light: Shares
    p_shadow: Probability
    shadow: Shares


@dataclass(frozen=True)
class CameraParams:
    """p_cast, cast: colour cast (per-channel gain within 1 +- cast); p_defocus, defocus: disk radius range
    and p_motion, motion: line length range (px at a 1024 px long side; one blur at most); p_noise, noise:
    sensor noise std range (grey levels); p_jpeg, jpeg_quality: JPEG quality range."""

    p_cast: Probability
    cast: Probability
    p_defocus: Probability
    defocus: Range
    p_motion: Probability
    motion: Range
    p_noise: Probability
    noise: Range
    p_jpeg: Probability
    jpeg_quality: tuple[Quality, Quality]


class PhotoAugment:
    """Draws and renders one sample's photo with probability ``p`` (worker side); a page longer than
    ``max_long_side`` is first scaled down to it, which bounds the cost."""

    def __init__(
        self,
        *,
        p: Probability,
        max_long_side: Annotated[int, Bounds(low=16)] | None,
        perspective: PerspectiveParams,
        bend: BendParams,
        scene: SceneParams,
        camera: CameraParams,
    ) -> None:
        for key, params in zip(
            ("perspective", "bend", "scene", "camera"), (perspective, bend, scene, camera), strict=True
        ):
            _check_ranges(key, params)
        if not scene.backgrounds or set(scene.backgrounds) - set(BACKGROUNDS):
            raise ValueError(
                f"data.train_transform.photo.scene.backgrounds: expected some of {BACKGROUNDS}, "
                f"got {list(scene.backgrounds)}"
            )
        self.p, self.max_long_side = p, max_long_side
        self.perspective, self.bend, self.scene, self.camera = perspective, bend, scene, camera
        turn = (-perspective.max_roll, perspective.max_roll)
        linear = {"mask_interpolation": cv2.INTER_LINEAR, "fit_output": True}  # coverage stays antialiased
        self._view = A.Compose(
            [
                A.Sequential(
                    [
                        A.Perspective(scale=perspective.scale, keep_size=False, p=1.0, **linear),
                        A.Affine(rotate=turn, p=1.0, **linear),
                    ],
                    p=perspective.p,
                )
            ],
            keypoint_params=_KEYPOINTS,
        )
        self._ops: dict[int, A.Compose] = {}  # by the photo's long side, in steps of 2 ** (1 / 8)
        self._pixel_ops(1024)  # albumentations refuses its own bad values at start, not in a worker
        self.set_random_seed(0)

    def set_random_seed(self, seed: int) -> None:
        """Re-seed the draws (per sample, through ``TrainTransform.set_random_seed``)."""
        self._rng = np.random.default_rng([seed, _STREAM])

    def __call__(
        self, image: npt.NDArray[np.uint8], polygons: Sequence[npt.NDArray[np.floating[Any]]]
    ) -> tuple[npt.NDArray[np.uint8], list[npt.NDArray[np.float32]]] | None:
        """With probability ``p``, :meth:`render`; else None."""
        if self.p <= 0.0 or self._rng.random() >= self.p:
            return None
        return self.render(image, polygons)

    def render(
        self, image: npt.NDArray[np.uint8], polygons: Sequence[npt.NDArray[np.floating[Any]]]
    ) -> tuple[npt.NDArray[np.uint8], list[npt.NDArray[np.float32]]]:
        """Photograph the (h, w, 3) uint8 page: the (H, W, 3) photo and the (K, 2) polygons in its px, in
        the same order (K or more points each: a bent outline is densified)."""
        rng = self._rng
        scale = 1.0 if self.max_long_side is None else min(1.0, self.max_long_side / max(image.shape[:2]))
        if scale < 1.0:
            image = cv2.resize(image, (0, 0), fx=scale, fy=scale, interpolation=cv2.INTER_AREA)  # type: ignore[assignment]
            polygons = [np.asarray(p, np.float64) * scale for p in polygons]
        warp = self.draw_bend(image.shape[1], image.shape[0])
        page, coverage = remap_page(image, warp)
        bent = [warp.map_polygon(np.asarray(p, np.float64)) for p in polygons]
        points = np.concatenate(bent) if bent else np.zeros((0, 2), np.float32)
        self._view.set_random_seed(int(rng.integers(_SEEDS)))
        seen = self._view(image=page, mask=coverage, keypoints=points - 0.5)
        surface = background(
            rng,
            self.scene.backgrounds[int(rng.integers(len(self.scene.backgrounds)))],
            seen["mask"],
            rng.uniform(*self.scene.drop_shadow),
        )
        photo = composite(seen["image"], seen["mask"], surface)
        if rng.random() < self.scene.p_light:
            photo = uneven_light(rng, photo, rng.uniform(*self.scene.light))
        ops = self._pixel_ops(max(photo.shape[:2]))
        ops.set_random_seed(int(rng.integers(_SEEDS)))
        moved = np.asarray(seen["keypoints"], np.float32)[:, :2] + 0.5
        return ops(image=photo)["image"], np.split(moved, np.cumsum([len(p) for p in bent])[:-1])

    def draw_bend(self, width: int, height: int) -> PageWarp:
        """Draw the bend and the margins for a ``width`` x ``height`` page."""
        rng = self._rng
        bend = Bend(float(width), float(height))
        if rng.random() < self.bend.p:
            amp = rng.uniform(*self.bend.amplitude, 2) * rng.choice([-1.0, 1.0], 2) * (height, width)
            periods, phases = rng.uniform(*self.bend.periods, 2), rng.uniform(0, 2 * math.pi, 2)
            bend = Bend(width, height, amp[0], periods[0], phases[0], amp[1], periods[1], phases[1])
            if bend.lipschitz() > 0.5:  # keep the page from folding over itself
                amp *= 0.5 / bend.lipschitz()
                bend = Bend(width, height, amp[0], periods[0], phases[0], amp[1], periods[1], phases[1])
        outline = np.array([[0, 0], [width, 0], [width, height], [0, height]], np.float64)
        placed = PageWarp(bend, np.eye(3), (1, 1)).map_points(densify(outline, 16.0))
        lo, hi = placed.min(axis=0), placed.max(axis=0)
        margins = np.maximum(rng.uniform(*self.scene.margin, 4) * max(width, height), EDGE)  # l, t, r, b
        shift = np.array([[1.0, 0.0, margins[0] - lo[0]], [0.0, 1.0, margins[1] - lo[1]], [0.0, 0.0, 1.0]])
        size = np.ceil(hi - lo + margins[:2] + margins[2:]).astype(int)
        return PageWarp(bend, shift, (int(size[0]), int(size[1])))

    def _pixel_ops(self, long_side: int) -> A.Compose:
        """The light and camera ops for a photo of about ``long_side`` px (blur lengths are given at 1024
        px; within 5 %: building them costs half a photo, so each size step is built once)."""
        step = round(8 * math.log2(long_side))
        if step in self._ops:
            return self._ops[step]
        scene, cam = self.scene, self.camera
        px = 2 ** (step / 8) / 1024.0
        sigma = (cam.defocus[0] * px / 2.0, cam.defocus[1] * px / 2.0)  # a disk of radius r: sigma r / 2
        length = tuple(max(3, int(round(v * px)) | 1) for v in cam.motion)  # odd kernel sides
        blur = cam.p_defocus + cam.p_motion
        self._ops[step] = A.Compose(
            [
                A.RandomShadow(
                    shadow_roi=(0, 0, 1, 1),
                    num_shadows_limit=(1, 1),
                    shadow_intensity_range=scene.shadow,
                    p=scene.p_shadow,
                ),
                A.MultiplicativeNoise(
                    multiplier=(1 - cam.cast, 1 + cam.cast), per_channel=True, p=cam.p_cast
                ),
                A.OneOf(
                    [
                        A.GaussianBlur(sigma_limit=sigma, p=cam.p_defocus),
                        A.MotionBlur(blur_limit=length, p=cam.p_motion),
                    ],
                    p=min(1.0, blur),  # each its own chance, one at most
                )
                if blur > 0  # OneOf divides by its choices' total chance
                else A.NoOp(),
                A.GaussNoise(
                    std_range=(cam.noise[0] / 255.0, cam.noise[1] / 255.0),
                    noise_scale_factor=0.5,  # demosaicing spreads a sensor's noise over 2 x 2 pixels
                    p=cam.p_noise,
                ),
                A.ImageCompression(quality_range=cam.jpeg_quality, p=cam.p_jpeg),
            ]
        )
        return self._ops[step]


def _check_ranges(key: str, params: Any) -> None:
    """Refuse a range given as [max, min] (the config check types each end, not their order)."""
    for field in fields(params):
        value = getattr(params, field.name)
        if not isinstance(value, str) and isinstance(value, Sequence) and len(value) == 2:
            lo, hi = value
            if isinstance(lo, int | float) and isinstance(hi, int | float) and lo > hi:
                raise ValueError(
                    f"data.train_transform.photo.{key}.{field.name}: expected [min, max], got {list(value)}"
                )
