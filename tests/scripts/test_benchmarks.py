"""The benchmark scripts run end to end at tiny sizes (no timing is asserted)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.scripts import load_script, receipt_images


def test_benchmark_targets_prints_both_layouts_and_records_them(tmp_path: Path) -> None:
    # A subprocess: the script refuses to run once torch is imported, as it is in the test process.
    args = ["--boxes", "6", "--size", "64", "--images", "1", "--rounds", "1", "--record", str(tmp_path)]
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
    (recorded,) = tmp_path.glob("targets-*.json")
    record = json.loads(recorded.read_text())
    assert record["question"] == "The data pipeline" and "--boxes 6" in record["command"]
    assert [row[:2] for row in record["rows"]] == [["words", 6], ["jittered", 6]]


def test_benchmark_data_reports_every_stage(tmp_path: Path) -> None:
    module = load_script("benchmark_data")
    from ocr.data import dataset, transforms

    originals = (dataset.load_source, dataset.make_db_targets, transforms.TrainTransform.__call__)
    text = module.main(
        [
            *("--data", "synthetic", "--root", str(tmp_path), "--preset", "cpu", "--core", "-1"),
            *("--samples", "3", "--passes", "2", "--warmup", "1", "--record", str(tmp_path / "results")),
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
    (recorded,) = (tmp_path / "results").glob("data-*.json")
    rows = json.loads(recorded.read_text())["rows"]
    assert [row[0] for row in rows] == [*module.STAGES, "other", "total"]


def test_benchmark_predict_times_both_backends_at_both_batch_sizes(
    tmp_path: Path, tiny_run: list[str]
) -> None:

    module = load_script("benchmark_predict")
    images = receipt_images(tmp_path / "images", 3, 80, 20)
    args = ["--images", str(images), "--num-images", "2", "--long-side", "64", "--batches", "2,1"]
    overrides = [o for o in tiny_run if not o.startswith("data.eval_transform.long_side=")]
    results = tmp_path / "results"
    table = module.main([*args, "--passes", "1", "--workers", "0", "--record", str(results), *overrides])
    for backend in ("torch", "onnx"):
        for batch in (2, 1):
            row = rf"^\| {backend} \| [^|]+ \| cpu \| {batch} \| 64 \| - \| 2 \| [\d.]+ \| \d+% \| - \| "
            row += r"[\d.]+ \| - \|$"  # no GT beside these images: not scored; no peer
            assert re.search(row, table, re.M), table
    (recorded,) = results.glob("predict-*.json")
    assert [row[0] for row in json.loads(recorded.read_text())["rows"]] == ["torch", "torch", "onnx", "onnx"]


def test_benchmark_gpu_default_workers_are_the_presets(tmp_path: Path) -> None:
    # --workers unset (the default, as scripts/gpu_proof.sh runs it) raised a TypeError comparing None > 0.
    module = load_script("benchmark_gpu")
    args = module.argparse.Namespace(
        device="cpu", data="synthetic", data_root=tmp_path, batch=2, size=64, workers=None, overrides=[]
    )
    cfg = module.variant_config(args, module.VARIANTS["fp32"], tmp_path)
    preset = module.compose_config("train", ["hardware=cpu"], tmp_path)
    assert cfg.data.num_workers == preset.data.num_workers
    assert cfg.data.persistent_workers == preset.data.persistent_workers
    args.workers = 0
    assert module.variant_config(args, module.VARIANTS["fp32"], tmp_path).data.persistent_workers is False


@pytest.mark.slow  # over 20 s on 2 busy cores: two tiny trainings and a generated synthetic set
def test_benchmark_gpu_measures_ceiling_and_pipeline_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ocr.data.datamodule import ReceiptDataModule

    module = load_script("benchmark_gpu")
    hook = ReceiptDataModule.on_after_batch_transfer
    moved: list[int] = []

    def spy(self: ReceiptDataModule, batch: dict, dataloader_idx: int) -> dict:
        moved.append(batch["images"].shape[0])
        return hook(self, batch, dataloader_idx)

    monkeypatch.setattr(ReceiptDataModule, "on_after_batch_transfer", spy)
    report = module.main(
        [
            *("--device", "cpu", "--data", "synthetic", "--data-root", str(tmp_path / "data")),
            *("--size", "64", "--batch", "2", "--steps", "3", "--warmup", "1", "--workers", "1"),
            *("--json", str(tmp_path / "bench.json"), "--record", str(tmp_path / "results")),
            "data.synthetic.num_train=4",
            "data.synthetic.num_val=2",
            "data.synthetic.num_test=2",
            "data.synthetic.long_side=96",
            "data.train_transform.train_long_side=96",
            "data.targets.min_text_size=2",
        ]
    )
    assert json.loads((tmp_path / "bench.json").read_text())["variants"] == report["variants"]
    # 4 images in batches of 2: 2 steps per epoch, so 3 timed steps round up to 2 epochs (4 steps).
    assert (report["steps_per_epoch"], report["warmup_steps"], report["steps"]) == (2, 2, 4)
    rows = {row["variant"]: row for row in report["variants"]}
    fp32 = rows["fp32"]
    assert fp32["skipped"] is None and fp32["ceiling_img_s"] > 0 and fp32["pipeline_img_s"] > 0
    assert fp32["ratio"] == pytest.approx(fp32["pipeline_img_s"] / fp32["ceiling_img_s"])
    assert 0 <= fp32["data_wait"] <= 1
    assert "CUDA only" in rows["compile"]["skipped"]
    # The ceiling's batches (2: the first epoch) and every pipeline batch (6) went through the
    # datamodule's hook; with bf16 measured on this CPU, its ceiling and pipeline did too.
    assert moved == [2] * (8 if rows["bf16_cl"]["skipped"] else 16)
    table = capsys.readouterr().out
    assert "| variant | ceiling img/s | pipeline img/s | ratio | data wait |" in table
    assert re.search(r"^\| fp32 \| [\d.]+ \| [\d.]+ \| [\d.]+ \| \d+ % \|$", table, re.M), table
    assert re.search(r"^\| compile \| skipped: torch\.compile is measured on CUDA only", table, re.M)
    (recorded,) = (tmp_path / "results").glob("gpu-cpu-*.json")
    assert [row[0] for row in json.loads(recorded.read_text())["rows"]] == [
        r["variant"] for r in report["variants"]
    ]


@pytest.mark.slow  # over 20 s on 2 busy cores: a tiny training with the run's callbacks
@pytest.mark.parametrize("sample_work", ["sleep", "real"])
def test_benchmark_emulated_times_the_real_loop_with_sleeps(tmp_path: Path, sample_work: str) -> None:
    module = load_script("benchmark_emulated")
    args = [*("--samples", "5", "--batch", "2", "--workers", "1", "--sample-ms", "20", "--step-ms", "10")]
    args += [*("--image-px", "64", "--steps", "3", "--warmup", "1", "--sample-work", sample_work)]
    args += ["--record", str(tmp_path / "results")]
    report = module.main([*args, "--val-every", "2", "--val-images", "2", "--json", str(tmp_path / "e.json")])
    # 5 images in batches of 2: 2 steps per epoch; 3 timed steps round up to 2 epochs after 1 of warm-up.
    assert (report["steps_per_epoch"], report["warmup_steps"], report["steps"]) == (2, 2, 4)
    assert report["ceiling_img_s"] == pytest.approx(200.0)  # 2 images per 10 ms
    assert 0 < report["pipeline_img_s"] < report["ceiling_img_s"]
    assert report["ratio"] == pytest.approx(report["pipeline_img_s"] / report["ceiling_img_s"])
    # One worker, 20 ms a sample: the loop waits for some batches (how long depends on the machine's load).
    assert 0 < report["data_wait"] <= 1 and len(report["first_batch_wait_s"]) == 3
    assert json.loads((tmp_path / "e.json").read_text())["ratio"] == report["ratio"]
    row = r"^\| 200\.0 \| [\d.]+ \| [\d.]+ \| \d+ % \| [\d.]+ s \| [\d.]+ ms \| [\d.]+ \|$"
    assert re.search(row, report["table"], re.M), report["table"]
    (recorded,) = (tmp_path / "results").glob("emulated-*.json")
    assert json.loads(recorded.read_text())["rows"][0][0] == "200.0"


def test_benchmark_emulated_paces_each_batch_on_one_timeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A late wake-up within a batch is made up by the next samples' sleeps; a batch starts afresh."""
    module = load_script("benchmark_emulated")
    now, deadlines = [0.0], []
    monkeypatch.setattr(module, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(module, "_sleep_until", deadlines.append)
    samples = module.PacedSamples(SimpleNamespace(transform=None), 0.01, built=["a", "b"], batch_size=2)
    for moment in (100.0, 100.5, 200.0, 200.011):  # the second sample woke 0.49 s late
        now[0] = moment
        samples[0]
    assert deadlines == pytest.approx([100.01, 100.02, 200.01, 200.02])
