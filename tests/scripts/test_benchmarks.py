"""The benchmark scripts run end to end at tiny sizes (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import REPO_ROOT


def test_benchmark_targets_prints_both_layouts() -> None:
    # A subprocess: the script refuses to run once torch is imported, as it is in the test process.
    args = ["--boxes", "6", "--size", "64", "--images", "1", "--rounds", "1"]
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "benchmark_targets.py"), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for layout in ("words", "jittered"):
        assert re.search(rf"^\| {layout} \| 6 \| [\d.]+ \| [\d.]+ \| [\d.]+x \|", result.stdout, re.M), (
            result.stdout
        )


def test_benchmark_data_reports_every_stage(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "benchmark_data", REPO_ROOT / "scripts" / "benchmark_data.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from ocr.data import dataset, transforms

    originals = (dataset.load_source, dataset.make_db_targets, transforms.TrainTransform.__call__)
    text = module.main(
        [
            *("--data", "synthetic", "--root", str(tmp_path), "--preset", "cpu", "--core", "-1"),
            *("--samples", "3", "--passes", "2", "--warmup", "1"),
            "data.synthetic.num_train=3",
            "data.synthetic.num_val=1",
            "data.synthetic.num_test=1",
            "data.synthetic.long_side=96",
            "data.train_transform.crop_size=64",
            "data.train_transform.train_long_side=96",
            "data.batch_size=2",
        ]
    )
    for stage in [*module.STAGES, "other", "total"]:
        assert re.search(rf"^\| {re.escape(stage)} \| -?[\d.]+ \| -?\d+% \|$", text, re.M), stage
    assert re.search(r"img/s per core, wall: median [\d.]+ \(passes: [\d.]+, [\d.]+\)", text)
    stage_ms = [float(m) for m in re.findall(r"^\| (?!total)[^|]+ \| (-?[\d.]+) \|", text, re.M)]
    assert sum(stage_ms) > 0
    assert (dataset.load_source, dataset.make_db_targets, transforms.TrainTransform.__call__) == originals


def test_benchmark_predict_times_both_backends_at_both_batch_sizes(
    tmp_path: Path, tiny_run: list[str]
) -> None:
    import cv2
    import numpy as np

    spec = importlib.util.spec_from_file_location(
        "benchmark_predict", REPO_ROOT / "scripts" / "benchmark_predict.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    images = tmp_path / "images"
    images.mkdir()
    for i in range(3):
        image = np.full((80, 60 + 20 * i, 3), 255, np.uint8)
        cv2.rectangle(image, (5, 10), (50, 18), (0, 0, 0), -1)
        cv2.imwrite(str(images / f"r{i}.png"), image)
    args = ["--images", str(images), "--num-images", "2", "--long-side", "64", "--batches", "2,1"]
    overrides = [o for o in tiny_run if not o.startswith("data.eval_transform.long_side=")]
    table = module.main([*args, "--passes", "1", "--workers", "0", *overrides])
    for backend in ("torch", "onnx"):
        for batch in (2, 1):
            assert re.search(rf"^\| {backend} \| cpu \| {batch} \| 64 \| 2 \| [\d.]+ \|$", table, re.M), table
