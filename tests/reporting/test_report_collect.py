"""The probability map kept for the results page lands in the original frame."""

from __future__ import annotations

import numpy as np

from ocr.geometry import letterbox_geometry
from ocr.reporting.collect import prob_map_in_original_frame


def test_a_blob_in_input_px_lands_at_its_original_position() -> None:
    geometry, scale = letterbox_geometry(200, 100, 64)  # original 200 x 100, input 64 x 64
    prob = np.zeros((32, 32), np.float32)  # half the input resolution, as a head may return
    x, y = 150 * scale / 2, 50 * scale / 2  # original (150, 50) in map px
    prob[round(y) - 1 : round(y) + 2, round(x) - 1 : round(x) + 2] = 1.0
    small = prob_map_in_original_frame(prob, geometry, long_side=100)
    assert small.shape == (50, 100) and small.dtype == np.uint8
    ys, xs = np.nonzero(small > 128)
    assert abs(xs.mean() - 75) <= 1.5 and abs(ys.mean() - 25) <= 1.5
