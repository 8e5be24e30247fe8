"""The web app's API on a tiny checkpoint: uploads, live post-processing, refused inputs, a split."""

from __future__ import annotations

import io
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.serve.conftest import app_client


def _png_bytes(width: int = 200, height: int = 120) -> bytes:
    """A receipt-like image: dark text bars on white."""
    image = np.full((height, width, 3), 255, np.uint8)
    for row in range(10, height - 10, 24):
        image[row : row + 10, 20 : width - 30] = 20
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _png_header(width: int, height: int) -> bytes:
    """A PNG that only declares its size (Pillow reads the size before any pixel)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


def _upload(client: Any, data: bytes, name: str) -> Any:
    return client.post("/api/upload", params={"name": name}, content=data)


def test_upload_detect_and_controls_rerun_only_the_postprocessing(serve_app: Any) -> None:
    client = serve_app()
    assert client.get("/").status_code == 200
    info = client.get("/api/info").json()
    assert info["models"]["1"]["key"] == "ckpt" and info["split"] is None
    key = _upload(client, _png_bytes(), "receipt one.png").json()["key"]
    first = client.post("/api/detect", json={"key": key, "slot": "1"}).json()
    assert first["det"] and first["network_ms"] > 0
    assert first["det_outcome"] == ["unlabelled"] * len(first["det"])
    assert first["size"] == [200, 120]
    # The command names the upload's own folder and the values in use.
    assert "runners/predict.py" in first["commands"]["predict"]
    assert f"postprocess.thresh={first['settings']['thresh']:g}" in first["commands"]["predict"]
    strict = client.post("/api/detect", json={"key": key, "slot": "1", "box_thresh": 1.0}).json()
    assert strict["network_ms"] == 0  # the cached map
    assert strict["det"] == [] and "postprocess.box_thresh=1 " in strict["commands"]["predict"] + " "
    png = client.get(f"/api/prob/1/{key}")
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    assert client.get(f"/api/image/{key}").headers["content-type"] == "image/jpeg"


def test_refused_uploads_answer_400_and_the_app_goes_on(serve_app: Any) -> None:
    client = serve_app()
    text = _upload(client, b"total 12.00\nthank you\n", "notes.txt")
    assert text.status_code == 400
    assert "notes.txt" in text.json()["error"] and "not an image" in text.json()["error"]
    empty = _upload(client, b"", "empty.png")
    assert empty.status_code == 400 and "empty file" in empty.json()["error"]
    truncated = _upload(client, _png_bytes()[:300], "cut.png")
    assert truncated.status_code == 400 and "cut.png" in truncated.json()["error"]
    bomb = _upload(client, _png_header(40_000, 40_000), "huge.png")
    assert bomb.status_code == 400
    assert "huge.png: Image size (1600000000 pixels) exceeds limit" in bomb.json()["error"]
    wide = _upload(client, _png_header(40_000, 3_000), "wide.png")
    assert wide.status_code == 400 and "40000 x 3000 px is over the limit" in wide.json()["error"]
    unknown = client.post("/api/detect", json={"key": "nope"})
    assert unknown.status_code == 404 and "upload it again" in unknown.json()["error"]
    bad = _upload(client, _png_bytes(), "ok.png").json()["key"]
    out_of_range = client.post("/api/detect", json={"key": bad, "thresh": 3})
    assert out_of_range.status_code == 400 and "postprocess.thresh" in out_of_range.json()["error"]
    assert client.post("/api/detect", json={"key": bad}).status_code == 200  # still serving


def test_a_checkpoint_of_another_model_is_refused_by_name(serve_app: Any, tmp_path: Path) -> None:
    import torch

    client = serve_app(f"model_dirs=[{tmp_path}]")
    other = tmp_path / "other.ckpt"
    torch.save({"conv.weight": torch.zeros(3, 3)}, other)
    response = client.post("/api/model", json={"slot": "2", "path": str(other)})
    assert response.status_code == 400
    assert f"ckpt2={other}" in response.json()["error"] and "bare state dict" in response.json()["error"]
    missing = client.post("/api/model", json={"slot": "1", "path": str(tmp_path / "gone.ckpt")})
    assert missing.status_code == 400 and "gone.ckpt" in missing.json()["error"]
    assert list(client.get("/api/info").json()["models"]) == ["1"]


def test_a_second_checkpoint_that_fails_leaves_the_first_served(serve_app: Any, tmp_path: Path) -> None:
    other = tmp_path / "notes.ckpt"
    other.write_text("not a checkpoint\n")
    info = serve_app(f"ckpt2={other}").get("/api/info").json()
    assert list(info["models"]) == ["1"] and "a text file" in info["errors"]["2"]


def test_split_listed_worst_first_with_outcomes_and_two_models(
    serve_app: Any, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    from tests.helpers.receipt_fixtures import make_root

    root = make_root(tmp_path / "data")
    client = serve_app(f"data.root={root}", f"ckpt2={tiny_checkpoint}")
    for _ in range(600):
        listing = client.get("/api/split").json()
        if listing["scored"] == listing["total"]:
            break
        time.sleep(0.1)
    assert listing["total"] == 3 and listing["scored"] == 3
    hmeans = [row["1"]["hmean"] for row in listing["rows"]]
    assert hmeans == sorted(hmeans) and all("2" in row for row in listing["rows"])
    card = client.post("/api/detect", json={"key": listing["rows"][0]["key"], "slot": "2"}).json()
    assert card["gt"] and set(card["gt_outcome"]) <= {"matched", "split", "merged", "missed", "ignored"}
    assert f"data.root={root}" in card["commands"]["test"] and "split=test" in card["commands"]["test"]


def test_port_in_use_is_a_clear_error() -> None:
    from ocr.serve.server import bind_port
    from ocr.utils.errors import ConfigValueError

    taken = bind_port("127.0.0.1", 0)
    port = taken.getsockname()[1]
    with pytest.raises(ConfigValueError, match=f"port={port}: 127.0.0.1:{port} is already in use"):
        bind_port("127.0.0.1", port)
    taken.close()


@pytest.mark.slow  # an ONNX export: half a minute or more on 2 cores
def test_an_onnx_export_is_served_beside_its_checkpoint(
    tiny_checkpoint: Path, tmp_path: Path, compose_cfg: Any, runner_module: Any
) -> None:
    images = tmp_path / "parity"
    images.mkdir()
    (images / "receipt.png").write_bytes(_png_bytes())
    export = compose_cfg("export", [f"ckpt={tiny_checkpoint}", f"parity.image_dir={images}"], tmp_path / "x")
    model = runner_module("export").export(export)["model"]
    cfg = compose_cfg("serve", [f"onnx_model={model}", f"ckpt2={tiny_checkpoint}"], tmp_path / "run")
    client = app_client(cfg, tmp_path / "uploads")
    assert client.get("/api/info").json()["models"]["1"]["key"] == "onnx_model"
    key = _upload(client, _png_bytes(), "receipt.png").json()["key"]
    onnx_card = client.post("/api/detect", json={"key": key, "slot": "1", "thresh": 0.35}).json()
    torch_card = client.post("/api/detect", json={"key": key, "slot": "2", "thresh": 0.35}).json()
    assert onnx_card["det"] and len(onnx_card["det"]) == len(torch_card["det"])
    np.testing.assert_allclose(onnx_card["det"], torch_card["det"], atol=1.0)
    assert f"backend=onnx onnx_model={model}" in onnx_card["commands"]["predict"]
