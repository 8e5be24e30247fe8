"""Lightning's PyTorch profiler plus a top-operators report, for ``debug=profile``.

Writes into ``dirpath``: the Chrome/Perfetto trace (``*.pt.trace.json``, open it in chrome://tracing or
https://ui.perfetto.dev), Lightning's summary (``<stage>-<filename>.txt``) and ``top_ops.txt`` with
the top operators by CUDA time (on a GPU), by CPU time and by memory.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from lightning.pytorch.profilers import PyTorchProfiler

from ocr.utils.io import atomic_write_text

__all__ = ["ReportingProfiler", "top_ops_report"]

log = logging.getLogger(__name__)

TRACE_GLOB = "*.pt.trace.json"


def top_ops_report(events: torch.autograd.profiler_util.EventList, row_limit: int) -> str:
    """Tables of the top operators by CUDA time (when recorded), CPU time and memory."""
    averages = events.key_averages()
    has_cuda = any(getattr(e, "device_time_total", 0) > 0 for e in averages)
    sections = [("CUDA time", "cuda_time_total")] if has_cuda else []
    sections += [("CPU time", "cpu_time_total"), ("CPU memory (self)", "self_cpu_memory_usage")]
    if has_cuda:
        sections.append(("CUDA memory (self)", "self_cuda_memory_usage"))
    parts = []
    for title, key in sections:
        parts.append(
            f"Top {row_limit} operators by {title} (sort_by={key})\n"
            + averages.table(sort_by=key, row_limit=row_limit)
        )
    if not has_cuda:
        parts.append("No CUDA events were recorded (CPU run): CUDA-time and CUDA-memory tables omitted.")
    return "\n\n".join(parts) + "\n"


class ReportingProfiler(PyTorchProfiler):
    """``PyTorchProfiler`` on the schedule ``wait``/``warmup``/``active`` steps (the first steps carry
    one-off start-up costs), with a ``top_ops.txt`` report of ``row_limit`` rows per table."""

    def __init__(
        self,
        *,
        dirpath: str,
        filename: str,
        row_limit: int,
        wait: int,
        warmup: int,
        active: int,
        profile_memory: bool,
        record_shapes: bool,
    ) -> None:
        super().__init__(
            dirpath=dirpath,
            filename=filename,
            export_to_chrome=True,
            row_limit=row_limit,
            schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=active),
            profile_memory=profile_memory,
            record_shapes=record_shapes,
        )
        Path(dirpath).mkdir(parents=True, exist_ok=True)
        self.report_path = Path(dirpath) / "top_ops.txt"

    def summary(self) -> str:
        text = super().summary()
        if self.function_events and self.dirpath is not None:
            directory = Path(self.dirpath)
            if not any(directory.glob(TRACE_GLOB)):
                # Runs shorter than the schedule never fire on_trace_ready: export what was recorded.
                trace = directory / f"{self.filename}.pt.trace.json"
                partial = trace.with_name(f".{trace.name}.tmp")
                self.function_events.export_chrome_trace(str(partial))
                os.replace(partial, trace)
            atomic_write_text(self.report_path, top_ops_report(self.function_events, self._row_limit))
            log.info(
                "Profiler: trace in %s (open in https://ui.perfetto.dev), top operators in %s",
                directory,
                self.report_path,
            )
        return text
