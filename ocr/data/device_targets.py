"""DB training targets on the batch's device: the pixels of ``make_db_targets`` drawn in torch, batched.

The host (collate, :func:`pack_polygons`) keeps ``make_db_targets``' per-polygon decisions (offset ``D``,
drawn or masked); the device draws each pixel from its distance ``d`` to a polygon's border:
``thresh_map`` = max of ``1 - d / D`` over drawn polygons, ``prob_map`` at least ``D - 0.5`` inside a
drawn one (pyclipper rounds), ``prob_mask`` 0 on masked ones; fills use truncated coordinates, rectangles
the closed-form field. Work runs on (polygon, 16 x 16 tile) pairs in fixed-size chunks and never waits
for the device; tests/data/test_device_targets.py states the tolerances.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from ocr.data.photometric import to_device
from ocr.data.targets.geometry import AXIS_RECT, GENERAL, PolygonMeasures, measure_polygons
from ocr.types import Polygon, TargetKey, TargetParams, TargetPolygons

__all__ = ["TILE", "draw_db_targets", "pack_polygons"]

TILE = 16  # px; a polygon is drawn on the tiles its reach overlaps
# Pixel-edge evaluations per chunk: each temporary is 4 bytes per evaluation (32 MB), about ten live.
_CHUNK_EVALUATIONS = 1 << 23
_DRAWN, _MASKED = 1, 2  # TargetPolygons.roles


def pack_polygons(
    polygons: Sequence[Sequence[Polygon]],
    ignore: Sequence[Sequence[bool]],
    height: int,
    width: int,
    params: TargetParams,
) -> TargetPolygons:
    """Pad a batch's sanitised polygons (per sample, (K, 2) in input px, with their ignore flags) into
    tensors, with ``make_db_targets``'s decisions and the tiles each one reaches (worker side, in collate)."""
    counts = [len(p) for p in polygons]
    flat = [p for sample in polygons for p in sample]
    owner = np.repeat(np.arange(len(polygons)), counts)  # sample and slot of each polygon of ``flat``
    slot = np.arange(len(flat)) - np.repeat(np.cumsum([0, *counts])[:-1], counts)
    measures = measure_polygons(flat)
    rows = measures.index  # positions in ``flat`` of the measured (usable) polygons
    where = (owner[rows], slot[rows])
    flags = np.array([f for sample in ignore for f in sample], dtype=bool).reshape(-1)
    offsets = measures.area * (1.0 - params.shrink_ratio**2) / np.maximum(measures.perimeter, 1e-12)
    drawn = ~flags[rows] & (measures.area >= 1.0) & (measures.short_side >= params.min_text_size)
    shape = (len(polygons), max(counts, default=0))
    points = _padded_points(measures, where, shape)
    roles = np.zeros(shape, np.uint8)
    roles[where] = np.where(drawn, _DRAWN, _MASKED)
    reach = np.zeros(shape, np.float32)
    reach[where] = np.where(drawn, offsets, 0.0)
    rects = np.zeros((*shape, 6), np.float32)
    rects[where] = _rectangle_frames(measures)
    is_rect = rects[..., 4] > 0
    # the field reaches D (+1 px, for rounding) around a drawn polygon; the fills its box (+1 px)
    tiles = np.stack(
        [
            _tiles(points, reach + 1.0, (roles == _DRAWN) & ~is_rect, height, width),
            _tiles(points, reach + 1.0, (roles == _DRAWN) & is_rect, height, width),
            _tiles(points, np.ones_like(reach), roles > 0, height, width),
        ]
    )
    return TargetPolygons(
        torch.from_numpy(points),
        torch.from_numpy(reach),
        torch.from_numpy(roles),
        torch.from_numpy(rects),
        torch.from_numpy(tiles),
        (int(tiles[0, ..., 3].sum()), int(tiles[1, ..., 3].sum()), int(tiles[2, ..., 3].sum())),
    )


def _rectangle_frames(measures: PolygonMeasures) -> np.ndarray:
    """(N, 6) centre x, y, unit axis x, y and half sizes along the axis and its normal of the polygons
    ``measure_polygons`` calls rectangles (their threshold field is ``make_db_targets``' closed form of
    that rectangle); zeros for the others."""
    aligned = measures.kind == AXIS_RECT  # half sizes along x and y: the axis is x
    axis = np.where(aligned[:, None], [1.0, 0.0], measures.axis)
    frames = np.concatenate([measures.center, axis, measures.half], axis=1)
    return np.where((measures.kind != GENERAL)[:, None], frames, 0.0)


