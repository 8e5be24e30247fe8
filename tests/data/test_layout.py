"""Dataset folders written by the project: images placed by link or copy, a split cut to its first labels."""

from __future__ import annotations

from pathlib import Path

import pytest

from ocr.data.annotations import load_annotations
from ocr.data.layout import UNLABELLED_DIR, place_images, write_label_subset
from ocr.utils.errors import ConfigValueError, InputNotFoundError
from tests.helpers.receipt_fixtures import block_words, make_root, write_split


def test_images_are_linked_or_copied_under_their_names(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.jpg").write_bytes(b"a")
    (src / "sub" / "b.jpg").write_bytes(b"b")
    assert place_images(["a.jpg", "sub/b.jpg"], src, tmp_path / "linked", "link") == 2
    assert (tmp_path / "linked" / "sub" / "b.jpg").is_symlink()
    assert (tmp_path / "linked" / "a.jpg").read_bytes() == b"a"
    assert place_images(["a.jpg"], src, tmp_path / "copied", "copy") == 1
    assert not (tmp_path / "copied" / "a.jpg").is_symlink()
    assert (tmp_path / "copied" / "a.jpg").read_bytes() == b"a"
    (src / "a.jpg").write_bytes(b"new")  # placing again replaces
    place_images(["a.jpg"], src, tmp_path / "copied", "copy")
    assert (tmp_path / "copied" / "a.jpg").read_bytes() == b"new"
    assert place_images(["a.jpg"], src, tmp_path / "none", "none") == 0 and not (tmp_path / "none").exists()
    with pytest.raises(ConfigValueError, match="expected one of"):
        place_images(["a.jpg"], src, tmp_path / "x", "hardlink")
    with pytest.raises(InputNotFoundError, match="missing.jpg: image not found"):
        place_images(["missing.jpg"], src, tmp_path / "x", "link")


def test_an_image_placed_onto_itself_stays_an_image(tmp_path: Path) -> None:
    """Linking a folder's images into that same folder used to make each a link to itself."""
    (tmp_path / "a.jpg").write_bytes(b"a")
    place_images(["a.jpg"], tmp_path, tmp_path, "link")
    assert not (tmp_path / "a.jpg").is_symlink() and (tmp_path / "a.jpg").read_bytes() == b"a"


def test_a_label_subset_keeps_the_first_labels_and_lists_the_rest_unlabelled(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root", num_images=2)
    write_split(root, "train", {f"t{i}.png": block_words() for i in range(5)})
    out = write_label_subset(root, "train", 2, tmp_path / "subset")
    assert list(load_annotations(out / "jsons" / "train.json")) == ["t0.png", "t1.png"]
    assert sorted(p.name for p in (out / "images" / "train").iterdir()) == ["t0.png", "t1.png"]
    assert sorted(p.name for p in (out / UNLABELLED_DIR).iterdir()) == ["t2.png", "t3.png", "t4.png"]
    assert list(load_annotations(out / "jsons" / "val.json")) == ["val_0.png", "val_1.png"]
    assert (out / "images" / "test" / "test_1.png").is_file()
    with pytest.raises(ConfigValueError, match=r"expected 1 to 5 images \(split 'train'"):
        write_label_subset(root, "train", 6, tmp_path / "too_many")
