"""Competition mode against the receipt competition's own scorer.

Expected values come from that scorer (``../shared/fixtures/cleval_competition/``, README there). The 13
handmade cases are also copied into ``fixtures/cleval_competition_handmade.json`` so the rules are tested
without ``../shared``.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hydra.utils import instantiate

from ocr.metrics.cleval.evaluate import evaluate_dataset, evaluate_image
from ocr.metrics.cleval.metric import CLEvalMetric
from ocr.metrics.cleval.options import CLEvalOptions
from ocr.metrics.files import evaluate_files
from ocr.run.config import compose_config
from tests.helpers.paths import REPO_ROOT

HANDMADE_COPY = Path(__file__).resolve().parent / "fixtures" / "cleval_competition_handmade.json"
HANDMADE = json.loads(HANDMADE_COPY.read_text())["images"]
SHARED = REPO_ROOT.parent / "shared" / "fixtures" / "cleval_competition"
SEED_MEAN_HMEAN = {7: 0.878828, 11: 0.882367}  # the fixture README's dataset figures
METRIC_CONFIG = compose_config("train").metric


def competition_options() -> CLEvalOptions:
    """The project's default metric config: competition mode must equal the scorer without overrides."""
    assert METRIC_CONFIG["mode"] == "competition"
    return instantiate(METRIC_CONFIG)


def polygons(points: list) -> list[np.ndarray]:
    return [np.asarray(p, dtype=np.float64) for p in points]


def assert_scores(result, expected: dict, name: str) -> None:
    got = (result.precision, result.recall, result.hmean)
    want = (expected["precision"], expected["recall"], expected["hmean"])
    assert got == pytest.approx(want, abs=1e-6), name  # the scorer computes in float32


@pytest.mark.parametrize("case", HANDMADE, ids=[c["name"] for c in HANDMADE])
def test_handmade_case_matches_scorer(case: dict) -> None:
    gt = polygons(case["gt"])
    result = evaluate_image(polygons(case["pred"]), gt, [False] * len(gt), None, competition_options())
    assert_scores(result, case["expected"], case["name"])


def test_handmade_costs_of_stray_and_degenerate_boxes() -> None:
    by_name = {c["name"]: c for c in HANDMADE}
    fp = {}
    for name in ("stray_tall.jpg", "stray_wide.jpg", "stray_very_wide.jpg", "degenerate_det.jpg"):
        gt = polygons(by_name[name]["gt"])
        fp[name] = evaluate_image(
            polygons(by_name[name]["pred"]), gt, [False], None, competition_options()
        ).fp_chars
    # 20x60: 1, 60x20: 3, 400x20: 20 characters; a zero-width box: 100
    assert fp == {
        "stray_tall.jpg": 1,
        "stray_wide.jpg": 3,
        "stray_very_wide.jpg": 20,
        "degenerate_det.jpg": 100,
    }


def test_metric_reports_the_mean_of_per_image_scores() -> None:
    metric = CLEvalMetric(options=competition_options())
    for start in range(0, len(HANDMADE), 5):  # batches of 5 images
        batch = HANDMADE[start : start + 5]
        metric.update(
            [polygons(c["pred"]) for c in batch],
            [polygons(c["gt"]) for c in batch],
            [[False] * len(c["gt"]) for c in batch],
        )
    got = {k: v.item() for k, v in metric.compute().items()}
    for key in ("precision", "recall", "hmean"):
        assert got[key] == pytest.approx(np.mean([c["expected"][key] for c in HANDMADE]), abs=1e-6)


def test_polygons_under_four_points_are_skipped_and_counted() -> None:
    word = np.array([[10, 10], [110, 10], [110, 30], [10, 30]], dtype=np.float64)
    triangle = np.array([[300, 100], [360, 100], [330, 140]], dtype=np.float64)
    comp = evaluate_image([word, triangle], [word, triangle], [False, False], None, competition_options())
    assert (comp.num_skipped_polygons, comp.num_gt, comp.num_det, comp.hmean) == (2, 1, 1, 1.0)
    upstream = instantiate(METRIC_CONFIG, mode="upstream")
    up = evaluate_image([word, triangle], [word, triangle], [False, False], None, upstream)
    assert (up.num_skipped_polygons, up.num_gt, up.num_det) == (0, 2, 2)


