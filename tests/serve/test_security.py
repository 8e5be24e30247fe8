"""The web app's doors, in-process: foreign Host and Origin, POSTs without the page's token, model paths
outside the allowed ones, crafted checkpoints, and parameters of the wrong type."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from ocr.data.images import list_images
from ocr.serve.guard import TOKEN_HEADER
from tests.helpers.crafted_pickle import crafted_checkpoint

SECRET = "s3cr3t-token-0123456789abcdefghijklmn"  # 37 characters: a whole token fits the old 40-char quote


def _image(image_format: str = "PNG") -> bytes:
    pixels = np.full((64, 96, 3), 255, np.uint8)
    pixels[20:30, 10:80] = 20
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=image_format)
    return buffer.getvalue()


def _upload(client: Any, data: bytes, name: str, **headers: str) -> Any:
    return client.post("/api/upload", params={"name": name}, content=data, headers=headers)


def test_a_foreign_host_is_refused_on_every_route(serve_app: Any) -> None:
    client = serve_app()
    for url in ("/", "/api/info", "/api/split"):
        refused = client.get(url, headers={"Host": "attacker.example:8000"})
        assert refused.status_code == 400 and "Host: expected this server's own address" in refused.text
    assert client.get("/api/info", headers={"Host": "127.0.0.1:9999"}).status_code == 400  # another port
    assert client.get("/api/info", headers={"Host": "localhost:8000"}).status_code == 200


def test_a_cross_site_simple_post_stores_nothing(serve_app: Any, tmp_path: Path) -> None:
    client = serve_app()
    client.headers.pop(TOKEN_HEADER)
    foreign = {"Origin": "http://attacker.example", "Content-Type": "text/plain"}
    assert _upload(client, _image(), "x.png", **foreign).status_code == 403
    assert client.get("/api/info", headers={"Origin": "http://attacker.example"}).status_code == 403
    # Same origin but without the page's token (a form or script of another page cannot read it).
    untokened = _upload(client, _image(), "x.png", Origin="http://127.0.0.1:8000")
    assert untokened.status_code == 403 and TOKEN_HEADER in untokened.json()["error"]
    assert not (tmp_path / "uploads").exists() or not any((tmp_path / "uploads").iterdir())
    wrong = _upload(client, _image(), "x.png", **{TOKEN_HEADER: "guessed"})
    assert wrong.status_code == 403


def test_json_requests_need_a_json_content_type(serve_app: Any) -> None:
    client = serve_app()
    key = _upload(client, _image(), "ok.png").json()["key"]
    text = client.post("/api/detect", content=f'{{"key": "{key}"}}', headers={"Content-Type": "text/plain"})
    assert text.status_code == 400 and "Content-Type: expected application/json" in text.json()["error"]
    assert client.post("/api/detect", json={"key": key}).status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"thresh": "abc"}', "thresh: expected a finite number, got 'abc'"),
        ('{"thresh": [0.3]}', "thresh: expected a finite number, got [0.3]"),
        ('{"thresh": NaN}', "thresh: expected a finite number, got nan"),
        ('{"box_thresh": true}', "box_thresh: expected a finite number, got True"),
        ('{"unclip_ratio": Infinity}', "unclip_ratio: expected a finite number, got inf"),
        ('{"slot": 1}', "slot: expected a string, got 1"),
        ('{"thresh": 0.3, "colour": 1}', "colour: not a field of this request"),
        ("[1, 2]", "body: expected a JSON object, got a list"),
        ("{not json", "body: expected a JSON object, got text that is not JSON"),
    ],
)
def test_a_detect_parameter_of_the_wrong_type_is_a_400_naming_it(
    serve_app: Any, body: str, field: str
) -> None:
    client = serve_app()
    key = _upload(client, _image(), "ok.png").json()["key"]
    content = (
        body
        if not body.startswith("{") or body == "{not json"
        else body.replace("{", f'{{"key": "{key}", ', 1)
    )
    answer = client.post("/api/detect", content=content, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["error"]
    assert client.post("/api/detect", json={"key": key, "thresh": 0.3}).status_code == 200


def test_upload_names_too_long_missing_or_without_an_image_suffix(serve_app: Any) -> None:
    client = serve_app()
    long_name = _upload(client, _image(), "r" * 300 + ".png")
    assert long_name.status_code == 400
    assert long_name.json()["error"] == "name: expected a file name of at most 200 characters, got 304"
    missing = client.post("/api/upload", content=_image())
    assert missing.status_code == 400 and "name: " in missing.json()["error"]
    for data, name, stored in (
        (_image(), "receipt", "receipt.png"),
        (_image("JPEG"), "scan.dat", "scan.dat.jpg"),
    ):
        key = _upload(client, data, name).json()["key"]
        card = client.post("/api/detect", json={"key": key}).json()
        image_dir = Path(card["commands"]["predict"].split("image_dir=")[1].split()[0])
        assert list_images(image_dir) == [stored]  # what the shown predict command reads
    gif = _upload(client, _image("GIF"), "anim")
    assert gif.status_code == 400 and "anim: a GIF image; expected one of .jpg" in gif.json()["error"]


def test_model_paths_outside_the_allowed_ones_are_refused_unread(
    serve_app: Any, tmp_path: Path, tiny_checkpoint: Path
) -> None:
    allowed = tmp_path / "models"
    allowed.mkdir()
    secret = tmp_path / "token.txt"
    secret.write_text(SECRET + "\n")
    (allowed / "link.ckpt").symlink_to(secret)
    client = serve_app(f"model_dirs=[{allowed}]")
    answers = []
    for path in (secret, tmp_path / "gone.ckpt", allowed / "link.ckpt", allowed / ".." / "token.txt"):
        answer = client.post("/api/model", json={"slot": "2", "path": str(path)})
        assert answer.status_code == 400
        message = answer.json()["error"]
        assert message == (
            f"path: {str(path)!r} is neither a model the app was started with nor under its model_dirs "
            f"({allowed}), so it was not read; restart the app with model_dirs=[<folder>] to load the "
            "models of a folder"
        )
        answers.append(answer.text)
    assert not any(SECRET[:4] in text for text in answers)
    # An existing file and a missing one get the same answer: whether a path exists is not told.
    assert answers[0].replace(str(secret), "") == answers[1].replace(str(tmp_path / "gone.ckpt"), "")
    assert list(client.get("/api/info").json()["models"]) == ["1"]
    # The started model itself, and a model under model_dirs, load.
    assert client.post("/api/model", json={"slot": "2", "path": str(tiny_checkpoint)}).status_code == 200
    os.link(tiny_checkpoint, allowed / "copy.ckpt")
    assert (
        client.post("/api/model", json={"slot": "2", "path": str(allowed / "copy.ckpt")}).status_code == 200
    )
    assert client.get("/api/info").json()["models"]["2"]["name"] == str(allowed / "copy.ckpt")


def test_without_model_dirs_only_the_started_models_load(serve_app: Any, tmp_path: Path) -> None:
    client = serve_app()
    other = tmp_path / "other.ckpt"
    other.write_text(SECRET)
    answer = client.post("/api/model", json={"slot": "2", "path": str(other)})
    assert answer.status_code == 400 and "model_dirs (none)" in answer.json()["error"]
    assert SECRET[:4] not in answer.text
    assert client.post("/api/model", json={"slot": "2", "path": 3}).status_code == 400


def test_a_model_dirs_entry_that_is_not_a_folder_is_refused_at_start(serve_app: Any, tmp_path: Path) -> None:
    from ocr.utils.errors import ConfigValueError

    with pytest.raises(ConfigValueError, match=rf"model_dirs\[0\]={tmp_path / 'nope'}: expected a folder"):
        serve_app(f"model_dirs=[{tmp_path / 'nope'}]")


def test_a_crafted_checkpoint_in_model_dirs_runs_nothing(serve_app: Any, tmp_path: Path) -> None:
    allowed = tmp_path / "models"
    allowed.mkdir()
    marker = tmp_path / "ran"
    for bare in (False, True):
        evil = crafted_checkpoint(allowed / f"evil{int(bare)}.ckpt", marker, bare=bare)
        answer = serve_app(f"model_dirs=[{allowed}]").post(
            "/api/model", json={"slot": "2", "path": str(evil)}
        )
        assert answer.status_code == 400
        message = answer.json()["error"]
        assert message.startswith(f"ckpt2={evil}: ") and "not loaded" in message and "\n" not in message
    assert not marker.exists()


def test_split_images_named_with_hash_or_question_mark_are_served_url_encoded(
    serve_app: Any, tmp_path: Path
) -> None:
    from urllib.parse import quote

    from tests.helpers.receipt_fixtures import block_words, write_split

    root = tmp_path / "data"
    write_split(root, "test", {"a#1?.png": block_words(), "b c.png": block_words()})
    client = serve_app(f"data.root={root}")
    keys = sorted(row["key"] for row in _scored(client)["rows"])
    assert keys == ["test/a#1?.png", "test/b c.png"]
    page = client.get("/").text
    assert '"/api/image/" + key' in page and "var key = encodeURIComponent(current)" in page
    for key in keys:
        encoded = quote(key, safe="")  # what encodeURIComponent makes of it
        assert client.get(f"/api/image/{encoded}").headers["content-type"] == "image/jpeg"
        assert client.get(f"/api/prob/1/{encoded}").content.startswith(b"\x89PNG")


def _scored(client: Any) -> dict[str, Any]:
    import time

    for _ in range(600):
        listing = client.get("/api/split").json()
        if listing["scored"] + len(listing["failed"]) == listing["total"]:
            return listing
        time.sleep(0.1)
    raise AssertionError(f"the split was not scored in 60 s: {listing}")
