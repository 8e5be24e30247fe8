"""DDP peers: a rank's CUDA fault stops the other ranks within seconds; a lost or hung rank ends the others.

The faulting rank records its fault in the process group's key-value store (host-side) and waits up to
``ACK_WAIT_S`` for the others' acknowledgements (rank 0's TCPStore must live until they read it). The
others read it from a :class:`Poller` thread (their main thread may be stuck in a collective), say which
rank faulted and end with ``EXIT_PEER_FAULT``. A rank that is gone or hangs fails the next collective
(gloo: at once; a hang: after ``trainer.strategy.timeout``): the entry decorator then ends this rank with
``EXIT_PEER_LOST`` and a message that says so (errors are recognised by their text).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from ocr.machine.distributed import launch_info
from ocr.run.faults import (
    EXIT_PEER_FAULT,
    EXIT_PEER_LOST,
    end_process,
    error_record,
    exception_chain,
    log_file_only,
)
from ocr.run.folder import failure_written, record_failure, written_by_this_process

__all__ = [
    "ACK_WAIT_S",
    "PeerLostError",
    "Poller",
    "announce_fault",
    "default_store",
    "exit_on_lost_peer",
    "find_lost_peer",
    "lost_peer_reported",
    "peer_fault",
    "peer_watch",
    "stop_for_peer",
    "wait_for_acks",
]

log = logging.getLogger(__name__)

STORE_KEY = "ocr/cuda_fault"
ACK_KEY = "ocr/cuda_fault/acks"
POLL_S = 1.0
ACK_WAIT_S = 3.0
STORE_ERRORS = (RuntimeError, OSError, ValueError)  # torch.distributed.DistError is a RuntimeError


def default_store() -> Any | None:
    """The default process group's store (TCPStore, FileStore, ...), or None outside DDP."""
    try:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return None
        # Private, but the only handle on the store every rank already shares (torch 2.x).
        return dist.distributed_c10d._get_default_store()
    except (ImportError, *STORE_ERRORS, AttributeError):
        return None


def announce_fault(store: Any, record: dict[str, Any], key: str = STORE_KEY) -> None:
    """Record this rank's fault (or, under another ``key``, its stall) for the others; the first rank to
    announce keeps the record."""
    try:
        store.compare_set(key, "", json.dumps(record))
    except STORE_ERRORS as exc:
        log.warning("Could not tell the other ranks (%s: %s): they stop at their timeout", key, exc)


def peer_fault(store: Any, rank: int, key: str = STORE_KEY) -> dict[str, Any] | None:
    """Another rank's record under ``key`` (a CUDA fault by default), or None (none yet, or no store)."""
    try:
        if not store.check([key]):
            return None
        record: dict[str, Any] = json.loads(store.get(key))
    except STORE_ERRORS:
        return None
    return record if record.get("rank") != rank else None


