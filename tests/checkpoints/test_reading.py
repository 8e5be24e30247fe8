"""load_checkpoint: what test and predict say about a file that is not a training checkpoint."""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from ocr.checkpoints.reading import load_checkpoint

RUN_CHECKPOINT = {"state_dict": {"net.weight": torch.zeros(4096)}, "ocr_config": {"model": {}}, "epoch": 3}


def _saved(obj: object) -> Callable[[Path], None]:
    return lambda path: torch.save(obj, path)


def _truncated(path: Path) -> None:
    torch.save(RUN_CHECKPOINT, path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _corrupt(path: Path) -> None:
    """Whole length, end record intact, the middle overwritten."""
    torch.save(RUN_CHECKPOINT, path)
    data = bytearray(path.read_bytes())
    data[100:-200] = bytes(len(data) - 300)
    path.write_bytes(bytes(data))


BAD_FILES = {
    "truncated": (_truncated, "a truncated checkpoint: a zip archive of"),
    "corrupt": (_corrupt, "a corrupt zip archive ("),
    "text": (lambda p: p.write_text("12 34\nnot a checkpoint\n"), "a text file, not a PyTorch checkpoint"),
    "empty": (lambda p: p.write_bytes(b""), "an empty file (0 bytes)"),
    "binary": (
        lambda p: p.write_bytes(bytes(range(256))),
        "not a PyTorch checkpoint (it starts with the bytes",
    ),
    "bare pickle": (
        lambda p: p.write_bytes(pickle.dumps({"state_dict": {}})),
        "a bare pickle (30 bytes), not a checkpoint (torch.save writes zip archives); not loaded",
    ),
    "saved list": (_saved([1, 2]), "a pickled list, not a checkpoint dict"),
    "state dict": (
        _saved({"conv.weight": torch.zeros(2)}),
        "a bare state dict (1 tensors) without the run config",
    ),
    "no run config": (_saved({"state_dict": {}, "epoch": 1}), "a checkpoint without the run config"),
    "other dict": (_saved({"model": 1}), "a dict without 'state_dict' and 'ocr_config' (keys: ['model'])"),
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_a_file_that_is_not_a_run_checkpoint_is_named_with_what_it_is(kind: str, tmp_path: Path) -> None:
    make, what = BAD_FILES[kind]
    path = tmp_path / "model.ckpt"
    make(path)
    with pytest.raises(ValueError, match=rf"^ckpt={re.escape(str(path))}: .*{re.escape(what)}"):
        load_checkpoint(path)


def test_a_run_checkpoint_loads_and_a_folder_is_not_one(tmp_path: Path) -> None:
    torch.save(RUN_CHECKPOINT, tmp_path / "last.ckpt")
    assert load_checkpoint(tmp_path / "last.ckpt")["epoch"] == 3
    with pytest.raises(FileNotFoundError, match=rf"ckpt={re.escape(str(tmp_path))}: .*got a directory"):
        load_checkpoint(tmp_path)
