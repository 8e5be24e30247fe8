"""runners/serve.py in a real headless Chromium (Playwright, the system's browser) on the tiny checkpoint
(tests/helpers/tiny_checkpoint.py: the tiny run's network, whose map has text; the shared 3-step training
run's map is flat at 0.01 and draws nothing): polygons drawn, a threshold moved as runners/predict.py
says, a text file refused, a second server on the same port refused, split images named with # or ?
shown.

The test writes a screenshot of the app on a real receipt (sroie-compact when present) to
``$OCR_SERVE_SCREENSHOT`` (default: the test's tmp folder); docs/images/serve.png is one.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.helpers.paths import REPO_ROOT
from tests.helpers.receipt_fixtures import block_words, make_root, write_split

pytestmark = pytest.mark.slow  # a server, a browser and one predict run: a minute or more on 2 cores

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
START_TIMEOUT_S = 300
ANSWER_TIMEOUT_MS = 120_000
SROIE = REPO_ROOT.parent / "shared" / "datasets" / "sroie-compact"


def _chromium() -> str:
    for name in BROWSERS:
        if path := shutil.which(name):
            return path
    pytest.skip(f"no Chromium on PATH (looked for {', '.join(BROWSERS)}; apt-get install chromium)")


@contextmanager
def _serving(root: Path, ckpt: Path, run_dir: Path) -> Iterator[tuple[str, list[str]]]:
    """(URL, console lines) of runners/serve.py on ``ckpt`` browsing split test of ``root``."""
    cmd = [
        sys.executable,
        "runners/serve.py",
        f"ckpt={ckpt}",
        f"data.root={root}",
        "split=test",
        "port=0",
        f"hydra.run.dir={run_dir}",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}
    process = subprocess.Popen(
        cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if "Serving on http" in line:
                found.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if not found.wait(START_TIMEOUT_S):
            pytest.fail(f"runners/serve.py printed no URL in {START_TIMEOUT_S} s:\n{''.join(lines)[-3000:]}")
        url = re.search(r"http://\S+", next(line for line in lines if "Serving on" in line))
        assert url is not None
        yield url.group(0), lines
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture
def server(tmp_path: Path, tiny_checkpoint: Path) -> Iterator[tuple[str, Path, list[str]]]:
    """(URL, checkpoint, console lines) of runners/serve.py on the tiny checkpoint, browsing the real
    receipts' test split when present (else a split of block images)."""
    root = SROIE if (SROIE / "jsons" / "test.json").is_file() else make_root(tmp_path / "blocks")
    with _serving(root, tiny_checkpoint, tmp_path / "serve") as (url, lines):
        yield url, tiny_checkpoint, lines


def _predict_count(command: str, tmp_path: Path) -> tuple[int, str]:
    """Run the predict command the page shows; the polygon count of its one image and that image."""
    args = shlex.split(command)
    assert args[:3] == ["uv", "run", "runners/predict.py"], command
    out = tmp_path / "predict"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}
    cmd = [sys.executable, *args[2:], "data.num_workers=0", "report.enabled=false", f"hydra.run.dir={out}"]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    images = json.loads((out / "predictions.json").read_text())["images"]
    assert len(images) == 1, images.keys()
    name, entry = next(iter(images.items()))
    return len(entry["words"]), name


def _count(page: Any, slot: str = "1") -> int:
    return page.locator(f"#panel-{slot} svg polygon.det").count()


def _wait_ready(page: Any) -> None:
    page.wait_for_selector("body[data-status=ready]", timeout=ANSWER_TIMEOUT_MS)


def _receipt_png(path: Path) -> Path:
    """A receipt-like image: dark text lines on white, 240 x 320 px."""
    pixels = np.full((320, 240, 3), 250, np.uint8)
    for row in range(20, 300, 28):
        pixels[row : row + 12, 20 : 20 + (row * 7) % 180 + 30] = 30
    Image.fromarray(pixels).save(path)
    return path


