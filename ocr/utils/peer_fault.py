"""DDP: when one rank hits a CUDA fault, the other ranks stop too, within seconds, and say why.

The rank that faulted records its fault in the process group's key-value store (host-side: the dead
CUDA context does not touch it) before it exits. The other ranks read it from a thread that polls every
``POLL_S`` seconds (their main thread may be stuck in a collective that can no longer complete),
acknowledge it, say which rank faulted and where its report is, and end with ``EXIT_PEER_FAULT``. The
faulting rank waits up to ``ACK_WAIT_S`` for the acknowledgements, so a store it hosts (rank 0's TCPStore)
lives until the others have read it. A rank whose own error follows from the peer's exit (a broken
collective) reports the peer's fault instead.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, NoReturn

from ocr.utils.fault_exit import EXIT_PEER_FAULT, end_process

__all__ = [
    "ACK_WAIT_S",
    "POLL_S",
    "PeerWatch",
    "announce_fault",
    "default_store",
    "peer_fault",
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
    """Another rank's record under ``key`` (a CUDA fault by default), or None (none yet, or the store is
    gone)."""
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
    try:
        store.add(ACK_KEY, 1)
    except STORE_ERRORS:
        pass
    end_process(EXIT_PEER_FAULT, [(message, None)])


class PeerWatch:
    """A daemon thread that stops this rank when another rank records a CUDA fault."""

    def __init__(self, store: Any, rank: int) -> None:
        self.store = store
        self.rank = rank
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start polling (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cuda-fault-peer-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling (idempotent; the thread ends within ``POLL_S``)."""
        self._stop.set()
        self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            record = peer_fault(self.store, self.rank)
            if record is not None and not self._stop.is_set():
                stop_for_peer(self.store, record, self.rank)
