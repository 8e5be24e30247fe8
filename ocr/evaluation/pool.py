"""A pool of host workers that post-processes batches while the device runs the next ones, and gives the
results back in the order the batches were handed in.

A dispatcher thread waits for each batch's device-to-host copies, then hands its images to the workers,
so the calling thread is never held by a copy. ``kind``: ``process`` (the default: the per-image work
holds the GIL), ``thread``, or ``inline`` (the calling thread does it all; for debugging).
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Literal

from ocr.evaluation.device_maps import HostMaps
from ocr.evaluation.host_work import HostWork, ImageJob, ImageMaps, ImageOutcome, init_worker, run_in_worker
from ocr.utils.errors import ConfigValueError, UsageError

__all__ = ["KINDS", "EvaluationWorkerDiedError", "OrderedPool", "PoolKind"]

log = logging.getLogger(__name__)

PoolKind = Literal["process", "thread", "inline"]
KINDS: tuple[PoolKind, ...] = ("process", "thread", "inline")


@dataclass
class _Batch:
    """One handed-in batch: its futures appear once the dispatcher has handed it to the workers."""

    maps: HostMaps
    jobs: Sequence[ImageJob]
    dispatched: threading.Event = field(default_factory=threading.Event)
    futures: list[Future[list[ImageOutcome]]] = field(default_factory=list)  # each: some images, in order
    error: BaseException | None = None


class OrderedPool:
    """Host ``work`` of handed-in batches on ``workers`` workers, results in hand-in order; :meth:`collect`
    waits for the oldest beyond ``max_pending`` batches out (bounding host memory). ValueError: unknown kind.
    """

    def __init__(self, *, work: HostWork, kind: PoolKind, workers: int, max_pending: int) -> None:
        if kind not in KINDS:
            raise ConfigValueError(f"pipeline.kind: expected one of {KINDS}, got {kind!r}")
        if kind != "inline" and workers < 1:
            raise ConfigValueError(f"pipeline.workers: expected >= 1 for kind={kind!r}, got {workers}")
        if max_pending < 1:
            raise ConfigValueError(f"pipeline.max_pending_batches: expected >= 1, got {max_pending}")
        self.work, self.kind, self.max_pending = work, kind, max_pending
        self.workers = 0 if kind == "inline" else workers
        self._pending: deque[_Batch] = deque()
        self._executor: Executor | None = None
        self._queue: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        self._dispatcher: threading.Thread | None = None
        self.wait_seconds = 0.0  # the calling thread's time blocked on results
        self._processes: dict[int, multiprocessing.process.BaseProcess] = {}

    def _start(self) -> None:
        if self._dispatcher is not None or self.kind == "inline":
            return
        if self.kind == "thread":
            self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="postprocess")
        else:
            # fork on Linux starts a worker in milliseconds; workers touch no CUDA and no torch.
            context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
            self._executor = ProcessPoolExecutor(
                self.workers, mp_context=context, initializer=init_worker, initargs=(self.work,)
            )
            # Fork the workers now, from this thread, rather than from the dispatcher thread at the first
            # batch (under fork, the first task starts them all).
            self._executor.submit(int).result()
            # CPython's own table of the workers (private): read to name a worker that dies.
            self._processes = dict(getattr(self._executor, "_processes", None) or {})
        self._dispatcher = threading.Thread(target=self._dispatch, name="postprocess-dispatch", daemon=True)
        self._dispatcher.start()

    def _dispatch(self) -> None:
        while (batch := self._queue.get()) is not None:
            try:
                batch.maps.wait()
                batch.futures = self._submit_batch(batch.jobs, batch.maps)
            except BaseException as exc:  # raised again in the calling thread, at collection
                batch.error = exc
            batch.dispatched.set()

    def _submit_batch(self, jobs: Sequence[ImageJob], maps: HostMaps) -> list[Future[list[ImageOutcome]]]:
        assert self._executor is not None  # started before any batch is queued
        if self.kind == "thread":
            return [self._executor.submit(_one, self.work, job, maps.image(i)) for i, job in enumerate(jobs)]
        # Each worker process gets about two runs of images per batch, each with one handle to the batch's
        # maps in shared memory: a handle crosses through the parent's fd server, a round trip per task.
        shared = maps.shared()
        step = max(1, -(-len(jobs) // (2 * self.workers)))
        return [
            self._executor.submit(
                run_in_worker,
                list(jobs[i : i + step]),
                shared.bitmap[i : i + step],
                shared.prob[i : i + step],
                maps.table,
            )
            for i in range(0, len(jobs), step)
        ]

    def submit(self, maps: HostMaps, jobs: Sequence[ImageJob]) -> None:
        """Hand in a batch (its copies may still be on their way): one job per image of ``maps``."""
        if len(jobs) != len(maps):
            raise ValueError(
                f"OrderedPool.submit: expected {len(maps)} jobs (one per image), got {len(jobs)}"
            )
        batch = _Batch(maps, jobs)
        if self.kind == "inline":
            started = time.perf_counter()
            maps.wait()
            batch.futures = [_done([self.work(job, maps.image(i)) for i, job in enumerate(jobs)])]
            batch.dispatched.set()
            self.wait_seconds += time.perf_counter() - started
        else:
            self._start()
            self._queue.put(batch)
        self._pending.append(batch)

    def collect(self, *, wait_all: bool = False) -> list[list[ImageOutcome]]:
        """The outcomes of the oldest complete batches, in hand-in order; waits for the oldest while more
        than ``max_pending`` are out (or for all, ``wait_all``). Raises ImageWorkError, or
        EvaluationWorkerDiedError naming the dead worker."""
        done = []
        while self._pending:
            batch = self._pending[0]
            must_wait = wait_all or len(self._pending) > self.max_pending
            if not must_wait and not (batch.dispatched.is_set() and all(f.done() for f in batch.futures)):
                break
            started = time.perf_counter()
            batch.dispatched.wait()
            try:
                if batch.error is not None:
                    raise batch.error
                outcomes = [outcome for future in batch.futures for outcome in future.result()]
            except BrokenProcessPool as exc:
                raise EvaluationWorkerDiedError(self._died()) from exc
            self.wait_seconds += time.perf_counter() - started
            self._pending.popleft()
            done.append(outcomes)
        return done

    def close(self) -> None:
        """Stop the dispatcher and the workers (outcomes not collected are dropped)."""
        if self._dispatcher is not None:
            self._queue.put(None)
            self._dispatcher.join()
            self._dispatcher = None
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        self._pending.clear()

    def _died(self) -> str:
        """Which worker process died and how, and what to try."""
        for process in self._processes.values():
            process.join(timeout=2.0)  # the pool is ending them; their exit codes may not be in yet
        dead = [
            f"pid {pid} ({_exit_reason(process.exitcode)})"
            for pid, process in self._processes.items()
            if process.exitcode is not None and process.exitcode != -signal.SIGTERM
        ]  # the pool terminates the others itself (SIGTERM) once one has died
        which = ", ".join(dead) or f"one of {self.workers} (which one could not be told)"
        return (
            f"an evaluation worker process died: {which}; the post-processing pool cannot go on. If memory "
            "ran out, lower pipeline.workers or pipeline.max_pending_batches, or run the post-processing "
            "without processes: pipeline.kind=thread or pipeline.kind=inline"
        )


class EvaluationWorkerDiedError(UsageError, RuntimeError):
    """A post-processing worker process ended while the pool was working (killed, out of memory)."""


def _exit_reason(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name}" + (", e.g. by the out-of-memory killer" if name == "SIGKILL" else "")
    return f"exit code {exitcode}"


def _done(outcomes: list[ImageOutcome]) -> Future[list[ImageOutcome]]:
    future: Future[list[ImageOutcome]] = Future()
    future.set_result(outcomes)
    return future


def _one(work: HostWork, job: ImageJob, maps: ImageMaps) -> list[ImageOutcome]:
    return [work(job, maps)]
