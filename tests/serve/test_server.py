"""runners/serve.py as a real server on 127.0.0.1: foreign Host and Origin refused, a crafted checkpoint
through /api/model runs nothing, no byte of a file outside model_dirs is answered, an oversized upload
is refused while it streams; host=0.0.0.0 warns in one line."""

from __future__ import annotations

import http.client
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from ocr.serve.guard import TOKEN_HEADER
from ocr.serve.images import MAX_UPLOAD_BYTES
from tests.helpers.crafted_pickle import crafted_checkpoint
from tests.serve.conftest import page_token

pytestmark = pytest.mark.slow  # a server subprocess: half a minute or more on 2 busy cores

SECRET = "s3cr3t-token-0123456789abcdefghijklmn"
MIB = 2**20
OPEN_WARNING = "the app is open to every machine"


class Client:
    """Raw HTTP to the served address, with any headers."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "", parts.port or 80

    def request(self, method: str, path: str, body: bytes | None = None, **headers: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        try:
            conn.request(
                method, path, body=body, headers={k.replace("_", "-"): v for k, v in headers.items()}
            )
            response = conn.getresponse()
            return response.status, response.read().decode("utf-8", errors="replace")
        finally:
            conn.close()


def _peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmHWM:\s+(\d+) kB", status)
    assert found is not None, status
    return int(found.group(1)) / 1024


def _stream_upload(client: Client, token: str, total: int) -> tuple[int | None, str]:
    """POST ``total`` bytes in 1 MiB chunks without a Content-Length; the answer, or None when the server
    closed the connection before the client could read one."""
    conn = http.client.HTTPConnection(client.host, client.port, timeout=120)
    try:
        conn.putrequest("POST", "/api/upload?name=big.png")
        conn.putheader(TOKEN_HEADER, token)
        conn.putheader("Content-Type", "application/octet-stream")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        chunk = b"\x89PNG" + bytes(MIB - 4)
        try:
            for _ in range(total // MIB):
                conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            conn.send(b"0\r\n\r\n")
            response = conn.getresponse()
            return response.status, response.read().decode()
        except (BrokenPipeError, ConnectionResetError):
            return None, ""
    finally:
        conn.close()


def test_the_served_app_refuses_what_could_reach_the_machine(
    serve_process: Any, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    marker = tmp_path / "ran"
    evil = crafted_checkpoint(models / "evil.ckpt", marker)
    secret = tmp_path / "token.txt"
    secret.write_text(SECRET + "\n")
    server = serve_process(f"ckpt={tiny_checkpoint}", f"model_dirs=[{models}]", "port=0")
    client = Client(server.url())
    status, page = client.request("GET", "/")
    assert status == 200
    token = page_token(page)
    answers: list[str] = []

    # DNS rebinding: the page of attacker.example reaches the port under its own name.
    for path in ("/", "/api/info", "/api/split"):
        status, text = client.request("GET", path, Host="attacker.example")
        assert status == 400 and "Host: expected" in text
        answers.append(text)
    # A cross-site "simple" POST, and a cross-site read.
    status, text = client.request(
        "POST",
        "/api/upload?name=x.png",
        b"\x89PNG",
        Content_Type="text/plain",
        Origin="http://attacker.example",
    )
    assert status == 403
    status, _ = client.request("GET", "/api/info", Origin="http://attacker.example")
    assert status == 403

    def load(path: Path) -> tuple[int, str]:
        body = json.dumps({"slot": "2", "path": str(path)}).encode()
        return client.request(
            "POST", "/api/model", body, Content_Type="application/json", **{TOKEN_HEADER: token}
        )

    status, text = load(evil)
    assert status == 400 and f"ckpt2={evil}: refused, not loaded" in json.loads(text)["error"]
    assert not marker.exists()
    for path in (secret, Path("/etc/passwd"), models / ".." / secret.name):
        status, text = load(path)
        assert status == 400 and "so it was not read" in text
        answers.append(text)
    assert not any(SECRET[:4] in text or "root:" in text for text in answers)

    # An upload declared over the limit is refused before its body is read; one streamed without a
    # Content-Length is refused once it passes the limit, never held whole in memory.
    status, text = client.request(
        "POST", "/api/upload?name=big.png", None, Content_Length=str(256 * MIB), **{TOKEN_HEADER: token}
    )
    assert status == 400 and "256 MiB, over the upload limit of 64 MiB" in text
    Path(f"/proc/{server.process.pid}/clear_refs").write_text("5")  # restart the peak RSS count
    before = _peak_rss_mib(server.process.pid)
    status, text = _stream_upload(client, token, MAX_UPLOAD_BYTES + 16 * MIB)
    assert status in (400, None), text
    assert status is None or "over the upload limit of 64 MiB" in text
    grown = _peak_rss_mib(server.process.pid) - before
    assert grown < 32, f"the server's peak RSS grew by {grown:.0f} MiB while an 80 MiB upload streamed in"
    uploads = server.run_dir / "uploads"
    assert not uploads.exists() or not list(uploads.iterdir()), list(uploads.iterdir())

    assert client.request("GET", "/api/info")[0] == 200  # still serving
    assert server.finish() in (0, -15)
    assert "Traceback" not in server.console, server.console
    assert OPEN_WARNING not in server.console


def test_a_host_other_than_loopback_warns_in_one_line(serve_process: Any, tmp_path: Path) -> None:
    server = serve_process(f"ckpt={tmp_path / 'missing.ckpt'}", "host=0.0.0.0", "port=0")
    assert server.finish() == 1  # the port is bound first, then the missing model ends the start
    warnings = [line for line in server.lines if OPEN_WARNING in line]
    assert len(warnings) == 1, server.console
    assert "host=0.0.0.0: " in warnings[0] and "without a login" in warnings[0]
    assert f"ckpt={tmp_path / 'missing.ckpt'}" in server.console and "Traceback" not in server.console
