"""Polygon sanitation: the one place where annotation polygons are repaired or removed, with counts.

Every polygon goes through the same steps; the first that fails names the reason: ``none``, ``malformed`` (not
(K, 2) numbers), ``empty``, ``non_finite``, ``out_of_range`` (beyond +-1e9 px: a unit or encoding error),
``too_few_points`` (fewer than 3 distinct, consecutive duplicates dropped), ``zero_area`` (also after repair),
``out_of_image`` (no area left inside ``[0, width] x [0, height]``), ``too_small`` (the shorter side of its
minimum-area rectangle below ``min_size``). Kept polygons count their repairs: ``self_intersecting_repaired``
(points in convex position become their hull, anything else the largest part of shapely's ``make_valid``) and
``clipped``. Don't-care polygons are sanitised alike and keep their flag."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import shapely
from shapely.geometry import MultiPoint, box
from shapely.geometry import Polygon as ShapelyPolygon
from shapely.geometry.polygon import orient

from ocr.polygons import (
    clip_polygons_to_box,
    compact_points,
    convex_min_rect_short_sides,
    group_by_point_count,
    is_convex,
    signed_areas,
    winds_once,
)

if TYPE_CHECKING:
    from ocr.types import Polygon

__all__ = ["REASONS", "merge_counts", "sanitize_polygons", "sanitize_words"]

REASONS: tuple[str, ...] = (
    "none",
    "empty",
    "too_few_points",
    "non_finite",
    "too_small",
    "zero_area",
    "out_of_image",
    "self_intersecting_repaired",
    "clipped",
    "malformed",
    "out_of_range",
)
_MIN_AREA = 1e-6
_FAST_REASONS = (None, "zero_area", "out_of_image", "too_small")  # by code in _clean_group
# Beyond this no image exists, and float64 areas and intersections lose their precision.
_COORD_LIMIT = 1e9


def sanitize_polygons(
    polygons: Sequence[Any], ignore: Sequence[bool], width: int, height: int, min_size: float = 1.0
) -> tuple[list[Polygon], list[bool], dict[str, int]]:
    """Repair or remove polygons (anything, (K, 2) expected) for a ``width`` x ``height`` image; never
    raises on geometry (ValueError: not one ``ignore`` flag per polygon). ``min_size`` <= 0 disables
    ``too_small``. Returns the kept (K, 2) float32 polygons, their flags and the non-zero counts by reason."""
    kept, flags, _, counts = sanitize_words(polygons, ignore, [None] * len(polygons), width, height, min_size)
    return kept, flags, counts


def sanitize_words(
    polygons: Sequence[Any],
    ignore: Sequence[bool],
    texts: Sequence[str | None],
    width: int,
    height: int,
    min_size: float = 1.0,
) -> tuple[list[Polygon], list[bool], list[str | None], dict[str, int]]:
    """:func:`sanitize_polygons` that keeps each transcription with its polygon."""
    results = _sanitize_each(polygons, ignore, width, height, min_size)
    kept, flags, kept_texts = [], [], []
    for (poly, _), is_ignored, text in zip(results, ignore, texts, strict=True):
        if poly is not None:
            kept.append(poly)
            flags.append(bool(is_ignored))
            kept_texts.append(text)
    return kept, flags, kept_texts, dict(Counter(reason for _, reason in results if reason is not None))


def _sanitize_each(
    polygons: Sequence[Any], ignore: Sequence[bool], width: int, height: int, min_size: float
) -> list[tuple[Polygon | None, str | None]]:
    """Per input polygon: the repaired polygon (None when removed) and the reason (None when untouched).
    Polygons are processed in groups of equal vertex count; each one's result depends only on itself."""
    if len(polygons) != len(ignore):
        raise ValueError(
            f"sanitize: expected one ignore flag per polygon, got {len(ignore)} flags "
            f"for {len(polygons)} polygons"
        )
    w, h, min_size = float(width), float(height), float(min_size)
    plain = _plain_stack(polygons)
    if plain is not None:  # the common case (a transform's output): one array, nothing to prepare
        return _clean_group(plain, w, h, min_size)
    results: list[tuple[Polygon | None, str | None]] = [(None, None)] * len(polygons)
    read, read_at = [], []
    for i, poly in enumerate(polygons):
        pts = None if poly is None else _as_points(poly)
        if pts is None or len(pts) == 0:
            results[i] = (None, "none" if poly is None else "malformed" if pts is None else "empty")
        else:
            read.append(pts)
            read_at.append(i)
    ready, ready_at = [], []
    for rows, stack in group_by_point_count(read):
        for row, (pts, reason) in zip(rows.tolist(), _prepare_group(stack), strict=True):
            if pts is None:
                results[read_at[row]] = (None, reason)
            else:
                ready.append(pts)
                ready_at.append(read_at[row])
    for rows, stack in group_by_point_count(ready):
        for row, result in zip(rows.tolist(), _clean_group(stack, w, h, min_size), strict=True):
            results[ready_at[row]] = result
    return results


