"""report.html: one card per image, per-box outcomes and totals equal to the metric's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ocr.metrics.cleval.evaluate import evaluate_image
from ocr.metrics.cleval.metric import CLEvalMetric
from ocr.reporting.analysis import analyse_records
from ocr.reporting.html import write_report
from tests.helpers.report_cases import OPTIONS, labelled_records, report_data


@pytest.fixture
def images(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    return folder


def test_cards_counts_and_totals_equal_the_metric(tmp_path: Path, images: Path) -> None:
    records = labelled_records(images)
    path = write_report(tmp_path / "run", records, images, OPTIONS, "test")
    data = report_data(path.read_text())
    assert [c["name"] for c in data["cards"]] == [r["image_id"] for r in records]
    metric = CLEvalMetric(options=OPTIONS)
    for card, record in zip(data["cards"], records, strict=True):
        args = (record["polygons"], record["gt_polygons"], record["gt_ignore"], record["gt_texts"])
        result = evaluate_image(*args, OPTIONS)
        metric.update(*[[a] for a in args])
        assert card["counts"]["split"] == result.num_split == card["gt_outcome"].count("split")
        assert card["counts"]["merged"] == result.num_merged == card["det_outcome"].count("merged")
        assert (card["counts"]["gt"], card["counts"]["det"]) == (result.num_gt, result.num_det)
        assert card["hmean"] == pytest.approx(result.hmean)
        assert len(card["gt"]) == len(record["gt_polygons"]) and len(card["det"]) == len(record["polygons"])
    totals = metric.compute()
    for name in ("precision", "recall", "hmean"):
        assert data["totals"][name] == pytest.approx(float(totals[name]), abs=1e-6)
    first = data["cards"][0]
    assert first["gt_outcome"] == ["matched", "split", "merged", "merged", "missed", "ignored"]
    assert first["det_outcome"] == ["matched", "split", "split", "merged", "ignored"]
    assert data["cards"][1]["det_outcome"][4] == "false_positive"


def test_small_images_are_inlined_and_large_ones_referenced(tmp_path: Path, images: Path) -> None:
    records = labelled_records(images, num_images=2)
    inlined = report_data(write_report(tmp_path / "a", records, images, OPTIONS, "t").read_text())
    assert all(c["src"].startswith("data:image/jpeg;base64,") for c in inlined["cards"])
    referenced = report_data(
        write_report(tmp_path / "b", records, images, OPTIONS, "t", inline_max_bytes=0).read_text()
    )
    for card in referenced["cards"]:
        assert (tmp_path / "b" / card["src"]).is_file() and (tmp_path / "b" / card["prob"]).is_file()
        assert card["size"] == [200, 160]  # the original frame the polygons are drawn in


def test_unlabelled_records_and_a_missing_image(tmp_path: Path, images: Path) -> None:
    records = [
        {"image_id": r["image_id"], "polygons": r["polygons"], "scores": r["scores"]}
        for r in labelled_records(images, num_images=2)
    ]
    records.append({"image_id": "gone.png", "polygons": [], "scores": []})
    data = report_data(write_report(tmp_path / "run", records, images, None, "predict").read_text())
    assert not data["labelled"] and len(data["cards"]) == 3
    assert data["cards"][0]["det_outcome"] == ["unlabelled"] * len(records[0]["polygons"])
    assert "src" not in data["cards"][2] and "prob" not in data["cards"][2]


def test_labelled_records_need_options(tmp_path: Path, images: Path) -> None:
    with pytest.raises(ValueError, match="labelled records need CLEval options"):
        write_report(tmp_path, labelled_records(images, 1), images, None, "t")


@pytest.mark.parametrize("name", ["</script><b>x.png", "<!--<script>x.jpg", "a&b>c.png"])
def test_markup_in_a_name_cannot_break_the_page(tmp_path: Path, images: Path, name: str) -> None:
    """A "<!--<script>" used to switch the browser's parser into a state where the data block's own
    "</script>" no longer ended it, so the page's main script became data and nothing showed."""
    record = {"image_id": name, "polygons": [np.zeros((4, 2))], "scores": [0.5]}
    html = write_report(tmp_path, [record], images, None, "t").read_text()
    block = html.split('id="report-data">', 1)[1].split("</script>", 1)[0]
    assert not set("<>&") & set(block), block
    assert report_data(html)["cards"][0]["name"] == name


def test_the_page_carries_the_analysis_without_the_per_image_rows(tmp_path: Path, images: Path) -> None:
    records = labelled_records(images)
    analysis = analyse_records(records, OPTIONS, [8, 16], worst=2)
    data = report_data(write_report(tmp_path / "run", records, images, OPTIONS, "t", analysis).read_text())
    assert data["analysis"]["worst"] == analysis.worst and "images" not in data["analysis"]
    assert [b["bucket"] for b in data["analysis"]["buckets"]] == ["<8", "8-16", ">=16"]
    assert "analysis" not in report_data(
        write_report(tmp_path / "b", records, images, OPTIONS, "t").read_text()
    )
