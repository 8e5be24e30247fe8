"""Synthetic styles and granularity: packaged fonts, a golden hash, the receipt style's boxes and marks."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest
from omegaconf import DictConfig

from ocr.data.annotations import load_annotations
from ocr.data.synthetic.generate import SPLITS, generate_dataset, render_receipt, synthetic_settings
from ocr.data.synthetic.layout import FONT_PACKAGE, available_fonts
from ocr.data.synthetic.receipt import Row, layout_dense, receipt_rows

LONG_SIDE = 384

# sha256 of render_receipt's pixels, words and JPEG quality for seeds 0-1 of both styles at long side 160
# (receipt seed 0 is photographed, seed 1 scanned). The images depend on the font files, so the font
# package is pinned exactly in pyproject.toml (matplotlib==3.10.7); Pillow/FreeType, OpenCV and NumPy
# are pinned by uv.lock. Machine fonts must not change it; a new font package version changes it.
GOLDEN_SHA256 = "d3e74dc49d6597ec6708a25413e9e57fb424863ce08a6610b7884bcffe49e92f"


def _digest() -> str:
    digest = hashlib.sha256()
    for style in ("basic", "receipt"):
        for seed in (0, 1):
            receipt = render_receipt(seed, 160, style, "word")
            digest.update(receipt.image.tobytes() + bytes([receipt.jpeg_quality]))
            words = [(w.points.round(3).tolist(), w.text, w.ignore) for w in receipt.words]
            digest.update(json.dumps(words).encode())
    return digest.hexdigest()


def test_fonts_come_from_the_pinned_package_only():
    spec = importlib.util.find_spec(FONT_PACKAGE)
    assert spec is not None and spec.submodule_search_locations
    package = Path(next(iter(spec.submodule_search_locations))).resolve()
    files = [f for f in available_fonts() if f.path is not None]
    assert len(files) >= 8 and any(f.wide for f in files) and any("Mono" in f.name for f in files)
    for font in files:
        assert Path(str(font.path)).resolve().is_relative_to(package), font.path
    pins = Path(__file__).parents[2].joinpath("pyproject.toml").read_text()
    assert f'"{FONT_PACKAGE}==' in pins, (
        "the font package must be pinned exactly: the golden hash depends on it"
    )


def test_a_seed_gives_the_same_images_on_every_machine():
    assert _digest() == GOLDEN_SHA256


def test_receipt_style_same_seed_same_output_and_different_seed_differs():
    a, b, c = (render_receipt(s, 256, "receipt", "line") for s in (5, 5, 6))
    np.testing.assert_array_equal(a.image, b.image)
    assert [(w.points.tolist(), w.text) for w in a.words] == [(w.points.tolist(), w.text) for w in b.words]
    assert a.image.shape != c.image.shape or not np.array_equal(a.image, c.image)


def _darkness_gap(gray: np.ndarray, points: np.ndarray) -> float:
    """Paper brightness around a box minus the darkest tenth inside it (grey levels)."""
    mask = np.zeros(gray.shape, np.uint8)
    cv2.fillPoly(mask, [np.round(points).astype(np.int32)], 1)
    ring = cv2.dilate(mask, np.ones((7, 7), np.uint8)) - mask
    return float(np.median(gray[ring > 0]) - np.percentile(gray[mask > 0], 10))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_receipt_boxes_lie_inside_the_image_on_ink(seed):
    receipt = render_receipt(seed, LONG_SIDE, "receipt", "line")
    gray = cv2.cvtColor(receipt.image, cv2.COLOR_RGB2GRAY).astype(np.float32)
    h, w = gray.shape
    assert max(h, w) == LONG_SIDE
    legible = [word for word in receipt.words if not word.ignore]
    assert len(legible) >= 15
    for word in legible:
        assert (word.points >= 0).all() and (word.points <= (w, h)).all(), word.text
        assert _darkness_gap(gray, word.points) > 20, word.text


def test_receipt_words_are_tight_on_the_paper_and_line_boxes_hold_them():
    rng = np.random.default_rng(7)
    page = layout_dense(rng, receipt_rows(rng, 40), 10.0, 36, 1.0)
    assert len(page.words) >= 40 and len({w.group for w in page.words}) >= 20
    for word in page.words:
        (x0, y0), (x1, y1) = word.points[0].astype(int), word.points[2].astype(int)
        box = page.ink[y0:y1, x0:x1] >= 0.25
        assert box[0].any() and box[-1].any() and box[:, 0].any() and box[:, -1].any(), word.text


def test_word_granularity_gives_more_boxes_than_line_on_the_same_image():
    words, lines = (
        render_receipt(9, LONG_SIDE, "receipt", "word"),
        render_receipt(9, LONG_SIDE, "receipt", "line"),
    )
    np.testing.assert_array_equal(words.image, lines.image)
    assert len(words.words) > len(lines.words) >= 15
    boxes = [(w.points.min(axis=0), w.points.max(axis=0)) for w in lines.words]
    for word in words.words:
        lo, hi = word.points.min(axis=0), word.points.max(axis=0)
        assert any((lo >= b_lo - 0.01).all() and (hi <= b_hi + 0.01).all() for b_lo, b_hi in boxes), word.text
    merged = [w.text for w in lines.words if " " in w.text]
    assert merged, "line granularity joins the words of a cell"


def test_marks_get_no_boxes():
    rng = np.random.default_rng(3)
    rows = [Row(mark=mark) for mark in ("logo", "rule", "barcode", "qr", "rule")]
    page = layout_dense(rng, rows, 10.0, 30, 1.0)
    assert page.words == []
    assert (page.ink > 0.5).sum() > 2000
    for seed in range(40):  # stamps and pen strokes land on some pages, never as boxes
        page = layout_dense(np.random.default_rng(seed), [Row(mark="rule")], 10.0, 30, 1.0)
        assert page.words == []
        if page.pen.any():
            break
    else:
        pytest.fail("no page with a stamp or pen strokes in 40 seeds")


def test_receipt_set_loads_with_the_annotation_reader_and_workers_do_not_change_it(tmp_path):
    args = {"num_train": 2, "num_val": 1, "num_test": 1, "seed": 1, "long_side": 192}
    one = generate_dataset(tmp_path / "one", **args, style="receipt", granularity="line")
    two = generate_dataset(tmp_path / "two", **args, style="receipt", granularity="line", workers=2)
    manifest = json.loads((one / "manifest.json").read_text())
    assert (manifest["style"], manifest["granularity"]) == ("receipt", "line")
    assert manifest["font_package"].startswith(f"{FONT_PACKAGE}==")
    for split in SPLITS:
        assert (one / f"jsons/{split}.json").read_bytes() == (two / f"jsons/{split}.json").read_bytes()
        for image in sorted((one / "images" / split).iterdir()):
            assert image.read_bytes() == (two / "images" / split / image.name).read_bytes()
        records = load_annotations(one / f"jsons/{split}.json")
        for name, record in records.items():
            assert (one / "images" / split / name).is_file()
            assert sum(not w.ignore for w in record.words) >= 10


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [("style", "fancy", "'basic', 'receipt'"), ("granularity", "char", "'line', 'word'")],
)
def test_unknown_style_or_granularity_is_named_with_the_allowed_values(key, value, allowed):
    settings = {"num_train": 1, "num_val": 1, "num_test": 0, "seed": 0, "long_side": 128}
    settings |= {"style": "basic", "granularity": "word", key: value}
    with pytest.raises(
        ValueError, match=rf"data\.synthetic\.{key}: expected one of \({allowed}\), got '{value}'"
    ):
        synthetic_settings(settings)
    with pytest.raises(ValueError, match="data.synthetic: expected exactly the keys"):
        synthetic_settings({k: v for k, v in settings.items() if k != key})


def test_the_dataset_folder_names_style_and_granularity(
    tmp_path: Path, compose_cfg: Callable[[str, list[str], Path], DictConfig]
) -> None:
    overrides = ["data=synthetic", "data.synthetic.style=receipt", "data.synthetic.granularity=line"]
    receipt = compose_cfg("train", overrides, tmp_path)
    basic = compose_cfg("train", ["data=synthetic"], tmp_path)
    assert Path(receipt.data.root).name.startswith("synthetic_receipt_line_")
    assert Path(basic.data.root).name.startswith("synthetic_basic_word_")
