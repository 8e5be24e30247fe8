"""Vectorised geometry of one CLEval image: area-precision matrix and pseudo-character inclusion.

Area and point inclusion use coordinates truncated towards zero, as the reference does; character counts
and centres use the given coordinates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import shapely

from ocr.metrics.cleval import competition
from ocr.metrics.cleval.area import QuadSet, intersection_areas
from ocr.metrics.cleval.boxes import (
    aspect_ratios,
    box_sides,
    char_centres,
    fp_char_counts,
    points_in_polygons,
    pseudo_char_counts,
    reading_quads,
)
from ocr.metrics.cleval.options import CLEvalOptions

__all__ = ["ImageGeometry", "measure_image"]

F64 = npt.NDArray[np.float64]
IntArr = npt.NDArray[np.intp]
BoolArr = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class ImageGeometry:
    """Per-image matrices, G ground-truth boxes by D detections, H centre-inside-detection hits.
    ``area_precision`` is computed only where it can change a match: pairs that share a centre, and every pair
    with a don't-care GT; it is 0 elsewhere."""

    area_precision: npt.NDArray[np.float32]  # (G, D) intersection / detection area
    pcc_count: npt.NDArray[np.int64]  # (G, D) centres of GT g inside detection d
    hit_gt: IntArr  # (H,)
    hit_pcc: IntArr  # (H,) global centre index
    hit_det: IntArr  # (H,)
    gt_chars: npt.NDArray[np.int64]  # (G,) characters of each GT
    det_fp_chars: npt.NDArray[np.int64]  # (D,) cost of each detection if unmatched


def _bbox_pairs(a: F64, b: F64) -> tuple[IntArr, IntArr]:
    """Index pairs of (N, 4) and (M, 4) [x0, y0, x1, y1] boxes that overlap or touch."""
    ok = (
        (a[:, None, 0] <= b[None, :, 2])
        & (b[None, :, 0] <= a[:, None, 2])
        & (a[:, None, 1] <= b[None, :, 3])
        & (b[None, :, 1] <= a[:, None, 3])
    )
    rows, cols = np.nonzero(ok)
    return rows, cols


def _subtract_dont_care(gt: QuadSet, gt_dc: BoolArr) -> None:
    """Remove from don't-care GTs the area they share with ordinary GTs (the reference's rule)."""
    dc_idx, care_idx = np.flatnonzero(gt_dc), np.flatnonzero(~gt_dc)
    a, b = _bbox_pairs(gt.bbox[dc_idx], gt.bbox[care_idx])
    if a.size == 0:
        return
    shapes = gt.shapes()
    overlap = shapely.area(shapely.intersection(shapes[dc_idx[a]], shapes[care_idx[b]])) > 0
    for k in np.unique(a[overlap]):
        others = shapes[care_idx[b[overlap & (a == k)]]]
        gt.replace(int(dc_idx[k]), shapely.difference(shapes[dc_idx[k]], shapely.union_all(others)))


def _pcc_hits(xy: F64, owner: IntArr, num_gt: int, det: QuadSet) -> tuple[IntArr, IntArr, IntArr]:
    """(gt, centre, det) of every centre inside a detection."""
    empty = np.zeros(0, dtype=np.intp)
    if xy.size == 0 or len(det.verts) == 0:
        return empty, empty, empty
    counts = np.bincount(owner, minlength=num_gt)
    starts = np.cumsum(counts) - counts
    has = np.flatnonzero(counts)
    pcc_box = np.full((num_gt, 4), [np.inf, np.inf, -np.inf, -np.inf])
    pcc_box[has, :2] = np.minimum.reduceat(xy, starts[has], axis=0)
    pcc_box[has, 2:] = np.maximum.reduceat(xy, starts[has], axis=0)
    g, d = _bbox_pairs(pcc_box, det.bbox)
    reps = counts[g]
    pair = np.repeat(np.arange(g.size), reps)
    pcc = starts[g][pair] + np.arange(pair.size) - np.repeat(np.cumsum(reps) - reps, reps)
    inside = points_in_polygons(det.verts, d[pair], xy[pcc])
    return g[pair][inside], pcc[inside], d[pair][inside]