def _scorer_aspect_ratio(points: np.ndarray, hull_order: np.ndarray) -> np.float32:
    """The scorer's rule on a hull listed as scipy lists it: first hull edge with the smallest rectangle,
    float32 arithmetic, across / (along + eps), capped at 100."""
    hull = points[hull_order]
    best = None
    for i in range(len(hull)):
        a, b = hull[i], hull[(i + 1) % len(hull)]
        length = np.float32(math.sqrt((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2))
        ux, uy = (b[0] - a[0]) / length, (b[1] - a[1]) / length
        along = ux * hull[:, 0] + uy * hull[:, 1]
        across = -uy * hull[:, 0] + ux * hull[:, 1]
        sides = (along.max() - along.min(), across.max() - across.min())
        if best is None or sides[0] * sides[1] < best[0] * best[1]:
            best = sides
    return min(np.float32(100), best[1] / (best[0] + np.finfo(np.float32).eps))


def test_min_area_rectangle_reads_the_hull_in_qhull_order() -> None:
    spatial = pytest.importorskip("scipy.spatial")  # qhull itself, for the listing order only
    from ocr.metrics.cleval.competition import min_area_aspect_ratios

    rng = np.random.default_rng(0)
    corners = np.array([[10, 10], [110, 10], [110, 30], [10, 30]])
    shapes = [corners[list(p)] for p in itertools.permutations(range(4))]  # ties: which side is "along"
    shapes += [corners[list(p)][:, ::-1] for p in itertools.permutations(range(4))]  # tall rectangles
    for _ in range(150):
        x0, y0 = rng.integers(0, 500, 2)
        w, h = rng.integers(1, 300, 2)
        box = np.array([[x0, y0], [x0 + w, y0], [x0 + w, y0 + h], [x0, y0 + h]])
        shapes.append(box[rng.permutation(4)])
    shapes += list(np.round(rng.uniform(0, 200, (600, 4, 2)), 1))  # convex and not, any order
    shapes += [np.array([[0, 0], [50, 0], [100, 0], [40, 30]]), np.array([[5, 5], [5, 5], [60, 5], [30, 25]])]
    shapes += [np.round(rng.uniform(0, 200, (k, 2)), 1) for k in rng.integers(5, 9, 100)]
    counts = np.array([len(s) for s in shapes])
    verts = np.zeros((len(shapes), counts.max(), 2))
    for i, s in enumerate(shapes):
        verts[i, : len(s)], verts[i, len(s) :] = s, s[-1]
    verts = verts.astype(np.float32).astype(np.float64)
    got = min_area_aspect_ratios(verts, counts)
    for i, s in enumerate(shapes):
        pts = np.asarray(s, dtype=np.float32)
        want = _scorer_aspect_ratio(pts, spatial.ConvexHull(pts).vertices)
        assert got[i] == want, (i, s.tolist(), got[i], want)


def test_flat_polygons_have_aspect_ratio_zero() -> None:
    from ocr.metrics.cleval.competition import min_area_aspect_ratios

    flat = [
        [[300, 100], [300, 100], [300, 140], [300, 140]],  # zero width
        [[10.2, 5], [10.4, 5], [10.4, 60], [10.2, 60]],  # zero width after rounding to integers
        [[0, 0], [10, 10], [20, 20], [30, 30]],  # collinear: qhull fails
    ]
    assert min_area_aspect_ratios(np.array(flat, dtype=np.float64), np.array([4, 4, 4])).tolist() == [0, 0, 0]


def _shared_or_skip(name: str) -> Path:
    path = SHARED / name
    if not path.is_file():
        pytest.skip(f"competition-scorer fixtures not found at {SHARED}")
    return path


def test_handmade_copy_equals_shared_fixtures() -> None:
    gt = json.loads(_shared_or_skip("handmade-gt.json").read_text())["images"]
    pred = json.loads((SHARED / "handmade-pred.json").read_text())["images"]
    expected = json.loads((SHARED / "handmade-expected.json").read_text())
    assert [c["name"] for c in HANDMADE] == list(expected)
    for case in HANDMADE:
        assert case["gt"] == [w["points"] for w in gt[case["name"]]["words"].values()]
        assert case["pred"] == [w["points"] for w in pred[case["name"]]["words"].values()]
        assert case["expected"] == expected[case["name"]]


@pytest.mark.parametrize("seed", sorted(SEED_MEAN_HMEAN))
def test_seeded_predictions_match_scorer(seed: int, sroie_root: Path) -> None:
    expected = json.loads(_shared_or_skip(f"expected-seed{seed}.json").read_text())
    pred = json.loads((SHARED / f"pred-seed{seed}.json").read_text())["images"]
    gt = json.loads((sroie_root / "jsons" / "test.json").read_text())["images"]
    names = list(expected)
    result = evaluate_dataset(
        [polygons([w["points"] for w in pred.get(n, {"words": {}})["words"].values()]) for n in names],
        [polygons([w["points"] for w in gt[n]["words"].values()]) for n in names],
        [[False] * len(gt[n]["words"]) for n in names],
        None,
        competition_options(),
        names=names,
    )
    for name, image in zip(names, result.images, strict=True):
        assert_scores(image, expected[name], name)
    for key in ("precision", "recall", "hmean"):
        assert getattr(result, key) == pytest.approx(np.mean([e[key] for e in expected.values()]), abs=1e-6)
    assert result.hmean == pytest.approx(SEED_MEAN_HMEAN[seed], abs=1e-6)


def test_evaluate_files_gives_the_scorer_figure(sroie_root: Path) -> None:
    pred = _shared_or_skip("pred-seed7.json")
    evaluate_cfg = yaml.safe_load((REPO_ROOT / "configs" / "evaluate.yaml").read_text())
    names, result = evaluate_files(
        sroie_root / "jsons" / "test.json", pred, competition_options(), evaluate_cfg["min_polygon_size"]
    )
    assert len(names) == 100
    assert result.hmean == pytest.approx(SEED_MEAN_HMEAN[7], abs=1e-6)


def test_quad_centres_shortcut_equals_the_general_chain() -> None:
    from ocr.metrics.cleval.competition import pseudo_char_centres

    rng = np.random.default_rng(1)
    quads = np.round(rng.uniform(0, 300, (20, 4, 2)), 1)
    chars = rng.integers(1, 30, 20)
    alone, _ = pseudo_char_centres(quads, np.full(20, 4), chars)
    hexagon = np.array([[[0, 0], [50, 0], [100, 0], [100, 20], [50, 20], [0, 20]]], dtype=np.float64)
    padded = np.concatenate([np.concatenate([quads, np.repeat(quads[:, -1:], 2, axis=1)], axis=1), hexagon])
    mixed, owner = pseudo_char_centres(padded, np.array([4] * 20 + [6]), np.append(chars, 5))
    np.testing.assert_array_equal(mixed[owner < 20], alone)
    # the hexagon: 5 centres along its mid-line y = 10, the chain points between corners truncated
    np.testing.assert_array_equal(mixed[owner == 20], [[10, 10], [30, 10], [50, 10], [70, 10], [90, 10]])