def _plain_stack(polygons: Sequence[Any]) -> npt.NDArray[np.float64] | None:
    """The polygons as one (N, K, 2) float64 array when they all have the same K >= 3 points, finite,
    within the coordinate limit and no point equal to the next; None otherwise (or when there are none)."""
    try:
        stack = np.asarray(polygons, dtype=np.float64)
    except (ValueError, TypeError):
        return None
    if stack.ndim != 3 or stack.shape[0] == 0 or stack.shape[1] < 3 or stack.shape[2] != 2:
        return None
    if not np.isfinite(stack).all() or np.abs(stack).max() > _COORD_LIMIT:
        return None
    if (stack == np.roll(stack, -1, axis=1)).all(axis=2).any():
        return None
    return stack


def merge_counts(*counts: Mapping[str, int]) -> dict[str, int]:
    """Sum per-reason counts; only non-zero entries are kept."""
    return dict(sum(map(Counter, counts), Counter()))  # Counter's + keeps the positive counts


def _prepare_group(stack: npt.NDArray[np.float64]) -> list[tuple[npt.NDArray[np.float64] | None, str | None]]:
    """Checks that need no geometry, on (N, K, 2) polygons of one point count: per polygon (K >= 3, 2)
    distinct points or None, and the removal reason or None."""
    # numpy's stubs type all/any(axis=...) as bool | array; these are (N,) arrays.
    finite: npt.NDArray[np.bool_] = np.isfinite(stack).all(axis=(1, 2))  # type: ignore[assignment]
    repeats = (stack == np.roll(stack, -1, axis=1)).all(axis=2).any(axis=1)
    huge: npt.NDArray[np.bool_] = (  # type: ignore[assignment]
        np.abs(np.where(np.isfinite(stack), stack, 0.0)) > _COORD_LIMIT
    ).any(axis=(1, 2))
    out: list[tuple[npt.NDArray[np.float64] | None, str | None]] = []
    for k, pts in enumerate(stack):
        if not finite[k] or huge[k]:
            out.append((None, "non_finite" if not finite[k] else "out_of_range"))
            continue
        pts = _drop_repeats(pts) if repeats[k] else pts
        out.append((pts, None) if len(pts) >= 3 else (None, "too_few_points"))
    return out


def _clean_group(
    pts: npt.NDArray[np.float64], width: float, height: float, min_size: float
) -> list[tuple[Polygon | None, str | None]]:
    """Sanitise (N, K, 2) polygons with the same point count: the simple convex ones (inside, outside or
    across the image border, as a training crop sees them) as arrays, the others one by one; the
    reasons and shapes are ``_clean``'s."""
    lo, hi = pts.min(axis=1), pts.max(axis=1)  # (N, 2) bounding boxes
    inside = (lo.min(axis=1) >= 0) & (hi[:, 0] <= width) & (hi[:, 1] <= height)
    # Clipping leaves no area: most polygons of an image fall outside a training crop.
    outside = (hi[:, 0] <= 0) | (hi[:, 1] <= 0) | (lo[:, 0] >= width) | (lo[:, 1] >= height)
    simple_convex = is_convex(pts, strict=True)
    if pts.shape[1] > 4:  # a star turns the same way everywhere too (is_convex)
        simple_convex &= winds_once(pts)
    area = np.abs(signed_areas(pts))
    across = np.flatnonzero(simple_convex & ~inside & ~outside & (area > _MIN_AREA))
    clipped, counts = _clip_convex(pts[across], width, height)
    left = (counts >= 3) & (np.abs(signed_areas(clipped)) > _MIN_AREA)
    short = np.zeros(len(pts))
    short[inside & simple_convex] = convex_min_rect_short_sides(pts[inside & simple_convex])
    if left.any():
        short[across[left]] = convex_min_rect_short_sides(clipped[left])
    lost = outside.copy()
    lost[across[~left]] = True
    # 0: kept; 1-3: removed, for _FAST_REASONS[code]; 4: not simple convex, _clean decides
    codes = np.select(
        [~simple_convex, area <= _MIN_AREA, lost, (short < min_size) & (min_size > 0)],
        [4, 1, 2, 3],
        default=0,
    ).tolist()
    ends = zip(across.tolist(), counts.tolist(), strict=True)
    parts = {row: clipped[i, :count] for i, (row, count) in enumerate(ends)}
    out: list[tuple[Polygon | None, str | None]] = []
    for k, code in enumerate(codes):
        if code == 0:  # kept: cut to the image when it reached across the border
            out.append(
                (parts[k].astype(np.float32), "clipped") if k in parts else (pts[k].astype(np.float32), None)
            )
        elif code < 4:
            out.append((None, _FAST_REASONS[code]))
        else:
            out.append(_clean_safe(pts[k], width, height, min_size))
    return out