def _pad_to(verts: F64, kmax: int) -> F64:
    """(N, kmax, 2) polygons padded by repeating each last vertex."""
    if verts.shape[1] == kmax:
        return verts
    return np.concatenate([verts, np.repeat(verts[:, -1:], kmax - verts.shape[1], axis=1)], axis=1)


def _upstream_chars(
    verts: F64, counts: IntArr, gt_dc: BoolArr, texts: Sequence[str | None], options: CLEvalOptions
) -> tuple[npt.NDArray[np.int64], F64, IntArr]:
    """(G,) characters of the GT boxes, their (P, 2) centres and (P,) the GT of each centre."""
    quads, chain = reading_quads(verts, counts, is_gt=True)
    ar = aspect_ratios(*box_sides(verts, counts, quads, chain))
    chars = pseudo_char_counts(ar)
    for i, text in enumerate(texts):
        if text is not None and not gt_dc[i]:
            chars[i] = len(text if options.case_sensitive else text.upper())
    xy, owner = char_centres(verts, counts, quads, chain, chars, ar, options.vertical_aspect_ratio_threshold)
    return chars, xy, owner


def measure_image(
    det_verts: F64,
    det_counts: IntArr,
    gt_verts: F64,
    gt_counts: IntArr,
    gt_dc: BoolArr,
    gt_texts: Sequence[str | None],
    options: CLEvalOptions,
) -> ImageGeometry:
    """Geometry of one image for :func:`ocr.metrics.cleval.evaluate.evaluate_image`, from padded polygons
    (:func:`ocr.metrics.cleval.boxes.pad_polygons`)."""
    if options.mode == "competition":
        # One call for both sides: the cost is mostly per call, not per box.
        kmax = max(gt_verts.shape[1], det_verts.shape[1])
        ar = competition.min_area_aspect_ratios(
            np.concatenate([_pad_to(gt_verts, kmax), _pad_to(det_verts, kmax)]),
            np.concatenate([gt_counts, det_counts]),
        )
        chars = competition.pseudo_char_counts(ar[: len(gt_counts)])
        xy, owner = competition.pseudo_char_centres(gt_verts, gt_counts, chars)
        det_fp_chars = competition.fp_char_counts(ar[len(gt_counts) :])
    else:
        chars, xy, owner = _upstream_chars(gt_verts, gt_counts, gt_dc, gt_texts, options)
        quads, chain = reading_quads(det_verts, det_counts, is_gt=False)
        det_fp_chars = fp_char_counts(aspect_ratios(*box_sides(det_verts, det_counts, quads, chain)))

    gt, det = QuadSet(np.trunc(gt_verts), gt_counts), QuadSet(np.trunc(det_verts), det_counts)
    num_gt, num_det = len(gt_counts), len(det_counts)
    hit_gt, hit_pcc, hit_det = _pcc_hits(xy, owner, num_gt, det)
    pcc_count = np.bincount(hit_gt * num_det + hit_det, minlength=num_gt * num_det).reshape(num_gt, num_det)

    need = pcc_count > 0
    if gt_dc.any():
        _subtract_dont_care(gt, gt_dc)
        dc_g, dc_d = _bbox_pairs(gt.bbox[gt_dc], det.bbox)
        need[np.flatnonzero(gt_dc)[dc_g], dc_d] = True
    g, d = np.nonzero(need)
    inter = intersection_areas(gt, det, g, d)
    ap = np.zeros(pcc_count.shape, dtype=np.float32)
    det_area = det.areas[d]
    ap[g, d] = np.where(det_area > 0, inter / np.where(det_area > 0, det_area, 1.0), 0.0)
    return ImageGeometry(ap, pcc_count, hit_gt, hit_pcc, hit_det, chars, det_fp_chars)
