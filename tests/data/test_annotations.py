from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ocr.data.annotations import (
    AnnotationError,
    ImageRecord,
    Word,
    dump_annotations,
    load_annotations,
    parse_annotations,
    save_annotations,
)

SAMPLE = {
    "info": {"source": "unit test"},
    "images": {
        "a.jpg": {
            "words": {
                "0001": {"points": [[1, 2], [30, 2], [30, 12], [1, 12]], "text": "TOTAL", "ignore": False},
                "0002": {
                    "points": [[1.5, 20.25], [30, 20], [30, 31.7], [1, 31]],
                    "text": "###",
                    "lang": "en",
                },
                "0003": {"points": [[5, 5], [9, 9]], "ignore": True},
            },
            "img_w": 64,
            "img_h": 48,
            "camera": "scanner",
        },
        "b.jpg": {"words": {}},
    },
}


def _write(tmp_path: Path, obj, name: str = "val.json") -> Path:
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return path


def test_load_fields_and_file_order(tmp_path):
    records = load_annotations(_write(tmp_path, SAMPLE))
    assert list(records) == ["a.jpg", "b.jpg"]
    rec = records["a.jpg"]
    assert (rec.file_name, rec.img_w, rec.img_h, rec.extra) == ("a.jpg", 64, 48, {"camera": "scanner"})
    assert [w.key for w in rec.words] == ["0001", "0002", "0003"]
    first, dont_care, short = rec.words
    assert first.points.dtype == np.float32 and first.points.shape == (4, 2)
    np.testing.assert_array_equal(first.points, [[1, 2], [30, 2], [30, 12], [1, 12]])
    assert (first.text, first.ignore) == ("TOTAL", False)
    assert dont_care.ignore and dont_care.extra == {"lang": "en"}  # "###" means don't-care
    assert (
        short.text is None and short.ignore and short.points.shape == (2, 2)
    )  # too few points: not a format error
    assert records["b.jpg"].words == [] and records["b.jpg"].img_w is None


def test_round_trip_keeps_unknown_keys_and_values(tmp_path):
    records = load_annotations(_write(tmp_path, SAMPLE))
    saved = save_annotations(tmp_path / "out" / "copy.json", records)
    again = load_annotations(saved)
    assert dump_annotations(again) == dump_annotations(records)
    dumped = json.loads(saved.read_text())
    assert dumped["info"] == {"source": "unit test"}
    assert dumped["images"]["a.jpg"]["camera"] == "scanner"
    assert dumped["images"]["a.jpg"]["words"]["0002"]["lang"] == "en"
    assert dumped["images"]["a.jpg"]["words"]["0002"]["points"][0] == [1.5, 20.25]  # no float32 noise
    assert dumped["images"]["a.jpg"]["words"]["0001"]["points"][0] == [1, 2]  # integers stay integers
    assert dumped["images"]["a.jpg"]["words"]["0001"] == SAMPLE["images"]["a.jpg"]["words"]["0001"]
    assert not list(saved.parent.glob("*.tmp"))


def test_records_built_in_code_can_be_saved(tmp_path):
    word = Word("0001", np.array([[0, 0], [4, 0], [4, 2]], np.float32), "hi", False)
    path = save_annotations(tmp_path / "p.json", {"x.png": ImageRecord("x.png", [word], 10, 8)})
    word_json = {"points": [[0, 0], [4, 0], [4, 2]], "text": "hi", "ignore": False}
    expected = {"images": {"x.png": {"words": {"0001": word_json}, "img_w": 10, "img_h": 8}}}
    assert json.loads(path.read_text()) == expected