def _padded_points(
    measures: PolygonMeasures, where: tuple[np.ndarray, np.ndarray], shape: tuple[int, int]
) -> np.ndarray:
    """(B, N, K, 2) float32 points of the measured polygons at their (sample, slot) ``where``, K the most
    points of any; a polygon with fewer repeats its last point (an edge of length 0), padding is 0."""
    points_k = max((stacked.shape[1] for _, stacked in measures.groups), default=3)
    points = np.zeros((*shape, points_k, 2), np.float32)
    for group_rows, stacked in measures.groups:
        tail = np.repeat(stacked[:, -1:], points_k - stacked.shape[1], axis=1)
        points[where[0][group_rows], where[1][group_rows]] = np.concatenate([stacked, tail], axis=1)
    return points


def _tiles(points: np.ndarray, reach: np.ndarray, used: np.ndarray, height: int, width: int) -> np.ndarray:
    """(B, N, 4) int32 first tile column, first tile row, tile columns and tile count of the map pixels
    within ``reach`` px of each used polygon's bounding box (0 tiles for the others)."""
    lo = np.ceil(points.min(axis=2) - reach[..., None])  # (B, N, 2) first pixel
    hi = np.floor(points.max(axis=2) + reach[..., None])
    lo = np.clip(lo, 0, [width - 1, height - 1]) // TILE
    hi = np.clip(hi, 0, [width - 1, height - 1]) // TILE
    span = np.where(used[..., None], hi - lo + 1, 0)
    return np.stack([lo[..., 0], lo[..., 1], span[..., 0], span[..., 0] * span[..., 1]], -1).astype(np.int32)


