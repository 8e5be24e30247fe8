"""The one evaluation and prediction path of both LightningModules (PyTorch and ONNX Runtime): each step
hands its probability logits here, and the host work runs in :class:`~ocr.evaluation.pool.OrderedPool`
while the device goes on with the next batch; outcomes come back in batch order, to the module (CLEval
counts) and to the sinks (the report, the kept predictions). :class:`StageTimes` says where the time went."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from ocr.evaluation.device_maps import CODED_DTYPES, HostMaps, code_table, maps_to_host, probabilities_to_host
from ocr.evaluation.host_work import GroundTruth, HostWork, ImageJob, ImageOutcome
from ocr.evaluation.pool import OrderedPool, PoolKind
from ocr.metrics.cleval.options import CLEvalOptions
from ocr.models.postprocess import DBPostProcessor
from ocr.types import Batch, Prediction

__all__ = ["EvalPipeline", "OutcomeSink", "PipelineSettings", "StageTimes"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PipelineSettings:
    """How evaluation and prediction run their host work (configs/pipeline/default.yaml): pool ``kind``,
    ``workers`` and the batches in flight before a step waits for the oldest."""

    kind: PoolKind
    workers: int
    max_pending_batches: int


class OutcomeSink(Protocol):
    """Receives each image's outcome, in batch order (the report collector is one)."""

    preview_long_side: int  # the probability map it wants per image (0: none)

    def add(self, outcome: ImageOutcome) -> None:
        """Keep what it needs of one image's outcome."""
        ...


@dataclass
class StageTimes:
    """Seconds of one evaluation or prediction: ``wall`` (first step to last outcome), ``data`` (the calling
    thread between steps), ``network`` (device time on CUDA), ``postprocess`` (summed worker time) and
    ``waited`` (blocked on outcomes), for ``images`` images."""

    images: int = 0
    wall: float = 0.0
    data: float = 0.0
    network: float = 0.0
    postprocess: float = 0.0
    waited: float = 0.0

    def network_share(self, writing: float | None = None) -> float:
        """The network's share of the wall time (and of ``writing``, when given): 0..1, 0 when none passed."""
        total = self.wall + (writing or 0.0)
        return self.network / total if total > 0 else 0.0

    def summary(self, stage: str, workers: str, writing: float | None = None) -> str:
        """One line for the end of a run: images/s, the network's share of the time, and the time of each
        stage."""
        total = self.wall + (writing or 0.0)
        rate = self.images / total if total > 0 else 0.0
        parts = [
            f"data {self.data:.1f} s",
            f"network {self.network:.1f} s",
            f"post-processing {self.postprocess:.1f} s in {workers} (main thread waited {self.waited:.1f} s)",
        ]
        if writing is not None:
            parts.append(f"writing {writing:.1f} s")
        share = f"network {self.network_share(writing):.0%} of the time"
        return f"{stage}: {self.images} images in {total:.1f} s, {rate:.2f} img/s, {share} | " + ", ".join(
            parts
        )


