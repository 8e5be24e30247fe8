from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from ocr.data.synthetic.generate import SPLITS, generate_dataset, main, render_receipt
from ocr.data.synthetic.layout import layout_receipt

LONG_SIDE = 256


def _generate(root: Path, num_train: int = 2, num_val: int = 1, num_test: int = 1, seed: int = 3) -> Path:
    return generate_dataset(root, num_train, num_val, num_test, seed, long_side=LONG_SIDE)


def _images(root: Path, split: str) -> dict[str, np.ndarray]:
    return {p.name: cv2.imread(str(p)) for p in sorted((root / "images" / split).glob("*.jpg"))}


def test_render_receipt_same_seed_same_output_and_different_seed_differs():
    a, b, c = render_receipt(11, LONG_SIDE), render_receipt(11, LONG_SIDE), render_receipt(12, LONG_SIDE)
    assert a.image.dtype == np.uint8 and a.image.ndim == 3 and a.image.shape[2] == 3
    assert max(a.image.shape[:2]) == LONG_SIDE
    np.testing.assert_array_equal(a.image, b.image)
    assert [(w.text, w.ignore) for w in a.words] == [(w.text, w.ignore) for w in b.words]
    for wa, wb in zip(a.words, b.words, strict=True):
        np.testing.assert_array_equal(wa.points, wb.points)
    assert a.image.shape != c.image.shape or not np.array_equal(a.image, c.image)


def test_generate_dataset_is_deterministic(tmp_path):
    first, second, other = (
        _generate(tmp_path / "a"),
        _generate(tmp_path / "b"),
        _generate(tmp_path / "c", seed=4),
    )
    for split in SPLITS:
        name = f"jsons/{split}.json"
        assert (first / name).read_bytes() == (second / name).read_bytes()
        images_a, images_b = _images(first, split), _images(second, split)
        assert images_a.keys() == images_b.keys()
        for key, image in images_a.items():
            np.testing.assert_array_equal(image, images_b[key])
    assert (first / "jsons/train.json").read_bytes() != (other / "jsons/train.json").read_bytes()


def test_annotations_are_valid(tmp_path):
    root = _generate(tmp_path / "syn", num_train=3)
    for split, count in zip(SPLITS, (3, 1, 1), strict=True):
        data = json.loads((root / "jsons" / f"{split}.json").read_text())
        assert list(data) == ["images"] and len(data["images"]) == count
        for name, entry in data["images"].items():
            image = cv2.imread(str(root / "images" / split / name))
            assert image is not None, name
            h, w = image.shape[:2]
            assert (entry["img_w"], entry["img_h"]) == (w, h) and max(w, h) == LONG_SIDE
            legible = 0
            for key, word in entry["words"].items():
                assert len(key) == 4 and key.isdigit()
                pts = np.asarray(word["points"], dtype=np.float64)
                assert pts.ndim == 2 and pts.shape[0] >= 4 and pts.shape[1] == 2, (name, key)
                assert (pts >= 0).all() and (pts[:, 0] <= w).all() and (pts[:, 1] <= h).all(), (name, key)
                assert cv2.contourArea(pts.astype(np.float32)) > 1.0, (name, key)
                assert isinstance(word["text"], str) and word["text"].strip() == word["text"] != ""
                assert isinstance(word["ignore"], bool) and word["ignore"] == (word["text"] == "###")
                legible += not word["ignore"]
            assert legible >= 5, name


def test_word_boxes_are_tight_and_apart():
    rng = np.random.default_rng(5)
    alpha, words = layout_receipt(rng, 220, 420, 11.0)
    legible = [w for w in words if not w.ignore]
    assert len(legible) >= 10
    for word in legible:
        (x0, y0), (x1, y1) = word.points[0].astype(int), word.points[2].astype(int)
        box = alpha[y0:y1, x0:x1] >= 0.25
        assert box[0].any() and box[-1].any() and box[:, 0].any() and box[:, -1].any(), word.text
        ring = np.concatenate(
            [alpha[y0 - 1, x0:x1], alpha[y1, x0:x1], alpha[y0:y1, x0 - 1], alpha[y0:y1, x1]]
        )
        assert (ring < 0.25).all(), word.text
    for i, p in enumerate(legible):
        for q in legible[i + 1 :]:
            gap_x = max(q.points[0, 0] - p.points[2, 0], p.points[0, 0] - q.points[2, 0])
            gap_y = max(q.points[0, 1] - p.points[2, 1], p.points[0, 1] - q.points[2, 1])
            height = min(p.points[2, 1] - p.points[0, 1], q.points[2, 1] - q.points[0, 1])
            assert max(gap_x, gap_y) >= 0.5 * height, (p.text, q.text)


def test_more_train_images_leave_val_and_earlier_train_unchanged(tmp_path):
    small = _generate(tmp_path / "small", num_train=1, num_val=2)
    large = _generate(tmp_path / "large", num_train=3, num_val=2)
    assert (small / "jsons/val.json").read_bytes() == (large / "jsons/val.json").read_bytes()
    small_train = json.loads((small / "jsons/train.json").read_text())["images"]
    large_train = json.loads((large / "jsons/train.json").read_text())["images"]
    assert small_train.items() <= large_train.items() and len(large_train) == 3


def test_same_parameters_are_a_no_op_and_new_ones_regenerate(tmp_path):
    root = _generate(tmp_path / "syn")
    manifest = root / "manifest.json"
    stamp = (manifest.stat().st_mtime_ns, manifest.stat().st_ino)
    assert _generate(tmp_path / "syn") == root
    assert (manifest.stat().st_mtime_ns, manifest.stat().st_ino) == stamp

    _generate(tmp_path / "syn", num_val=3)
    assert json.loads(manifest.read_text())["num_images"]["val"] == 3
    assert len(_images(root, "val")) == 3
    assert len(json.loads((root / "jsons/val.json").read_text())["images"]) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["syn"]  # no temp or old folders left behind


def test_refuses_to_replace_a_folder_it_did_not_write(tmp_path):
    root = tmp_path / "mine"
    root.mkdir()
    (root / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="mine"):
        _generate(root)
    assert (root / "notes.txt").read_text() == "keep me"


def test_rejects_negative_counts(tmp_path):
    with pytest.raises(ValueError, match="counts"):
        generate_dataset(tmp_path / "x", -1, 1, 0, seed=0, long_side=LONG_SIDE)


def test_cli_writes_the_dataset(tmp_path):
    out = tmp_path / "cli"
    argv = [
        "--out",
        str(out),
        "--num-train",
        "2",
        "--num-val",
        "1",
        "--seed",
        "7",
        "--long-side",
        str(LONG_SIDE),
    ]
    assert main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["num_images"] == {"train": 2, "val": 1, "test": 0} and manifest["seed"] == 7
    assert len(_images(out, "train")) == 2 and len(_images(out, "val")) == 1
    assert json.loads((out / "jsons/test.json").read_text()) == {"images": {}}
