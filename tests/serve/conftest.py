"""A served tiny checkpoint: the app of runners/serve.py in-process (FastAPI's TestClient), or the runner
itself on 127.0.0.1."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig

from tests.helpers.paths import REPO_ROOT

ADDRESS = ("127.0.0.1", 8000)  # what the in-process app believes it serves
START_TIMEOUT_S = 300


def page_token(page: str) -> str:
    """The request token the served page carries."""
    found = re.search(r'<meta name="serve-token" content="([^"]+)">', page)
    assert found is not None, page[:500]
    return found.group(1)


def app_client(cfg: DictConfig, upload_dir: Path) -> Any:
    """A TestClient of the app of ``cfg`` sending what the app's own page sends (its Host, and its token
    on a POST)."""
    from fastapi.testclient import TestClient

    from ocr.serve.guard import TOKEN_HEADER
    from ocr.serve.server import build_app

    app = build_app(cfg, upload_dir, "receipts", ADDRESS)
    client = TestClient(app, base_url=f"http://{ADDRESS[0]}:{ADDRESS[1]}")
    client.headers[TOKEN_HEADER] = page_token(client.get("/").text)
    return client


@pytest.fixture
def serve_app(
    tmp_path: Path, compose_cfg: Callable[[str, list[str], Path], DictConfig], tiny_checkpoint: Path
) -> Callable[..., Any]:
    """``serve_app(*overrides)``: :func:`app_client` of the tiny checkpoint with those overrides."""

    def make(*overrides: str) -> Any:
        cfg = compose_cfg("serve", [f"ckpt={tiny_checkpoint}", *overrides], tmp_path / "run")
        return app_client(cfg, tmp_path / "uploads")

    return make


class ServeProcess:
    """runners/serve.py in a subprocess: its URL once it serves, its pid and its console lines."""

    def __init__(self, args: list[str], run_dir: Path) -> None:
        self.run_dir = run_dir
        cmd = [sys.executable, "runners/serve.py", *args, f"hydra.run.dir={run_dir}"]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}
        self.process = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self._serving = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if "Serving on http" in line:
                self._serving.set()
        self._serving.set()  # exited

    @property
    def console(self) -> str:
        return "".join(self.lines)

    def url(self) -> str:
        """The URL it printed (fails the test when it exits or prints none in time)."""
        if not self._serving.wait(START_TIMEOUT_S) or self.process.poll() is not None:
            pytest.fail(f"runners/serve.py printed no URL:\n{self.console[-3000:]}")
        found = re.search(r"http://\S+", next(line for line in self.lines if "Serving on" in line))
        assert found is not None
        return found.group(0)

    def finish(self, timeout: float = START_TIMEOUT_S) -> int:
        """Its exit status (it is stopped first when still running)."""
        if self.process.poll() is None and self._serving.is_set():
            self.process.terminate()
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=30)
        return code


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    """``serve_process(*args)``: runners/serve.py started with ``args``; stopped after the test."""
    started: list[ServeProcess] = []

    def start(*args: str) -> ServeProcess:
        started.append(ServeProcess(list(args), tmp_path / f"serve{len(started)}"))
        return started[-1]

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.terminate()
            server.process.wait(timeout=60)