class EvalPipeline:
    """Device reduction, host pool, ordered delivery and timing for val/test/predict steps."""

    def __init__(self, *, settings: PipelineSettings, postprocess: DBPostProcessor) -> None:
        self.settings = settings
        self.postprocess = postprocess
        self.sinks: list[OutcomeSink] = []
        self.predictions: list[Prediction] = []
        self.times = StageTimes()
        self._pool: OrderedPool | None = None
        self._pool_key: tuple[torch.device, CLEvalOptions | None] | None = None
        self._keep_predictions = False
        self._started = 0.0
        self._step_ended = 0.0
        self._network_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    @property
    def workers(self) -> str:
        """The pool in words, for the summary line."""
        if self.settings.kind == "inline":
            return "the main thread"
        kind, count = self.settings.kind, self.settings.workers
        plural = "" if count == 1 else "es" if kind == "process" else "s"
        return f"{count} worker {kind}{plural}"

    def start(self, *, device: torch.device, cleval: CLEvalOptions | None, keep_predictions: bool) -> None:
        """Begin a stage (a validation, test or predict epoch) on ``device``; scored stages pass the CLEval
        options. The pool is made once and kept while the device and options stay the same."""
        key = (device, cleval)
        if self._pool is None or self._pool_key != key:
            self.close()
            tables = {}
            if device.type == "cuda":
                tables = {name: code_table(dtype, device) for dtype, name in CODED_DTYPES.items()}
            work = HostWork(postprocess=self.postprocess, cleval=cleval, tables=tables)
            self._pool = OrderedPool(
                work=work,
                kind=self.settings.kind,
                workers=self.settings.workers,
                max_pending=self.settings.max_pending_batches,
            )
            self._pool_key = key
        self._pool.wait_seconds = 0.0
        self._keep_predictions = keep_predictions
        self.predictions = []
        self.times = StageTimes()
        self._network_events = []
        self._started = self._step_ended = time.perf_counter()

    def begin_step(self) -> None:
        """Mark the start of a step: the time since the last one ended counts as data time."""
        self.times.data += time.perf_counter() - self._step_ended

    @contextlib.contextmanager
    def network(self, device: torch.device) -> Iterator[None]:
        """Time the forward pass (and loss) inside: CUDA events on a GPU (read once, at :meth:`finish`),
        wall time elsewhere."""
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            yield
            end.record()
            self._network_events.append((begin, end))
            return
        started = time.perf_counter()
        yield
        self.times.network += time.perf_counter() - started

    def submit_logits(self, prob_logits: Tensor, batch: Batch, *, scored: bool) -> list[list[ImageOutcome]]:
        """Hand in a batch's (B, 1, H, W) probability logits; returns the outcomes of earlier batches that
        are complete (in batch order), waiting for the oldest only when too many are in flight. Scored
        batches are scored with CLEval against their labels."""
        return self._submit(maps_to_host(prob_logits, self.postprocess.thresh), batch, scored)

    def submit_probabilities(
        self, prob_map: Tensor, batch: Batch, *, scored: bool
    ) -> list[list[ImageOutcome]]:
        """:meth:`submit_logits` for a (B, 1, H, W) probability map (ONNX Runtime's output)."""
        return self._submit(probabilities_to_host(prob_map, self.postprocess.thresh), batch, scored)

    def _submit(self, maps: HostMaps, batch: Batch, scored: bool) -> list[list[ImageOutcome]]:
        if self._pool is None:
            raise RuntimeError("EvalPipeline.submit: call start() at the beginning of the stage first")
        preview = max((sink.preview_long_side for sink in self.sinks), default=0)
        jobs = [
            ImageJob(
                image_id=image_id,
                geometry=batch["geometry"][i],
                gt=GroundTruth(batch["polygons"][i], batch["ignore"][i], batch["texts"][i])
                if scored
                else None,
                preview_long_side=preview,
            )
            for i, image_id in enumerate(batch["image_id"])
        ]
        self._pool.submit(maps, jobs)
        done = self._deliver(self._pool.collect())
        self._step_ended = time.perf_counter()
        return done

    def finish(self) -> list[list[ImageOutcome]]:
        """Wait for every batch still in flight; returns their outcomes (in batch order)."""
        if self._pool is None:
            return []
        done = self._deliver(self._pool.collect(wait_all=True))
        for begin, end in self._network_events:
            self.times.network += begin.elapsed_time(end) / 1000.0  # the copies waited above came after
        self._network_events = []
        self.times.waited = self._pool.wait_seconds
        self.times.wall = time.perf_counter() - self._started
        return done

    def _deliver(self, batches: list[list[ImageOutcome]]) -> list[list[ImageOutcome]]:
        for outcomes in batches:
            for outcome in outcomes:
                self.times.images += 1
                self.times.postprocess += outcome.seconds
                if self._keep_predictions:
                    self.predictions.append(outcome.prediction)
                for sink in self.sinks:
                    sink.add(outcome)
        return batches

    def close(self) -> None:
        """Stop the pool's workers (a later :meth:`start` makes a new pool)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
            self._pool_key = None
