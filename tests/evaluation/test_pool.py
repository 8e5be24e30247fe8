"""OrderedPool: batches come back in the order they were handed in, whatever order the workers finish
them in; the workers run while the calling thread goes on (the network's next pass); at most
``max_pending`` batches are out."""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import pytest
import torch

from ocr.evaluation.device_maps import HostMaps, maps_to_host
from ocr.evaluation.host_work import HostWork, ImageJob, ImageMaps, ImageOutcome
from ocr.evaluation.pool import EvaluationWorkerDiedError, OrderedPool
from ocr.geometry import letterbox_geometry
from ocr.models.postprocess import DBPostProcessor
from ocr.types import Prediction
from ocr.utils.errors import ConfigValueError

CONTEXT = multiprocessing.get_context("fork")  # what the pool forks its workers with on Linux
GEOMETRY, _ = letterbox_geometry(16, 16, 16)
POSTPROCESS = DBPostProcessor(
    thresh=0.3, box_thresh=0.5, unclip_ratio=1.5, max_candidates=10, min_size=3, output="box"
)


class GatedWork(HostWork):
    """Host work that holds the images named in ``gated`` until ``gate`` opens and reports each finished
    image on ``finished`` (thread and process workers alike: the events and queue cross a fork)."""

    def __init__(self, gated: set[str]) -> None:
        super().__init__(postprocess=POSTPROCESS, cleval=None, tables={})
        self.gated = gated
        self.gate = CONTEXT.Event()
        self.finished: Any = CONTEXT.Queue()

    def __call__(self, job: ImageJob, maps: ImageMaps) -> ImageOutcome:
        if job.image_id in self.gated and not self.gate.wait(timeout=60):
            raise TimeoutError(f"{job.image_id}: the gate never opened")
        self.finished.put(job.image_id)
        return ImageOutcome(job, Prediction(image_id=job.image_id, polygons=[], scores=[]), None, None, 0.0)


def _batch(*names: str) -> tuple[HostMaps, list[ImageJob]]:
    maps = maps_to_host(torch.zeros(len(names), 1, 16, 16), POSTPROCESS.thresh)
    return maps, [ImageJob(name, GEOMETRY, None, 0) for name in names]


def _ids(batches: list[list[ImageOutcome]]) -> list[list[str]]:
    return [[outcome.job.image_id for outcome in outcomes] for outcomes in batches]


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_a_later_batch_done_first_waits_for_the_earlier_one(kind: str) -> None:
    work = GatedWork(gated={"b0_0"})
    pool = OrderedPool(work=work, kind=kind, workers=2, max_pending=4)
    try:
        pool.submit(*_batch("b0_0"))
        pool.submit(*_batch("b1_0", "b1_1"))
        assert {work.finished.get(timeout=60) for _ in range(2)} == {"b1_0", "b1_1"}
        assert pool.collect() == []  # batch 1 is done, batch 0 is not: nothing is delivered out of order
        work.gate.set()
        assert _ids(pool.collect(wait_all=True)) == [["b0_0"], ["b1_0", "b1_1"]]
    finally:
        pool.close()


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_the_workers_finish_a_batch_while_the_calling_thread_runs_the_next_network_pass(kind: str) -> None:
    """The calling thread hands in a batch and goes on at once; the worker completes it while the caller
    is busy elsewhere (here: blocked until the worker reports), never inside ``submit`` or ``collect``."""
    work = GatedWork(gated={"b0_0"})
    pool = OrderedPool(work=work, kind=kind, workers=1, max_pending=4)
    try:
        pool.submit(*_batch("b0_0"))  # returns although the image cannot be done yet (the gate is shut)
        assert pool.collect() == []
        work.gate.set()  # the "network pass" of the next batch starts; the worker goes on meanwhile
        assert work.finished.get(timeout=60) == "b0_0"
        assert _ids(pool.collect(wait_all=True)) == [["b0_0"]]
    finally:
        pool.close()


def test_inline_does_the_work_inside_submit() -> None:
    work = GatedWork(gated=set())
    pool = OrderedPool(work=work, kind="inline", workers=0, max_pending=1)
    pool.submit(*_batch("a", "b"))
    assert work.finished.get(timeout=60) == "a" and work.finished.get(timeout=60) == "b"
    assert _ids(pool.collect()) == [["a", "b"]]


def test_more_than_max_pending_batches_make_collect_wait_for_the_oldest() -> None:
    work = GatedWork(gated={"b0_0"})
    pool = OrderedPool(work=work, kind="thread", workers=2, max_pending=1)
    opener = threading.Timer(0.2, work.gate.set)
    try:
        pool.submit(*_batch("b0_0"))
        assert pool.collect() == []  # one batch out: no wait
        pool.submit(*_batch("b1_0"))
        opener.start()
        delivered = _ids(pool.collect())  # two out: blocks until batch 0 is done
        assert work.gate.is_set() and delivered[0] == ["b0_0"]
        assert _ids(pool.collect(wait_all=True)) + delivered[1:] == [["b1_0"]]
    finally:
        opener.cancel()
        pool.close()


@pytest.mark.parametrize(
    ("kind", "workers", "pending", "message"),
    [
        ("fork", 1, 1, "pipeline.kind: expected one of"),
        ("process", 0, 1, "pipeline.workers: expected >= 1 for kind='process', got 0"),
        ("thread", 1, 0, "pipeline.max_pending_batches: expected >= 1, got 0"),
    ],
)
def test_settings_that_cannot_work_are_refused(kind: str, workers: int, pending: int, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        OrderedPool(work=GatedWork(set()), kind=kind, workers=workers, max_pending=pending)


def test_not_one_job_per_image_is_refused() -> None:
    pool = OrderedPool(work=GatedWork(set()), kind="inline", workers=0, max_pending=1)
    maps, jobs = _batch("a", "b")
    with pytest.raises(ValueError, match="expected 2 jobs \\(one per image\\), got 1"):
        pool.submit(maps, jobs[:1])


class DyingWork(HostWork):
    """Host work whose worker process kills itself on the image named ``die``."""

    def __init__(self) -> None:
        super().__init__(postprocess=POSTPROCESS, cleval=None, tables={})

    def __call__(self, job: ImageJob, maps: ImageMaps) -> ImageOutcome:
        if job.image_id == "die":
            import os
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        return ImageOutcome(job, Prediction(image_id=job.image_id, polygons=[], scores=[]), None, None, 0.0)


def test_a_worker_killed_mid_work_is_named_with_the_pool_kinds_to_try() -> None:
    """A raw BrokenProcessPool said neither that an evaluation worker died nor what to try."""
    pool = OrderedPool(work=DyingWork(), kind="process", workers=2, max_pending=4)
    try:
        pool.submit(*_batch("ok", "die"))
        with pytest.raises(EvaluationWorkerDiedError) as info:
            pool.collect(wait_all=True)
    finally:
        pool.close()
    message = str(info.value)
    assert message.startswith("an evaluation worker process died: pid ")
    assert "killed by SIGKILL" in message and "pipeline.kind=thread or pipeline.kind=inline" in message


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"kind": "fork", "workers": 1}, "pipeline.kind"),
        ({"kind": "process", "workers": 0}, "pipeline.workers"),
    ],
)
def test_bad_pool_settings_are_config_errors(settings: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigValueError, match=key):
        OrderedPool(work=DyingWork(), max_pending=1, **settings)