@pytest.mark.parametrize(
    ("word", "message"),
    [
        (
            {"points": "1,2,3,4"},
            'images["a.jpg"].words["0003"].points: expected a list of [x, y] pairs, got "1,2,3,4"',
        ),
        (
            {"points": [[1, 2], [3, 4, 5]]},
            '.words["0003"].points[1]: expected an [x, y] pair of numbers, got [3, 4, 5]',
        ),
        ({"points": [[1, 2], ["3", 4]]}, '.points[1]: expected an [x, y] pair of numbers, got ["3", 4]'),
        ({"points": [[1, 2], [True, 4]]}, ".points[1]: expected an [x, y] pair of numbers, got [true, 4]"),
        ({"points": [1, 2, 3, 4, 5, 6]}, ".points[0]: expected an [x, y] pair of numbers, got 1"),
        ({"points": None}, ".points: expected a list of [x, y] pairs, got null"),
        ({"text": "a"}, 'words["0003"]: expected an object with key "points", got {"text": "a"}'),
        ({"points": [[1, 2]], "text": 5}, '.words["0003"].text: expected a string or null, got 5'),
        ({"points": [[1, 2]], "ignore": "yes"}, '.words["0003"].ignore: expected true or false, got "yes"'),
        (
            [[1, 2], [3, 4]],
            'images["a.jpg"].words["0003"]: expected an object with key "points", got [[1, 2], [3, 4]]',
        ),
    ],
)
def test_malformed_word_names_file_and_json_path(tmp_path, word, message):
    obj = {"images": {"a.jpg": {"words": {"0001": {"points": [[0, 0], [1, 0], [1, 1]]}, "0003": word}}}}
    with pytest.raises(AnnotationError) as info:
        load_annotations(_write(tmp_path, obj))
    text = str(info.value)
    assert text.startswith(str(tmp_path / "val.json") + ": images[")
    assert message in text


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], '(top level): expected a JSON object with key "images", got []'),
        ({"image": {}}, '(top level): expected a JSON object with key "images"'),
        ({"images": [1]}, "images: expected an object {file name: image}, got [1]"),
        ({"images": {"a.jpg": []}}, 'images["a.jpg"]: expected an object with key "words", got []'),
        ({"images": {"a.jpg": {"word": {}}}}, 'images["a.jpg"]: expected an object with key "words"'),
        (
            {"images": {"a.jpg": {"words": []}}},
            'images["a.jpg"].words: expected an object {key: word}, got []',
        ),
        (
            {"images": {"a.jpg": {"words": {}, "img_w": -3}}},
            'images["a.jpg"].img_w: expected a positive integer',
        ),
        (
            {"images": {"a.jpg": {"words": {}, "img_h": "48"}}},
            'images["a.jpg"].img_h: expected a positive integer',
        ),
    ],
)
def test_malformed_structure_names_the_json_path(tmp_path, obj, message):
    with pytest.raises(AnnotationError, match="^" + str(tmp_path / "val.json").replace(".", r"\.")) as info:
        load_annotations(_write(tmp_path, obj))
    assert message in str(info.value)


def test_long_values_are_shortened_in_messages():
    obj = {"images": {"a.jpg": {"words": {"1": {"points": "x" * 500}}}}}
    with pytest.raises(AnnotationError) as info:
        parse_annotations(obj, "mem.json")
    assert str(info.value).startswith('mem.json: images["a.jpg"].words["1"].points: expected')
    assert len(str(info.value)) < 200 and str(info.value).endswith("...")


def test_invalid_json_gives_line_and_column(tmp_path):
    path = _write(tmp_path, '{"images": {\n  "a.jpg": {"words": {}}\n  "b.jpg": {}\n}}')
    with pytest.raises(AnnotationError, match=r"val\.json:3:3: invalid JSON: Expecting ',' delimiter"):
        load_annotations(path)


def test_duplicate_keys_are_errors(tmp_path):
    text = '{"images": {"a.jpg": {"words": {"0001": {"points": []}, "0001": {"points": [[1, 2]]}}}}}'
    with pytest.raises(AnnotationError, match=r'val\.json: duplicate key "0001"'):
        load_annotations(_write(tmp_path, text))


def test_two_names_of_one_image_are_errors(tmp_path):
    """X.jpg and sub/../X.jpg were both read, so the image was trained on and scored twice."""
    images = {"X.jpg": {"words": {}}, "b.jpg": {"words": {}}, "sub/../X.jpg": {"words": {}}}
    with pytest.raises(AnnotationError) as info:
        load_annotations(_write(tmp_path, {"images": images}))
    assert str(info.value) == (
        f'{tmp_path / "val.json"}: images["X.jpg"] and images["sub/../X.jpg"] name the same file; keep one'
    )
    assert len(parse_annotations({"images": {"a/X.jpg": {"words": {}}, "X.jpg": {"words": {}}}}, "s")) == 2


def test_non_utf8_file_is_an_annotation_error(tmp_path):
    path = tmp_path / "val.json"
    path.write_bytes(b'{"images": {"\xff.jpg": {"words": {}}}}')
    with pytest.raises(AnnotationError, match=r"val\.json: not UTF-8"):
        load_annotations(path)


def test_out_of_range_numbers(tmp_path):
    big = load_annotations(
        _write(tmp_path, '{"images": {"a": {"words": {"1": {"points": [[1e300, 1], [2, 3]]}}}}}')
    )
    assert np.isinf(big["a"].words[0].points[0, 0])  # beyond float32: left to sanitation as non-finite
    huge = '{"images": {"a": {"words": {"1": {"points": [[1%s, 1]]}}}}}' % ("0" * 400)
    with pytest.raises(
        AnnotationError, match=r'images\["a"\]\.words\["1"\]\.points: expected numbers within'
    ):
        load_annotations(_write(tmp_path, huge))


def test_nan_points_load_and_are_left_to_sanitation(tmp_path):
    path = _write(tmp_path, '{"images": {"a.jpg": {"words": {"1": {"points": [[NaN, 1], [2, 3], [4, 5]]}}}}}')
    points = load_annotations(path)["a.jpg"].words[0].points
    assert np.isnan(points[0, 0]) and points.shape == (3, 2)


def test_sroie_round_trip_is_lossless(sroie_root: Path):
    for split in ("train", "val", "test"):
        path = sroie_root / "jsons" / f"{split}.json"
        records = load_annotations(path)
        assert len(records) == len(list((sroie_root / "images" / split).iterdir()))
        assert dump_annotations(records) == json.loads(path.read_text())
