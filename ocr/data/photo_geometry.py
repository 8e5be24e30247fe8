"""The bend of the photo augmentation: a page bent and laid on a larger canvas (albumentations has no bend).

One ``cv2.remap`` per sample: canvas point ``q`` sees bent-page point ``r = H^-1 q`` (``H``: the placement)
and ``r`` shows flat-page point ``s = r + d(r)`` (``d``: a smooth sinusoidal bend), evaluated every ``GRID``
px and interpolated. Points go forward exactly: ``d`` is inverted by fixed-point iteration (``|grad d| <
1``), then ``H`` applies.

Coordinates are continuous (pixel ``i`` spans ``[i, i + 1)``), as in ``ocr.data.warp``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

__all__ = ["EDGE", "GRID", "Bend", "PageWarp", "densify", "inverse_map", "remap_page"]

GRID = 8  # px between the nodes of the coarse inverse map
EDGE = 2 * GRID  # px: the page keeps this far off the canvas edge, where the map is clamped
_SAG = 0.2  # px: the most a densified edge may depart from the bent curve between two points


@dataclass(frozen=True)
class Bend:
    """Displacement ``d(r) = (ax sin(2 pi kx ry / h + px), ay sin(2 pi ky rx / w + py))`` (px) on a
    ``w`` x ``h`` page: rows wave up and down across it, columns left and right down it. Zero amplitudes:
    flat."""

    width: float
    height: float
    amp_x: float = 0.0
    periods_x: float = 0.0
    phase_x: float = 0.0
    amp_y: float = 0.0
    periods_y: float = 0.0
    phase_y: float = 0.0

    @property
    def flat(self) -> bool:
        return self.amp_x == 0.0 and self.amp_y == 0.0

    @property
    def frequencies(self) -> tuple[float, float]:
        """(wx, wy) in radians per px."""
        return 2.0 * math.pi * self.periods_x / self.height, 2.0 * math.pi * self.periods_y / self.width

    def displacement(self, points: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """(..., 2) bent-page px -> (..., 2) displacement ``d`` (px)."""
        wx, wy = self.frequencies
        dx = self.amp_x * np.sin(wx * points[..., 1] + self.phase_x)
        dy = self.amp_y * np.sin(wy * points[..., 0] + self.phase_y)
        return np.stack([dx, dy], axis=-1)

    def lipschitz(self) -> float:
        """Upper bound of ``|grad d|`` (the fixed-point iteration's contraction factor)."""
        wx, wy = self.frequencies
        return abs(self.amp_x) * wx + abs(self.amp_y) * wy

    def curvature(self) -> float:
        """Upper bound of ``|d''|`` (1/px): how fast a straight page edge bends."""
        wx, wy = self.frequencies
        return abs(self.amp_x) * wx * wx + abs(self.amp_y) * wy * wy

    def invert(self, points: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """(N, 2) flat-page px ``s`` -> bent-page px ``r`` with ``r + d(r) = s`` (to 1e-6 px); a bend that
        does not contract (``|grad d| >= 0.9``) is refused."""
        if self.flat:
            return points
        if self.lipschitz() >= 0.9:
            raise ValueError(
                f"bend {self}: |grad d| = {self.lipschitz():.2f}, expected < 0.9 (it would fold)"
            )
        r = points - self.displacement(points)
        for _ in range(200):
            nxt = points - self.displacement(r)
            done = np.max(np.abs(nxt - r), initial=0.0) < 1e-6
            r = nxt
            if done:
                break
        return r


@dataclass(frozen=True)
class PageWarp:
    """A page (flat-page px) bent by ``bend``, then placed by ``homography`` (bent-page px -> canvas px)
    on a ``canvas`` = (width, height) image."""

    bend: Bend
    homography: npt.NDArray[np.float64]  # (3, 3)
    canvas: tuple[int, int]

    def map_points(self, points: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """(N, 2) flat-page px -> (N, 2) canvas px (exact, up to the bend's iteration tolerance)."""
        bent = self.bend.invert(np.asarray(points, np.float64).reshape(-1, 2))
        homogeneous = np.concatenate([bent, np.ones((len(bent), 1))], axis=1) @ self.homography.T
        return homogeneous[:, :2] / homogeneous[:, 2:3]

    def map_polygon(self, polygon: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
        """(K, 2) flat-page px -> (M, 2) canvas px, ``M >= K``: the edges are densified first when the page
        is bent, so that the mapped polygon follows the curved outline within ``_SAG`` px."""
        points = np.asarray(polygon, np.float64).reshape(-1, 2)
        if not self.bend.flat and len(points) >= 2 and np.isfinite(points).all():
            curvature = self.bend.curvature()
            points = densify(points, math.sqrt(8.0 * _SAG / curvature) if curvature > 0 else math.inf)
        return self.map_points(points).astype(np.float32)


def densify(points: npt.NDArray[np.float64], max_segment: float) -> npt.NDArray[np.float64]:
    """(K, 2) closed polygon -> (M, 2): the same corners, in order, with points added along each edge so
    that no segment is longer than ``max_segment`` px."""
    nxt = np.roll(points, -1, axis=0)
    lengths = np.linalg.norm(nxt - points, axis=1)
    pieces = np.maximum(1, np.ceil(lengths / max_segment)).astype(np.int64)
    if pieces.max() == 1:
        return points
    out = []
    for start, end, n in zip(points, nxt, pieces.tolist(), strict=True):
        t = np.arange(n, dtype=np.float64)[:, None] / n
        out.append(start + t * (end - start))
    return np.concatenate(out, axis=0)


def inverse_map(warp: PageWarp) -> npt.NDArray[np.float32]:
    """The remap's (H, W, 2) float32 map: for each canvas pixel, the (x, y) flat-page pixel index it reads
    (OpenCV's convention, centres at integers), from a coarse grid that ``cv2.resize`` interpolates exactly
    between nodes at ``(i + 0.5) * W / gw``; the outer half cell is clamped, hence ``EDGE``."""
    width, height = warp.canvas
    gw, gh = -(-width // GRID) + 1, -(-height // GRID) + 1
    xs = (np.arange(gw, dtype=np.float64) + 0.5) * (width / gw)
    ys = (np.arange(gh, dtype=np.float64) + 0.5) * (height / gh)
    nodes = np.stack(np.meshgrid(xs, ys), axis=-1)  # (gh, gw, 2) canvas px
    inv = np.linalg.inv(warp.homography)
    homogeneous = nodes @ inv[:2, :2].T + inv[:2, 2]
    w = nodes @ inv[2, :2] + inv[2, 2]
    bent = homogeneous / w[..., None]
    flat = bent + warp.bend.displacement(bent) - 0.5  # pixel index
    return cv2.resize(flat.astype(np.float32), (width, height), interpolation=cv2.INTER_LINEAR)  # type: ignore[return-value]


def remap_page(
    image: npt.NDArray[np.uint8], warp: PageWarp
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8]]:
    """Resample an (h, w, 3) uint8 page onto the canvas: the (H, W, 3) pixels premultiplied by the
    (H, W) uint8 coverage (255 on the page, antialiased along its outline), and the coverage."""
    # fixed-point maps (1/32 px, OpenCV's own interpolation precision) and one 4-channel remap: a remap
    # costs about the same for 1 channel as for 4
    xy, weights = cv2.convertMaps(inverse_map(warp), None, cv2.CV_16SC2)  # type: ignore[call-overload]
    rgba = cv2.cvtColor(image, cv2.COLOR_RGB2RGBA)  # alpha 255
    out = cv2.remap(rgba, xy, weights, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    return cv2.cvtColor(out, cv2.COLOR_RGBA2RGB), cv2.extractChannel(out, 3)  # type: ignore[return-value]
