"""scripts/benchmark_predict.py --emulate-ms: the network replaced by a fixed time per batch, the real
post-processing behind it, one row per pool; the maps cache spares the network the next time."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

from ocr.lightning_modules.detection_module import DetectionModule
from tests.helpers.paths import REPO_ROOT
from tests.helpers.scripts import load_script, receipt_images
from tests.helpers.tiny_checkpoint import tiny_checkpoint

ROW = (
    r"^\| 5 \| 2 \| 3 \| (?P<network>[\d.]+) \| (?P<per_image>[\d.]+) / [\d.]+ \| {pool} "
    r"\| (?P<bound>[\d.]+) \| [\d.]+ \| (?P<ratio>[\d.]+) \|$"
)


def test_emulated_network_rows_per_pool_and_a_cached_second_run(
    tmp_path: Path, tiny_run: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load_script("benchmark_predict")
    images = receipt_images(tmp_path / "images", 3, 96, 10)
    (tmp_path / "ckpt").mkdir()
    ckpt = tiny_checkpoint(tmp_path / "ckpt", tiny_run)
    forwards: list[int] = []
    forward = DetectionModule.forward

    def counting(self: DetectionModule, batch_images):  # type: ignore[no-untyped-def]
        if not isinstance(self.net, module.EmulatedNetwork):  # the real network
            forwards.append(int(batch_images.shape[0]))
        return forward(self, batch_images)

    monkeypatch.setattr(DetectionModule, "forward", counting)
    args = [
        *("--ckpt", str(ckpt), "--images", str(images), "--num-images", "3", "--long-side", "96"),
        *("--batches", "2", "--passes", "1", "--emulate-ms", "5", "--maps-cache", str(tmp_path / "maps")),
        "--pools",
        "thread:1,inline:0",
    ]
    overrides = [o for o in tiny_run if not o.startswith("data.eval_transform.long_side=")]
    table = module.main([*args, *overrides])
    # The real network ran once per image (2 + 1, two per forward pass), not in the emulated passes.
    assert forwards == [2, 1]
    for pool in ("thread x 1", "inline x 0"):
        row = re.search(ROW.format(pool=pool), table, re.M)
        assert row is not None, table
        # A full batch of 2 at 96 px takes 5 ms: 400 img/s; the last batch holds one image in 2.5 ms.
        assert float(row["network"]) == pytest.approx(3 / 0.0075, rel=1e-3)
        assert float(row["bound"]) <= float(row["network"]) and float(row["per_image"]) > 0
    forwards.clear()
    assert re.search(ROW.format(pool="thread x 1"), module.main([*args, *overrides]), re.M)
    assert forwards == []  # the maps came from the cache


def test_the_script_runs_from_the_command_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["benchmark_predict.py", "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(REPO_ROOT / "scripts" / "benchmark_predict.py"), run_name="__main__")
    assert exit_info.value.code == 0 and "--emulate-ms" in capsys.readouterr().out
