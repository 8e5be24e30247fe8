"""report.html rendered by a headless Chromium: the cards and outcome counts in the DOM, no script error."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ocr.reporting.analysis import analyse_records
from ocr.reporting.html import write_report
from tests.helpers.report_cases import OPTIONS, labelled_records, report_data

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _browser() -> str:
    for name in BROWSERS:
        if path := shutil.which(name):
            return path
    pytest.skip(f"no headless browser on PATH (looked for {', '.join(BROWSERS)}; apt-get install chromium)")


def _chromium(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000"]
    return subprocess.run([browser, *flags, *args], capture_output=True, text=True, timeout=120)


def test_rendered_page_shows_every_card_and_the_metric_counts(tmp_path: Path) -> None:
    browser = _browser()
    images = tmp_path / "images"
    images.mkdir()
    records = labelled_records(images, num_images=5)
    analysis = analyse_records(records, OPTIONS, [8, 16, 32], worst=2)
    page = write_report(
        tmp_path / "run", records, images, OPTIONS, "browser test", analysis, inline_max_bytes=0
    )
    data = report_data(page.read_text())
    dom = _chromium(browser, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body is not None, dom.stdout[:2000]
    assert 'data-status="rendered"' in body.group(1), body.group(1)
    assert "data-error" not in body.group(1)
    assert len(re.findall(r'<div class="card"', dom.stdout)) == len(records)
    totals = dict(re.findall(r'<span data-total="(\w+)">[^<]*<b>([^<]*)</b>', dom.stdout))
    cards = data["cards"]
    for name in ("split", "merged", "missed", "false_positive", "gt", "det"):
        assert int(totals[name]) == sum(c["counts"][name] for c in cards), name
    assert int(totals["split"]) == sum(c["gt_outcome"].count("split") for c in cards) > 0
    assert totals["hmean"] == f"{100 * data['totals']['hmean']:.1f}"
    # Where the score goes, above the cards: one row per text-height bucket and a link per worst image.
    heights = re.search(r'<table data-table="text height[^"]*">(.*?)</table>', dom.stdout, re.S)
    assert heights is not None and heights.group(1).count("<tr>") == 1 + 4
    assert (
        f"<td>{100 * analysis.buckets[2].recall:.1f}</td>" in heights.group(1)
        and analysis.buckets[2].recall > 0
    )
    assert re.findall(r'<a href="#">([^<]*)</a>', dom.stdout) == analysis.worst
    # Cards in view get their image and polygons, coloured by outcome (the first card has every kind).
    drawn = re.findall(r'<polygon[^>]*data-outcome="(\w+)"', dom.stdout)
    assert {"matched", "split", "merged", "missed", "ignored"} <= set(drawn)
    shot = tmp_path / "shot.png"
    result = _chromium(browser, f"--screenshot={shot}", "--window-size=1200,900", page.as_uri())
    assert result.returncode == 0 and shot.stat().st_size > 10_000, result.stderr[-2000:]


def test_a_name_holding_markup_renders_with_the_page(tmp_path: Path) -> None:
    browser = _browser()
    images = tmp_path / "images"
    images.mkdir()
    records = labelled_records(images, num_images=2)
    records[0]["image_id"] = "<!--<script>x.jpg"  # missing on disk: the card shows without its image
    page = write_report(tmp_path / "run", records, images, OPTIONS, "markup")
    dom = _chromium(browser, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body is not None and 'data-status="rendered"' in body.group(1), dom.stdout[:2000]
    assert len(re.findall(r'<div class="card"', dom.stdout)) == 2
