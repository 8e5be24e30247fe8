"""Pseudo-labels from predictions: text, don't-care and dropped by score; counts; thresholds checked; the
output checks that keep a user's data, and the backup an overwrite keeps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ocr.data.annotations import dump_annotations, parse_annotations
from ocr.data.pseudo_labels import (
    PseudoThresholds,
    back_up,
    decoded_sizes,
    pseudo_records,
    refuse_unsafe_output,
)
from ocr.types import Prediction
from ocr.utils.errors import ConfigValueError, OutputDirError
from tests.helpers.scripts import receipt_images

BOX = np.array([[0, 0], [10, 0], [10, 5], [0, 5]], np.float32)


def _prediction(name: str, scores: list[float]) -> Prediction:
    return {"image_id": name, "polygons": [BOX + i for i in range(len(scores))], "scores": scores}


def test_scores_split_into_text_dont_care_and_dropped_at_the_thresholds() -> None:
    thresholds = PseudoThresholds(text_score=0.7, ignore_score=0.4)
    predictions = [
        _prediction("a.jpg", [0.95, 0.7, 0.69, 0.4, 0.39, 0.1]),
        _prediction("b.jpg", [0.5]),
        _prediction("c.jpg", []),
        _prediction("gone.jpg", [0.9]),
    ]
    sizes = {"a.jpg": (100, 200), "b.jpg": (50, 60), "c.jpg": (10, 10), "gone.jpg": None}
    records, counts = pseudo_records(predictions, sizes, thresholds)
    assert list(records) == ["a.jpg", "b.jpg", "c.jpg"]
    a = records["a.jpg"]
    assert (a.img_w, a.img_h) == (100, 200)
    assert [w.ignore for w in a.words] == [False, False, True, True]
    assert [w.extra["score"] for w in a.words] == [0.95, 0.7, 0.69, 0.4]
    assert [w.key for w in a.words] == ["0001", "0002", "0003", "0004"]
    np.testing.assert_array_equal(a.words[2].points, BOX + 2)
    assert counts.as_dict() == {
        "images": 3,
        "unreadable": 1,
        "text": 2,
        "ignored": 3,
        "dropped": 2,
        "images_without_text": 2,
    }
    # What the dataset reads back: ignore flags, sizes, the score kept as an extra key.
    back = parse_annotations(dump_annotations(records), "pseudo")
    assert [w.ignore for w in back["a.jpg"].words] == [False, False, True, True]
    assert back["b.jpg"].img_w == 50 and back["b.jpg"].words[0].extra == {"score": 0.5}


@pytest.mark.parametrize(("text", "ignore"), [(0.5, 0.6), (1.2, 0.5), (0.5, -0.1)])
def test_thresholds_out_of_order_or_range_are_refused(text: float, ignore: float) -> None:
    with pytest.raises(ConfigValueError, match=r"0 <= pseudo\.ignore_score <= pseudo\.text_score <= 1"):
        PseudoThresholds(text_score=text, ignore_score=ignore)


def test_equal_thresholds_mean_no_dont_care() -> None:
    thresholds = PseudoThresholds(text_score=0.5, ignore_score=0.5)
    assert [thresholds.classify(s) for s in (0.49, 0.5, 0.9)] == ["drop", "text", "text"]


def test_an_output_holding_the_checkpoint_is_refused_unless_overwrite(tmp_path: Path) -> None:
    images = receipt_images(tmp_path / "unlabelled", 1, 96, 10)
    out = tmp_path / "out"
    out.mkdir()
    ckpt = out / "teacher.ckpt"
    refuse_unsafe_output(tmp_path / "new", images, ckpt, False)  # a new folder: nothing to refuse
    with pytest.raises(
        OutputDirError, match=f"output={out}: expected a folder without a dataset, but it holds {ckpt};"
    ):
        refuse_unsafe_output(out, images, ckpt, False)
    refuse_unsafe_output(out, images, ckpt, True)
    with pytest.raises(ConfigValueError, match="overwrite: expected true or false, got 'yes'"):
        refuse_unsafe_output(out, images, ckpt, "yes")
    with pytest.raises(
        ConfigValueError, match=f"image_dir={images}: expected a folder outside output={tmp_path}"
    ):
        refuse_unsafe_output(tmp_path, images, ckpt, True)


def test_the_backup_keeps_the_replaced_annotations_byte_for_byte(tmp_path: Path) -> None:
    assert back_up(tmp_path / "train.json") is None
    (tmp_path / "train.json").write_bytes(b'{"images": {}}')
    backup = back_up(tmp_path / "train.json")
    assert backup is not None and backup.name.startswith("train.json.") and backup.suffix == ".bak"
    assert backup.read_bytes() == b'{"images": {}}'


def test_an_image_that_does_not_decode_whole_has_no_size(tmp_path: Path) -> None:
    images = receipt_images(tmp_path / "images", 2, 96, 10)
    data = (images / "r1.png").read_bytes()
    (images / "r1.png").write_bytes(data[: len(data) // 2])  # its header still reads
    assert decoded_sizes(images, ["r0.png", "r1.png"], 96) == {"r0.png": (60, 96), "r1.png": None}