def draw_db_targets(
    polygons: TargetPolygons,
    height: int,
    width: int,
    thresh_min: float,
    thresh_max: float,
    device: torch.device,
) -> dict[TargetKey, Tensor]:
    """The four DB maps of a batch on ``device``, (B, 1, height, width) float32 each."""
    batch, slots, points_k, _ = polygons.points.shape
    points = to_device(polygons.points, device).view(batch * slots, points_k, 2)
    offsets = to_device(polygons.offsets, device).view(-1)
    roles = to_device(polygons.roles, device).view(-1)
    rects = to_device(polygons.rects, device).view(-1, 6)
    tiles = to_device(polygons.tiles, device).view(3, -1, 4).long()
    pixels = batch * height * width
    # per pixel: threshold field, drawn and masked flags; one more column takes pixels beyond the map
    maps = torch.zeros((3, pixels + 1), device=device)
    maps[0] = -1.0
    per_chunk = max(1, _CHUNK_EVALUATIONS // (TILE * TILE * points_k))
    for owner, xs, ys in _tile_pixels(tiles[0], polygons.num_tiles[0], per_chunk, device):
        field = _field(xs.float(), ys.float(), points[owner], offsets[owner])[None]  # (1, C, T, T)
        _scatter_max(maps[:1], field, _flat_index(owner // slots, xs, ys, height, width, pixels))
    for owner, xs, ys in _tile_pixels(tiles[1], polygons.num_tiles[1], per_chunk * points_k, device):
        field = _rectangle_field(xs.float(), ys.float(), rects[owner], offsets[owner])[None]
        _scatter_max(maps[:1], field, _flat_index(owner // slots, xs, ys, height, width, pixels))
    for owner, xs, ys in _tile_pixels(tiles[2], polygons.num_tiles[2], per_chunk, device):
        fill = _fill(xs.float(), ys.float(), points[owner].trunc(), offsets[owner], roles[owner])
        _scatter_max(maps[1:], fill, _flat_index(owner // slots, xs, ys, height, width, pixels))
    field, drawn, masked = (maps[i, :pixels].view(batch, 1, height, width) for i in range(3))
    return {
        "prob_map": drawn,
        "prob_mask": 1.0 - masked,
        "thresh_map": thresh_min + (thresh_max - thresh_min) * field.clamp_min(0.0),
        "thresh_mask": (field > -1e-6).float(),  # as the reference: the field's border at 0
    }


def _tile_pixels(
    tiles: Tensor, num_tiles: int, per_chunk: int, device: torch.device
) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
    """Chunks of at most ``per_chunk`` (polygon, tile) pairs of (P, 4) ``tiles``: the (C,) polygon of each
    pair and the (C, T, T) x and y of the tile's pixels."""
    ends = torch.cumsum(tiles[:, 3], 0)
    step = torch.arange(TILE, device=device)
    for start in range(0, num_tiles, per_chunk):
        pair = torch.arange(start, min(start + per_chunk, num_tiles), device=device)
        owner = torch.searchsorted(ends, pair, right=True)
        local = pair - (ends[owner] - tiles[owner, 3])
        columns = tiles[owner, 2]
        x0 = (tiles[owner, 0] + local % columns) * TILE
        y0 = (tiles[owner, 1] + local // columns) * TILE
        xs = (x0[:, None, None] + step[None, None, :]).expand(-1, TILE, TILE)
        ys = (y0[:, None, None] + step[None, :, None]).expand(-1, TILE, TILE)
        yield owner, xs, ys


def _flat_index(sample: Tensor, xs: Tensor, ys: Tensor, height: int, width: int, beyond: int) -> Tensor:
    """(C, T, T) index of each pixel in the flattened (B, H, W) maps; ``beyond`` for those off the map."""
    on_map = (xs < width) & (ys < height)
    return torch.where(on_map, (sample[:, None, None] * height + ys) * width + xs, beyond)


def _scatter_max(maps: Tensor, values: Tensor, index: Tensor) -> None:
    """``maps[:, index] = max(maps[:, index], values)`` for (M, pixels + 1) maps and (M, C, T, T) values."""
    flat = index.reshape(1, -1).expand(maps.shape[0], -1)
    maps.scatter_reduce_(1, flat, values.reshape(maps.shape[0], -1), reduce="amax")


def _field(xs: Tensor, ys: Tensor, points: Tensor, offsets: Tensor) -> Tensor:
    """(C, T, T) threshold field ``1 - d / D`` of each pair's (C, K, 2) polygon at pixels ``xs``, ``ys``."""
    distance, inside = _distance_inside(xs, ys, points)
    field = 1.0 - distance / offsets.clamp_min(1e-6)[:, None, None]
    return torch.where(inside, field.clamp_min(0.0), field)


def _rectangle_field(xs: Tensor, ys: Tensor, rects: Tensor, offsets: Tensor) -> Tensor:
    """(C, T, T) threshold field of each pair's rectangle (``rects`` (C, 6)), ``make_db_targets``' closed
    form: ``max(1 + du / D, 1 + dv / D)`` clamped to [0, 1], less the distance outside over D."""
    frame = rects[:, :, None, None]  # (C, 6, 1, 1)
    dx, dy = xs - frame[:, 0], ys - frame[:, 1]
    inverse = 1.0 / offsets.clamp_min(1e-6)[:, None, None]
    du = torch.addcmul(dx * frame[:, 2], dy, frame[:, 3]).abs_().sub_(frame[:, 4]).mul_(inverse)
    dv = torch.addcmul(dy * frame[:, 2], dx, frame[:, 3], value=-1.0).abs_().sub_(frame[:, 5]).mul_(inverse)
    inside = torch.maximum(du, dv).add_(1.0).clamp_(0.0, 1.0)
    return inside.sub_(torch.hypot(du.clamp_min_(0.0), dv.clamp_min_(0.0)))


def _fill(xs: Tensor, ys: Tensor, points: Tensor, offsets: Tensor, roles: Tensor) -> Tensor:
    """(2, C, T, T): 1 in the shrunk interior of a drawn polygon, 1 inside or on a masked polygon."""
    distance, inside = _distance_inside(xs, ys, points)
    drawn, masked = (roles == _DRAWN)[:, None, None], (roles == _MASKED)[:, None, None]
    shrunk = inside & (distance >= offsets[:, None, None] - 0.5)
    covered = inside | (distance <= 0.5)  # an integer fill (cv2.fillPoly) takes pixels within 0.5 px too
    return torch.stack([drawn & shrunk, masked & covered]).float()


def _distance_inside(xs: Tensor, ys: Tensor, points: Tensor) -> tuple[Tensor, Tensor]:
    """(C, T, T) distance from each pixel to its polygon's border and whether it is inside (even-odd
    crossings, as a fill of a simple polygon); repeated points are edges of length 0."""
    start = points[:, :, None, None, :]  # (C, K, 1, 1, 2)
    edge = torch.roll(points, -1, dims=1)[:, :, None, None, :] - start
    ex, ey = edge[..., 0], edge[..., 1]  # (C, K, 1, 1)
    inverse_length2 = 1.0 / (ex * ex + ey * ey).clamp_min(1e-12)
    dx, dy = xs[:, None] - start[..., 0], ys[:, None] - start[..., 1]  # (C, K, T, T)
    cross = dx * ey - dy * ex
    along = torch.addcmul(dx * ex, dy, ey).mul_(inverse_length2).clamp_(0.0, 1.0)
    squared = torch.addcmul(dx, along, ex, value=-1.0).square_()
    squared.add_(torch.addcmul(dy, along, ey, value=-1.0).square_())
    distance = squared.amin(dim=1).sqrt_()
    # edges crossing the pixel's row (half-open, so a vertex on the row counts once) left of the pixel
    crossings = ((dy >= 0) != (dy >= ey)) & (cross * ey > 0)
    inside = crossings.sum(dim=1, dtype=torch.int32) % 2 == 1
    return distance, inside
