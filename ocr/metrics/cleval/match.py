"""CLEval instance matching and character scoring on precomputed GT x detection matrices (pure numpy)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["PairTables", "dont_care_detections", "match_matrix"]

BoolMat = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class PairTables:
    """Everything matching needs about one image: (G, D) float32 ``area_precision`` (intersection / detection
    area), (G, D) ``pcc_count`` (GT centres inside each detection), (G,) ``gt_dc`` and the area-precision
    ``threshold`` (0.3 in the paper)."""

    area_precision: npt.NDArray[np.float32]
    pcc_count: npt.NDArray[np.int64]
    gt_dc: BoolMat
    threshold: float

    @property
    def ap_ok(self) -> BoolMat:
        """(G, D) area precision meets the constraint, compared in float32 like the reference."""
        return self.area_precision >= np.float32(self.threshold)


def _ap_sum(tables: PairTables, rows: BoolMat) -> npt.NDArray[np.float64]:
    """(D,) sum over the masked GT rows of area precision, float32 values accumulated in float64."""
    return np.where(rows, tables.area_precision, 0.0).astype(np.float64).sum(axis=0)


def dont_care_detections(tables: PairTables) -> BoolMat:
    """(D,) detections that fall mostly on don't-care regions and are left out of scoring."""
    num_det = tables.area_precision.shape[1]
    if not tables.gt_dc.any():
        return np.zeros(num_det, dtype=bool)
    dc = tables.gt_dc[:, None]
    on_one = (tables.ap_ok & dc).any(axis=0)
    spread = _ap_sum(tables, dc & (tables.pcc_count > 0)) >= tables.threshold
    return on_one | spread


def match_matrix(tables: PairTables, det_valid: BoolMat) -> BoolMat:
    """(G, D) union of the one-to-one, one-to-many (split) and many-to-one (merge) matches."""
    gt_valid = ~tables.gt_dc
    qual = tables.ap_ok & (tables.pcc_count > 0)  # (G, D)
    # One-to-one counts candidates over all boxes, don't-care ones included (reference rule).
    one = qual & (qual.sum(axis=1, keepdims=True) == 1) & (qual.sum(axis=0, keepdims=True) == 1)
    one &= gt_valid[:, None] & det_valid[None, :]

    split_cand = qual & det_valid[None, :] & gt_valid[:, None]
    split = split_cand & (split_cand.sum(axis=1, keepdims=True) >= 2)

    merge_cand = (tables.pcc_count > 0) & gt_valid[:, None] & det_valid[None, :]
    merge_ok = (merge_cand.sum(axis=0) >= 2) & (_ap_sum(tables, merge_cand) >= tables.threshold)
    merge = merge_cand & merge_ok[None, :]
    return one | split | merge
