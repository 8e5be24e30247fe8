"""One path for validation, test, the sweep's cached logits and predict with either backend: every image
is post-processed by ``EvalPipeline``'s workers, never by the synchronous batch call, and each runner ends
with the figures of where the time went."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from omegaconf import DictConfig

from ocr.evaluation.pipeline import EvalPipeline
from ocr.lightning_modules.detection_module import DetectionModule
from ocr.models.postprocess import DBPostProcessor

pytestmark = pytest.mark.slow  # five runner calls and an export: about a minute on 2 busy cores

Compose = Callable[[str, list[str], Path], DictConfig]
Runner = Callable[[str], ModuleType]
CLOSING = (
    r"^{stage}: 3 images in [\d.]+ s, [\d.]+ img/s, network \d+% of the time \| "
    r"data [\d.]+ s, network [\d.]+ s, "
    r"post-processing [\d.]+ s in 1 worker thread \(main thread waited [\d.]+ s\)"
)


def test_val_test_sweep_and_both_predict_backends_post_process_in_the_pipeline(
    tmp_path: Path,
    tiny_checkpoint: Path,
    small_images: Path,
    tiny_run: list[str],
    compose_cfg: Compose,
    runner_module: Runner,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    export_cfg = compose_cfg(
        "export", [f"ckpt={tiny_checkpoint}", f"parity.image_dir={small_images}"], tmp_path / "export"
    )
    onnx_model = runner_module("export").export(export_cfg)["model"]  # its parity check post-processes
    handed: list[tuple[bool, int]] = []  # (scored, images) per batch handed to the pipeline
    forwards: list[int] = []
    submit, forward = EvalPipeline._submit, DetectionModule.forward

    def spy(self: EvalPipeline, maps: Any, batch: Any, scored: bool) -> Any:
        handed.append((scored, len(batch["image_id"])))
        return submit(self, maps, batch, scored)

    def counting(self: DetectionModule, images: Any) -> Any:
        forwards.append(int(images.shape[0]))
        return forward(self, images)

    def synchronous(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("post-processing ran synchronously, outside the pipeline")

    monkeypatch.setattr(EvalPipeline, "_submit", spy)
    monkeypatch.setattr(DetectionModule, "forward", counting)
    monkeypatch.setattr(DBPostProcessor, "__call__", synchronous)
    # Threads: the spy and the guard above hold in the workers too.
    common = [*tiny_run, f"data.root={tmp_path / 'data'}", "pipeline.kind=thread", "pipeline.workers=1"]
    runs = iter(range(10))

    def run(name: str, *overrides: str) -> tuple[Any, set[bool], str]:
        handed.clear()
        forwards.clear()
        cfg = compose_cfg(name, [*common, *overrides], tmp_path / f"run{next(runs)}")
        result = getattr(runner_module(name), "evaluate" if name == "test" else "predict")(cfg)
        assert sum(images for _, images in handed) == 3, handed  # every image, once
        return result, {scored for scored, _ in handed}, capsys.readouterr().out

    _, scored, out = run("test", f"ckpt={tiny_checkpoint}", "split=val")
    assert scored == {True} and re.search(CLOSING.format(stage="val"), out, re.M), out
    cache = [f"ckpt={tiny_checkpoint}", "prob_cache.enabled=true", f"prob_cache.dir={tmp_path / 'cache'}"]
    computed, scored, out = run("test", *cache)
    assert scored == {True} and re.search(CLOSING.format(stage="test"), out, re.M), out
    cached, scored, out = run("test", *cache)  # the sweep's path: every image's logits from the cache
    assert forwards == [] and scored == {True} and cached == computed
    images = [f"image_dir={small_images}", "report.enabled=false"]
    torch_paths, scored, out = run("predict", f"ckpt={tiny_checkpoint}", *images)
    assert scored == {False} and re.search(CLOSING.format(stage="predict"), out, re.M), out
    onnx_paths, scored, out = run("predict", "backend=onnx", f"onnx_model={onnx_model}", *images)
    assert forwards == [] and scored == {False}  # ONNX Runtime's network, the same pipeline
    assert re.search(CLOSING.format(stage="predict"), out, re.M), out
    assert Path(onnx_paths["submission"]).read_text() == Path(torch_paths["submission"]).read_text()