def wait_for_acks(store: Any, peers: int, seconds: float) -> int:
    """Wait up to ``seconds`` until ``peers`` ranks acknowledged the fault; returns how many did."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            acks = int(store.add(ACK_KEY, 0))
        except STORE_ERRORS:
            return 0
        if acks >= peers or time.monotonic() >= deadline:
            return acks
        time.sleep(0.05)


def stop_for_peer(store: Any, record: dict[str, Any], rank: int) -> NoReturn:
    """Say which rank faulted and where its report is, acknowledge, end with ``EXIT_PEER_FAULT``."""
    message = (
        f"CUDA FAULT on rank {record.get('rank')} ({record.get('kind')} in {record.get('where')}): "
        f"{record.get('summary')}. This rank ({rank}) stops too, with exit code {EXIT_PEER_FAULT}: the "
        f"collectives it waits for can no longer complete. The faulting rank's report: "
        f"{record.get('failure')}, {record.get('crash')}"
    )
    with contextlib.suppress(*STORE_ERRORS):
        store.add(ACK_KEY, 1)
    end_process(EXIT_PEER_FAULT, [(message, None)])


class Poller:
    """A daemon thread that calls ``poll`` every ``interval_s`` seconds from :meth:`start` until :meth:`stop`
    (the peer-fault watch, the stall watchdog)."""

    def __init__(self, name: str, interval_s: float, poll: Callable[[], None]) -> None:
        self.name, self.interval_s, self.poll = name, interval_s, poll
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` was called (a poll may be running still)."""
        return self._stop.is_set()

    def start(self) -> None:
        """Start polling (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, join_s: float = 0.0) -> None:
        """Stop polling (idempotent); wait up to ``join_s`` for the thread to end."""
        self._stop.set()
        if join_s and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=join_s)
        self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()


def peer_watch(store: Any, rank: int) -> Poller:
    """A poller that stops this rank when another rank records a CUDA fault."""

    def poll() -> None:
        record = peer_fault(store, rank)
        if record is not None and not watch.stopped:
            stop_for_peer(store, record, rank)

    watch = Poller("cuda-fault-peer-watch", POLL_S, poll)
    return watch


# What gloo, NCCL and the TCP store say when the other end of a connection has gone away...
GONE_MARKERS = (
    "Connection reset by peer",
    "Connection closed by peer",
    "Broken pipe",
    "remote process exited",
    "Connection refused",
)
# ... and when it has not answered within the timeout.
TIMEOUT_MARKERS = ("Timed out waiting", "Socket Timeout", "timed out after", "wait timeout")
# Error types of torch.distributed and of the transports under it (recognised by name).
DIST_TYPES = frozenset(
    {"DistError", "DistBackendError", "DistNetworkError", "DistStoreError", "RuntimeError"}
)
TRANSPORT_MARKERS = ("gloo", "nccl", "NCCL", "TCPStore", "c10d", "torch.distributed", "Store")


class PeerLostError(RuntimeError):
    """This rank stops because another rank of the run is gone or hangs (the transport error is its cause)."""


def _lost(error: BaseException) -> str | None:
    names = {cls.__name__ for cls in type(error).__mro__}
    if not names & DIST_TYPES:
        return None
    text = str(error)
    dist_type = bool(names & (DIST_TYPES - {"RuntimeError"}))
    if not dist_type and not any(marker in text for marker in TRANSPORT_MARKERS):
        return None
    if any(marker in text for marker in GONE_MARKERS):
        return "gone"
    if any(marker in text for marker in TIMEOUT_MARKERS):
        return "timeout"
    return None


def find_lost_peer(exception: BaseException) -> tuple[BaseException, str] | None:
    """The innermost error of ``exception``'s chain that says a peer is ``"gone"`` or hit a ``"timeout"``."""
    found = [(error, how) for error in exception_chain(exception) if (how := _lost(error)) is not None]
    return found[-1] if found else None


def lost_peer_reported(run_dir: Path) -> bool:
    """Whether ``run_dir/.FAILURE`` reports a lost peer (a rank's own error, the cause, may replace it)."""
    try:
        with open(Path(run_dir) / ".FAILURE", encoding="utf-8") as handle:
            return PeerLostError.__name__ in handle.readline()
    except OSError:
        return False


def exit_on_lost_peer(exception: BaseException, run_dir: Path) -> None:
    """For the entry decorator: end the process here when ``exception`` says a peer is lost, writing
    ``.FAILURE`` unless another rank reported its own failure first (the transport's traceback: log file)."""
    found = find_lost_peer(exception)
    if found is None:
        return
    error, how = found
    info = launch_info()
    who = f"rank {info.rank if info.rank is not None else '?'} of {info.world_size}"
    where = f" (node {info.node_rank})" if info.node_rank is not None else ""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    cause = (
        "another process of this run has ended (killed, out of memory, pre-empted, or its node went down)"
        if how == "gone"
        else "another process of this run did not answer within the process group's timeout "
        "(trainer.strategy.timeout): it hangs, or its node is unreachable"
    )
    message = (
        f"LOST CONTACT WITH THE OTHER RANKS: {who}{where}: {cause}; {type(error).__name__}: {first}. "
        f"Its own log says why: train.log or train-node<n>-rank<k>.log in {Path(run_dir)}, or its launcher's "
        f"output on its node. This rank stops too, with exit code {EXIT_PEER_LOST}. Continue the run "
        f"with: runners/train.py resume={Path(run_dir)} (docs/distributed.md)"
    )
    log_file_only(error_record("The error that showed the lost peer:", exception))
    # Another rank's report since this run started is the cause; keep it (unless it is a lost peer too).
    if not failure_written(run_dir) or written_by_this_process(run_dir) or lost_peer_reported(run_dir):
        failure = PeerLostError(message)
        failure.__cause__ = error
        record_failure(run_dir, failure)
    end_process(EXIT_PEER_LOST, [(message, None)])
