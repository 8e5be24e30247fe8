"""The sweep summary: jobs sorted by hmean, failed jobs listed, the best command pasteable."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import OmegaConf

from ocr.reporting.sweep import SweepSummary, read_sweep, write_sweep_summary

COMMON = ["ckpt=/runs/a b/last.ckpt", "split=val"]


def _job_config(sweep_dir: Path, num: int):  # type: ignore[no-untyped-def]
    return OmegaConf.create(
        {
            "hydra": {
                "mode": RunMode.MULTIRUN,
                "job": {"num": num},
                "runtime": {"output_dir": str(sweep_dir / str(num))},
                "sweep": {"dir": str(sweep_dir)},
            }
        }
    )


def _end_job(sweep_dir: Path, num: int, thresh: float, hmean: float | None) -> None:
    """One job's end as Hydra reports it: metrics.json written by the runner (unless it failed)."""
    job_dir = sweep_dir / str(num)
    job_dir.mkdir(parents=True)
    overrides = [*COMMON, f"postprocess.thresh={thresh}"]
    if hmean is None:
        job_return = JobReturn(overrides=overrides, status=JobStatus.FAILED, _return_value=ValueError("boom"))
    else:
        scores = {"val/precision": hmean + 0.01, "val/recall": hmean - 0.01, "val/hmean": hmean}
        (job_dir / "metrics.json").write_text(json.dumps({"split": "val", "metrics": scores}))
        job_return = JobReturn(overrides=overrides, status=JobStatus.COMPLETED, _return_value=None)
    SweepSummary().on_job_end(_job_config(sweep_dir, num), job_return)


def test_rows_are_sorted_by_hmean_and_failed_jobs_are_listed_last(tmp_path: Path) -> None:
    for num, (thresh, hmean) in enumerate([(0.2, 0.5), (0.3, None), (0.4, 0.7), (0.5, 0.6)]):
        _end_job(tmp_path, num, thresh, hmean)
    rows = read_sweep(tmp_path)
    assert [r.job for r in rows] == [2, 3, 0, 1]
    assert rows[-1].status == "failed" and rows[-1].error == "ValueError: boom" and rows[-1].hmean is None
    table, best = write_sweep_summary(tmp_path)
    # The best settings on the test split: the sweep's split=val is left out.
    assert best is not None and shlex.split(best)[3:] == [COMMON[0], "postprocess.thresh=0.4"]
    lines = table.splitlines()
    assert lines[0] == "| rank | job | postprocess.thresh | precision | recall | hmean | status |"
    assert lines[2] == "| 1 | 2 | 0.4 | 0.7100 | 0.6900 | 0.7000 | completed |"
    assert lines[-1] == "| 4 | 1 | 0.3 | - | - | - | failed: ValueError: boom |"
    summary = json.loads((tmp_path / "sweep_summary.json").read_text())
    assert summary["failed_jobs"] == [1] and summary["swept"] == ["postprocess.thresh"]
    assert (tmp_path / "sweep_summary.csv").read_text().splitlines()[1].startswith("1,2,0.4,0.71,")


def test_a_job_without_scores_counts_as_failed_and_no_completed_job_has_no_best(tmp_path: Path) -> None:
    _end_job(tmp_path, 0, 0.2, None)
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "sweep_job.json").write_text(
        json.dumps({"num": 1, "overrides": [], "status": "completed"})
    )
    rows = read_sweep(tmp_path)
    assert [r.status for r in rows] == ["failed", "failed"]
    assert rows[1].error is not None and "no scores" in rows[1].error
    assert write_sweep_summary(tmp_path)[1] is None


def test_a_single_run_writes_no_summary(tmp_path: Path) -> None:
    config = _job_config(tmp_path, 0)
    config.hydra.mode = RunMode.RUN
    SweepSummary().on_job_end(config, JobReturn(overrides=[], status=JobStatus.COMPLETED))
    assert list(tmp_path.iterdir()) == []
