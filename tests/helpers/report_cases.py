"""Small labelled records for the results-page tests: every outcome occurs, images are tiny PNGs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from tests.helpers.cleval_cases import options, rect

OPTIONS = options()


def labelled_records(image_dir: Path, num_images: int = 4) -> list[dict[str, Any]]:
    """Per image: a matched, a split, two merged and a missed GT, a false positive and a don't-care GT."""
    records = []
    rng = np.random.default_rng(0)
    for i in range(num_images):
        image = np.full((160, 200, 3), 235, np.uint8)
        cv2.putText(image, f"receipt {i}", (10, 150), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1)
        cv2.imwrite(str(image_dir / f"r{i}.png"), image)
        gts = [rect(10, 10, 110, 30), rect(10, 40, 110, 60), rect(10, 70, 60, 90), rect(70, 70, 120, 90)]
        gts += [rect(10, 100, 110, 120), rect(130, 10, 190, 30)]
        preds = [rect(10, 10, 110, 30), rect(10, 40, 60, 60), rect(60, 40, 110, 60), rect(10, 70, 120, 90)]
        preds += [rect(140, 120, 190, 140)] * (i % 2) + [rect(130, 10, 190, 30)]
        records.append(
            {
                "image_id": f"r{i}.png",
                "polygons": preds[: len(preds) - i // 2],  # images 2, 3 also miss the don't-care box
                "scores": [0.9] * (len(preds) - i // 2),
                "gt_polygons": gts,
                "gt_ignore": [False] * 5 + [True],
                "gt_texts": [None] * 6,
                "prob_map": (rng.random((64, 80)) * 255).astype(np.uint8),
            }
        )
    return records


def report_data(html: str) -> dict[str, Any]:
    """The JSON the page renders from."""
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    assert match is not None, "report-data script not found"
    return json.loads(match.group(1))
