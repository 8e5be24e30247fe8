"""The summary of a post-processing sweep (``runners/test.py -m ...``): every job's P/R/H sorted by hmean,
failed jobs listed, and the best job's command line (docs/reporting.md).

:class:`SweepSummary` (a Hydra callback, configs/test.yaml) records each job beside its ``metrics.json``
and rewrites the summary from the job folders, so a sweep stopped by a failed job still leaves its table.
"""

from __future__ import annotations

import json
import logging
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from ocr.utils.io import atomic_write_csv, atomic_write_json, atomic_write_text

__all__ = ["JOB_FILE", "SweepRow", "SweepSummary", "best_command", "read_sweep", "write_sweep_summary"]

log = logging.getLogger(__name__)

JOB_FILE = "sweep_job.json"
METRICS_FILE = "metrics.json"
SUMMARY_NAME = "sweep_summary"
COMMAND = "uv run runners/test.py"
# Sweep-time choices the best command leaves out: it scores the picked settings on the test split, with
# its report.
SWEEP_ONLY_KEYS = ("split", "report.enabled", "prob_cache.enabled", "prob_cache.dir")


@dataclass(frozen=True)
class SweepRow:
    """One job of the sweep; scores are None for a job that failed."""

    job: int
    status: str  # completed | failed
    overrides: list[str]
    precision: float | None
    recall: float | None
    hmean: float | None
    error: str | None


def _scores(job_dir: Path) -> tuple[float | None, float | None, float | None]:
    path = job_dir / METRICS_FILE
    if not path.is_file():
        return None, None, None
    record = json.loads(path.read_text(encoding="utf-8"))
    metrics, split = record["metrics"], record["split"]
    return tuple(metrics.get(f"{split}/{name}") for name in ("precision", "recall", "hmean"))  # type: ignore[return-value]


def read_sweep(sweep_dir: Path) -> list[SweepRow]:
    """Every recorded job under ``sweep_dir``: completed ones by hmean (best first), then failed ones (a
    job that wrote no scores among them)."""
    rows = []
    for job_file in sweep_dir.glob(f"*/{JOB_FILE}"):
        job = json.loads(job_file.read_text(encoding="utf-8"))
        precision, recall, hmean = _scores(job_file.parent)
        status, error = job["status"], job.get("error")
        if status == "completed" and hmean is None:
            status, error = "failed", f"no scores in {job_file.parent / METRICS_FILE}"
        rows.append(SweepRow(job["num"], status, job["overrides"], precision, recall, hmean, error))
    return sorted(rows, key=lambda r: (r.hmean is None, -(r.hmean or 0.0), r.job))


def _settings(row: SweepRow) -> dict[str, str]:
    """The job's overrides as key -> value."""
    return dict(item.partition("=")[::2] for item in row.overrides)


def best_command(rows: list[SweepRow]) -> str | None:
    """The best completed job's command line on the test split, without ``SWEEP_ONLY_KEYS`` (None: none)."""
    best = next((r for r in rows if r.status == "completed"), None)
    if best is None:
        return None
    kept = [o for o in best.overrides if o.lstrip("+~").partition("=")[0] not in SWEEP_ONLY_KEYS]
    return " ".join([COMMAND, *map(shlex.quote, kept)])


def _markdown(rows: list[SweepRow], keys: list[str]) -> str:
    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    lines = [
        "| " + " | ".join(["rank", "job", *keys, "precision", "recall", "hmean", "status"]) + " |",
        "|" + " --- |" * (len(keys) + 6),
    ]
    for rank, row in enumerate(rows, start=1):
        settings = _settings(row)
        status = row.status if row.error is None else f"{row.status}: {row.error}"
        cells = [str(rank), str(row.job), *(settings.get(k, "") for k in keys)]
        cells += [fmt(row.precision), fmt(row.recall), fmt(row.hmean), status.replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _csv_rows(rows: list[SweepRow], keys: list[str]) -> list[list[Any]]:
    table: list[list[Any]] = [["rank", "job", *keys, "precision", "recall", "hmean", "status", "error"]]
    for rank, row in enumerate(rows, start=1):
        settings = _settings(row)
        table.append([rank, row.job, *(settings.get(k, "") for k in keys)])
        table[-1] += [row.precision, row.recall, row.hmean, row.status, row.error or ""]
    return table


def write_sweep_summary(sweep_dir: Path) -> tuple[str, str | None]:
    """Write ``sweep_summary.{md,csv,json}`` into ``sweep_dir``; returns the Markdown table and the best
    command line (None when no job completed)."""
    rows = read_sweep(sweep_dir)
    # The swept keys: those whose values differ between jobs, in first-seen order.
    settings = [_settings(r) for r in rows]
    keys = [k for k in dict.fromkeys(k for s in settings for k in s) if len({s.get(k) for s in settings}) > 1]
    table = _markdown(rows, keys)
    best = best_command(rows)
    failed = [r.job for r in rows if r.status != "completed"]
    atomic_write_text(sweep_dir / f"{SUMMARY_NAME}.md", table + (f"\nBest: `{best}`\n" if best else ""))
    atomic_write_csv(sweep_dir / f"{SUMMARY_NAME}.csv", _csv_rows(rows, keys))
    atomic_write_json(
        sweep_dir / f"{SUMMARY_NAME}.json",
        {"swept": keys, "best_command": best, "failed_jobs": failed, "rows": [asdict(r) for r in rows]},
    )
    return table, best


class SweepSummary(Callback):
    """Hydra callback: the sweep's table after each job and, logged, at the end of the sweep (multirun
    only; a single run is left alone)."""

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        """Record the job in its folder and rewrite the sweep's summary."""
        if config.hydra.mode != RunMode.MULTIRUN:
            return
        record: dict[str, Any] = {
            "num": int(config.hydra.job.num),
            "overrides": list(job_return.overrides or []),
            "status": "completed" if job_return.status == JobStatus.COMPLETED else "failed",
        }
        if job_return.status != JobStatus.COMPLETED:
            error = job_return._return_value  # the exception; the public property re-raises it
            record["error"] = f"{type(error).__name__}: {error}"
        atomic_write_json(Path(config.hydra.runtime.output_dir) / JOB_FILE, record)
        write_sweep_summary(Path(config.hydra.sweep.dir))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Log the table (best first) and the best job's command line."""
        sweep_dir = Path(config.hydra.sweep.dir)
        table, best = write_sweep_summary(sweep_dir)
        log.info("Sweep summary (%s.md/.csv/.json in %s):\n%s", SUMMARY_NAME, sweep_dir, table)
        if best is None:
            log.error("Sweep: no job completed; see the status column above")
        else:
            log.info("Best settings:\n%s", best)
