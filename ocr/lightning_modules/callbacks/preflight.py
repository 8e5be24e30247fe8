"""Preflight: the fast machine checks (``ocr.machine.checks``; ``python -m ocr.doctor`` runs them too) and the
space for a checkpoint, at the start of every run, saved as ``<run dir>/preflight.json``."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Callback

from ocr.checkpoints.saving import estimate_checkpoint_bytes
from ocr.lightning_modules.callbacks.rundir import resolve_run_dir
from ocr.machine.checks import CheckResult, fast_checks, format_table, rate_missing_gpu, worst_status
from ocr.machine.environment import driver_version
from ocr.utils.errors import UsageError
from ocr.utils.io import atomic_write_json, format_mib, free_bytes

__all__ = ["Preflight", "PreflightError", "check_checkpoint_space"]

log = logging.getLogger(__name__)


class PreflightError(UsageError, RuntimeError):
    """A preflight check failed and ``fail_on_error`` is set."""


def check_checkpoint_space(checkpoint_dir: Path, checkpoint_bytes: int) -> CheckResult:
    """Free space where checkpoints go against one checkpoint of the run's model: fails below one,
    warns below three (the best, ``last.ckpt`` and the one being written)."""
    free, folder = free_bytes(checkpoint_dir)
    detail = (
        f"{format_mib(free)} free in {folder}; one checkpoint of this model needs about "
        f"{format_mib(checkpoint_bytes)}"
    )
    fix = "free some space, or write the run elsewhere with hydra.run.dir=<folder on a larger disk>"
    if free < checkpoint_bytes:
        return CheckResult("disk", "fail", detail, fix)
    if free < 3 * checkpoint_bytes:
        return CheckResult("disk", "warn", detail + " (3 for best, last and one being written)", fix)
    return CheckResult("disk", "ok", detail)


class Preflight(Callback):
    """Runs the fast doctor checks once per run at fit start; logs the table, saves ``preflight.json``.

    The disk row checks the space for one checkpoint of the model; too little always stops the run.

    Args:
        dirpath: run directory; ``None`` uses ``trainer.default_root_dir``.
        fail_on_error: raise :class:`PreflightError` when a check fails (else only log it).
    """

    def __init__(self, *, dirpath: str | None, fail_on_error: bool) -> None:
        self.dirpath = dirpath
        self.fail_on_error = fail_on_error
        self.results: list[CheckResult] = []

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or self.results or not trainer.is_global_zero:
            return
        run_dir = resolve_run_dir(self.dirpath, trainer)
        # The generic disk row is replaced by one that knows this model's checkpoint size.
        checkpoint_dir = Path(getattr(trainer.checkpoint_callback, "dirpath", None) or run_dir)
        disk = check_checkpoint_space(checkpoint_dir, estimate_checkpoint_bytes(pl_module))
        checks = [r for r in fast_checks(run_dir) if r.name != "disk"] + [disk]
        self.results = rate_missing_gpu(checks, driver_version())
        verdict = worst_status(self.results)
        table = format_table(self.results)
        if verdict == "ok":
            log.info("Preflight checks (full report: python -m ocr.doctor):\n%s", table)
        else:
            log.warning("Preflight checks found problems:\n%s", table)
        if disk.status == "fail":  # whatever fail_on_error says: the first checkpoint would fail
            raise PreflightError(f"Not enough disk space for a checkpoint: {disk.detail}. Fix: {disk.fix}")
        atomic_write_json(
            run_dir / "preflight.json", {"verdict": verdict, "checks": [r.to_dict() for r in self.results]}
        )
        if verdict == "fail" and self.fail_on_error:
            failed = [r.name for r in self.results if r.status == "fail"]
            raise PreflightError(
                f"preflight checks failed: {failed}; see {run_dir / 'preflight.json'} "
                "<callbacks.preflight.fail_on_error=true>"
            )
