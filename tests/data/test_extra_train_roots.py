"""data.extra_train_roots: more train splits concatenated to the root's, each scanned and reported alone."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from ocr.data.datamodule import TrainSets
from ocr.utils.errors import InputNotFoundError
from tests.helpers.receipt_fixtures import block_words, make_root, receipt_datamodule, write_split


def test_extra_roots_add_their_train_images_and_report_each_root(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = make_root(tmp_path / "labelled", num_images=3)
    pseudo = tmp_path / "pseudo"
    write_split(pseudo, "train", {f"p_{i}.png": block_words()[:1] for i in range(2)})
    module = receipt_datamodule(root, extra_train_roots=(str(pseudo),))
    with caplog.at_level(logging.INFO, logger="ocr.data.datamodule"):
        module.setup("fit")
    train = module.datasets["train"]
    assert isinstance(train, TrainSets) and len(train) == 5
    assert [p.root for p in train.datasets] == [root, pseudo]
    assert len(module.datasets["val"]) == 3  # validation reads the root only
    lines = [r.getMessage() for r in caplog.records]
    assert any(f"train dataset <data.root={root}>" in line for line in lines)
    assert any(f"train dataset <data.extra_train_roots[0]={pseudo}>" in line for line in lines)
    assert "train: 5 images from 2 roots" in lines
    # The extra images come out of the train stream with their targets.
    ids = set()
    for _, batch in zip(range(3), module.train_dataloader(), strict=False):
        ids.update(batch["image_id"])
        assert batch["prob_map"].dtype == torch.uint8
    assert any(i.startswith("p_") for i in ids) and any(i.startswith("train_") for i in ids)


def test_the_fingerprint_changes_with_an_extra_root_only(tmp_path: Path) -> None:
    root = make_root(tmp_path / "labelled")
    pseudo = tmp_path / "pseudo"
    write_split(pseudo, "train", {"p_0.png": block_words()[:1]})
    plain = receipt_datamodule(root).fingerprint
    assert receipt_datamodule(root, extra_train_roots=()).fingerprint == plain
    with_extra = receipt_datamodule(root, extra_train_roots=(str(pseudo),)).fingerprint
    assert with_extra != plain
    write_split(pseudo, "train", {"p_0.png": block_words()[:1], "p_1.png": block_words()[:1]})
    assert receipt_datamodule(root, extra_train_roots=(str(pseudo),)).fingerprint != with_extra


def test_an_extra_root_without_usable_images_fails_naming_it(tmp_path: Path) -> None:
    root = make_root(tmp_path / "labelled")
    empty = tmp_path / "empty"
    write_split(empty, "train", {"ghost.png": block_words()}, create=False)
    with pytest.raises(  # a UsageError: the runner prints its message alone, exit 1
        InputNotFoundError, match=r"data\.extra_train_roots\[0\]=.*empty has no usable image \(1 listed"
    ):
        receipt_datamodule(root, extra_train_roots=(str(empty),)).setup("fit")
    with pytest.raises(FileNotFoundError, match=r"annotation file of split 'train' not found"):
        receipt_datamodule(root, extra_train_roots=(str(tmp_path / "absent"),)).setup("fit")
