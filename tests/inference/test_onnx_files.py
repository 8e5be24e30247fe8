"""A sidecar or model that cannot be used is named, with the way out, instead of a parser's traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ocr.inference.onnx_runtime import (
    SIDECAR_FORMAT,
    OnnxFileError,
    OnnxProbabilityMap,
    read_sidecar,
    sidecar_path,
)
from ocr.utils.errors import UsageError

pytest.importorskip("onnxruntime")


def _model(tmp_path: Path, sidecar: str) -> Path:
    model = tmp_path / "model.onnx"
    model.write_bytes(b"\x08\x07\x12")  # the first bytes of a protobuf, then nothing: truncated
    sidecar_path(model).write_text(sidecar)
    return model


@pytest.mark.parametrize(
    ("sidecar", "message"),
    [
        ("not json {", "the ONNX model's sidecar is not readable JSON"),
        (json.dumps({"hello": 1}), "expected the sidecar runners/export.py writes (format"),
        (json.dumps([1, 2]), "got list"),
        (json.dumps({"format": SIDECAR_FORMAT, "postprocess": {}}), "the sidecar lacks data.eval_transform"),
    ],
)
def test_a_sidecar_that_is_not_the_exports_is_named(tmp_path: Path, sidecar: str, message: str) -> None:
    model = _model(tmp_path, sidecar)
    with pytest.raises(OnnxFileError) as info:
        read_sidecar(model)
    assert str(info.value).startswith(f"{sidecar_path(model)}: ")
    assert message in str(info.value) and "export the checkpoint again" in str(info.value)
    assert isinstance(info.value, UsageError)


def test_a_truncated_model_is_named_not_onnxruntimes_traceback(tmp_path: Path) -> None:
    model = _model(tmp_path, "{}")
    with pytest.raises(OnnxFileError) as info:
        OnnxProbabilityMap(model)
    assert str(info.value).startswith(f"{model}: ONNX Runtime cannot load this model (")
    assert "Export the checkpoint again" in str(info.value)