def test_app_in_a_browser_draws_polygons_follows_predict_and_refuses_text(
    server: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    executable = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api")
    url, _, console = server
    (tmp_path / "upload").mkdir()
    image = _receipt_png(tmp_path / "upload" / "receipt.png")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url)
        _wait_ready(page)

        page.set_input_files("#upload", str(image))
        page.wait_for_selector("#panel-1", timeout=ANSWER_TIMEOUT_MS)
        _wait_ready(page)
        initial = _count(page)
        assert initial > 0, "no polygon drawn on the uploaded receipt"

        # A threshold that changes what is drawn, to another count than none; predict.py, run with it,
        # must find as many.
        counts = {}
        for value in ("0.45", "0.2", "0.6", "0.35", "0.25", "0.8"):
            page.fill("#thresh", value)
            page.wait_for_function(
                "v => document.body.dataset.status === 'ready' && "
                "document.querySelector('#panel-1 pre.command.predict').textContent"
                ".includes('postprocess.thresh=' + v + ' ')",
                arg=f"{float(value):g}",
                timeout=ANSWER_TIMEOUT_MS,
            )
            counts[value] = _count(page)
            if counts[value] not in (0, initial):
                changed = value
                break
        else:
            pytest.fail(f"no thresh value changed the {initial} polygons drawn to another count: {counts}")
        drawn = _count(page)
        command = page.locator("#panel-1 pre.command.predict").text_content()
        assert command is not None and f"postprocess.thresh={float(changed):g}" in command
        predicted, name = _predict_count(command, tmp_path)
        assert name == image.name
        assert drawn == predicted, (
            f"page drew {drawn} polygons at thresh={changed}, predict.py found {predicted}"
        )

        notes = tmp_path / "notes.txt"
        notes.write_text("TOTAL 12.00\nthank you\n")
        page.set_input_files("#upload", str(notes))
        page.wait_for_selector("#message.show", timeout=ANSWER_TIMEOUT_MS)
        message = page.locator("#message").text_content() or ""
        assert "notes.txt: not an image" in message
        assert page.request.get(url + "api/info").ok  # still serving

        _screenshot(page, url)
        browser.close()
    assert not errors, errors
    assert not any("Traceback" in line for line in console), "".join(console)
    _second_server_on_the_same_port(url, tmp_path)


def _second_server_on_the_same_port(url: str, tmp_path: Path) -> None:
    """A second app on the first one's port exits 1 with one clear line; the first goes on serving."""
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline"}
    cmd = [
        sys.executable,
        "runners/serve.py",
        "ckpt=unused.ckpt",
        f"port={port}",
        f"hydra.run.dir={tmp_path / 'two'}",
    ]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    output = result.stdout + result.stderr
    assert f"port={port}: 127.0.0.1:{port} is already in use" in output and "Traceback" not in output
    with urllib.request.urlopen(url + "api/info", timeout=60) as response:
        assert response.status == 200


def test_split_images_named_with_hash_or_question_mark_show(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """The page URL-encodes image keys: a name holding # or ? used to cut the URL short."""
    executable = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api")
    root = tmp_path / "data"
    write_split(root, "test", {"a#1?.png": block_words()})
    with _serving(root, tiny_checkpoint, tmp_path / "serve") as (url, console):
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(url)
            page.wait_for_selector("#split div.item", timeout=ANSWER_TIMEOUT_MS)
            page.locator("#split div.item").first.click()
            page.wait_for_selector("#panel-1 figure img", timeout=ANSWER_TIMEOUT_MS)
            page.wait_for_function(
                "() => [...document.querySelectorAll('#panel-1 figure img')]"
                ".every(img => img.complete && img.naturalWidth > 0)",
                timeout=ANSWER_TIMEOUT_MS,
            )
            browser.close()
    assert not any("Traceback" in line for line in console), "".join(console)


def _screenshot(page: Any, url: str) -> None:
    """The app on a real receipt (the worst image of the split), written to $OCR_SERVE_SCREENSHOT."""
    target = os.environ.get("OCR_SERVE_SCREENSHOT")
    if not target:
        return
    page.goto(url)  # the sliders back at the model's own values
    page.wait_for_selector("#split div.item", timeout=ANSWER_TIMEOUT_MS)
    page.locator("#split div.item").first.click()
    page.wait_for_selector("#panel-1 figure", timeout=ANSWER_TIMEOUT_MS)
    _wait_ready(page)
    page.wait_for_timeout(500)  # the image itself
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=target)
