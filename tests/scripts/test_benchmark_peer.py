"""scripts/benchmark_predict.py's peer column: a fake ``rapidocr`` (no rapidocr in the suite) run by
scripts/peer_rapidocr.py in a Python found by ``--peer-python`` or ``RAPIDOCR_PYTHON``, timed between our
passes, its detections scored with runners/evaluate.py; the rows and the peer in the JSON."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tests.helpers.receipt_fixtures import BLOCK, make_root
from tests.helpers.scripts import load_script

# A stand-in for rapidocr's API: RapidOCR()(path, use_det=..., ...) -> an object with .boxes (N, 4, 2) in
# original px. It finds the red block of every image of make_root, exactly.
FAKE_RAPIDOCR = f"""
import json
from types import SimpleNamespace

CALLS = []


class RapidOCR:
    def __call__(self, path, use_det=None, use_cls=None, use_rec=None):
        assert (use_det, use_cls, use_rec) == (True, False, False)
        CALLS.append(path)
        return SimpleNamespace(boxes=[{BLOCK.tolist()!r}])
"""


def _fake_peer_python(tmp_path: Path) -> Path:
    """An executable that runs this interpreter with the fake rapidocr first on the path."""
    package = tmp_path / "fake_site" / "rapidocr"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_RAPIDOCR)
    python = tmp_path / "peer-python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{package.parent}" exec "{sys.executable}" "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return python


@pytest.mark.slow  # a tiny predict row and the fake peer, 30 s on 2 busy cores
def test_the_peer_is_timed_between_our_passes_and_scored_like_ours(
    tmp_path: Path, tiny_run: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load_script("benchmark_predict")
    root = make_root(tmp_path / "blocks", num_images=2)
    monkeypatch.setenv(module.PEER_ENV, str(_fake_peer_python(tmp_path)))
    out = tmp_path / "bench.json"
    overrides = [o for o in tiny_run if not o.startswith("data.eval_transform.long_side=")]
    # 1 of the 2 images timed: the other must not be scored as an image without detections.
    args = [
        "--images",
        str(root / "images" / "test"),
        "--num-images",
        "1",
        "--long-side",
        "64",
        "--batches",
        "2",
    ]
    args += ["--backends", "torch", "--passes", "2", "--workers", "0", "--json", str(out)]
    table = module.main([*args, *overrides])
    record = json.loads(out.read_text())
    assert record["gt"] == str((root / "jsons" / "test.json").resolve())  # found beside the images
    peer = record["peer"]
    assert len(peer["img_per_s"]) == 2 and peer["info"]["ready"]
    # The fake finds every GT word of the timed image exactly: a perfect score in both modes.
    assert peer["info"]["hmean"] == {"upstream": 1.0, "competition": 1.0}
    (row,) = record["rows"]
    assert len(row["img_per_s"]) == 2 and 0.0 < row["network_share"] < 1.0
    assert set(row["hmean"]) == {"upstream", "competition"} and row["model_mib"] > 0
    assert "| peer: rapidocr unknown (det only) |" in table and "1.0000 / 1.0000" in table


def test_a_peer_python_that_is_not_a_file_is_named(tmp_path: Path) -> None:
    module = load_script("benchmark_predict")
    with pytest.raises(FileNotFoundError, match="no-such-python is not a Python executable"):
        module.peer_python(tmp_path / "no-such-python")
    assert module.peer_python(None) == (
        Path(os.environ[module.PEER_ENV]) if os.environ.get(module.PEER_ENV) else None
    )