def _clip_convex(
    pts: npt.NDArray[np.float64], width: float, height: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """(N, K, 2) simple convex polygons clipped to the image: (N, M, 2) points, each row's first
    ``counts[n]`` distinct (no point equal to the next), the rest repeating the last, and (N,) counts."""
    clipped, counts = clip_polygons_to_box(pts, 0.0, 0.0, width, height)
    column = np.arange(clipped.shape[1])
    following = np.where(column + 1 < counts[:, None], column + 1, 0)
    nxt = clipped[np.arange(len(clipped))[:, None], following]
    distinct = (clipped != nxt).any(axis=2) & (column < counts[:, None])
    return compact_points(clipped, distinct)


def _as_points(poly: Any) -> npt.NDArray[np.float64] | None:
    try:
        arr = np.asarray(poly, dtype=np.float64)
    except (ValueError, TypeError):
        return None
    if arr.ndim == 1 and arr.size % 2 == 0:
        return arr.reshape(-1, 2)
    if arr.ndim == 2 and arr.shape[1] == 2:
        return arr
    return None


def _drop_repeats(pts: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Drop points equal to their successor, cyclically (so a closing point equal to the first goes)."""
    keep = (pts != np.roll(pts, -1, axis=0)).any(axis=1)
    if keep.all():
        return pts
    return pts[keep] if keep.any() else pts[:1]


def _clean_safe(
    pts: npt.NDArray[np.float64], width: float, height: float, min_size: float
) -> tuple[Polygon | None, str | None]:
    try:
        return _clean(pts, width, height, min_size)
    except (shapely.errors.GEOSException, ValueError, FloatingPointError):
        return None, "malformed"


def _clean(
    pts: npt.NDArray[np.float64], width: float, height: float, min_size: float
) -> tuple[Polygon | None, str | None]:
    inside = bool(pts.min() >= 0 and pts[:, 0].max() <= width and pts[:, 1].max() <= height)
    poly = ShapelyPolygon(pts)
    repaired = not poly.is_valid
    if repaired:
        poly = _repair(pts, poly)
        if poly is None:
            return None, "zero_area"
    elif poly.area <= _MIN_AREA:
        return None, "zero_area"
    if not inside:
        poly = _largest(poly.intersection(box(0.0, 0.0, width, height)))
        if poly is None:
            return None, "out_of_image"
    if min_size > 0 and _short_side(poly) < min_size:
        return None, "too_small"
    reason = "self_intersecting_repaired" if repaired else None if inside else "clipped"
    if inside and not repaired:
        return pts.astype(np.float32), reason
    sign = 1.0 if repaired or signed_areas(pts[None])[0] > 0 else -1.0
    oriented = orient(ShapelyPolygon(poly.exterior), sign=sign)
    return np.asarray(oriented.exterior.coords[:-1], dtype=np.float32), reason


def _repair(pts: npt.NDArray[np.float64], poly: ShapelyPolygon) -> ShapelyPolygon | None:
    hull = MultiPoint(pts).convex_hull
    if isinstance(hull, ShapelyPolygon) and len(hull.exterior.coords) - 1 == len(np.unique(pts, axis=0)):
        return hull if hull.area > _MIN_AREA else None
    return _largest(shapely.make_valid(poly))


def _largest(geom: Any) -> ShapelyPolygon | None:
    parts = [
        g for g in getattr(geom, "geoms", [geom]) if isinstance(g, ShapelyPolygon | shapely.MultiPolygon)
    ]
    polys = [p for g in parts for p in getattr(g, "geoms", [g]) if p.area > _MIN_AREA]
    return max(polys, key=lambda p: p.area) if polys else None


def _short_side(poly: ShapelyPolygon) -> float:
    hull = poly.convex_hull
    if not isinstance(hull, ShapelyPolygon):
        return 0.0
    return float(convex_min_rect_short_sides(np.asarray(hull.exterior.coords[:-1])[None])[0])
