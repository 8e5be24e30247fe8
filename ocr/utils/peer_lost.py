"""DDP: another rank of the run is gone (killed, out of memory, pre-empted, its node lost) or hangs.

This rank learns it from a collective or the process group's store: over gloo the peer's closed sockets
fail the next collective at once; a peer that hangs fails it after the process group's timeout
(``trainer.strategy.timeout`` in ``hardware=multi_node``). The runners' task wrapper then ends this rank
with :data:`EXIT_PEER_LOST` and a message that says so, instead of a bare transport error (or a hang in
the interpreter's exit handlers). Standard library only: errors are recognised by their text.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ocr.machine.distributed import launch_info
from ocr.utils.cuda_fault import exception_chain
from ocr.utils.fault_exit import end_process, error_record, log_file_only
from ocr.utils.sentinels import failure_written, write_failure, written_by_this_process

__all__ = ["EXIT_PEER_LOST", "PeerLostError", "exit_on_lost_peer", "find_lost_peer", "lost_peer_reported"]

log = logging.getLogger(__name__)

EXIT_PEER_LOST = 87  # beside 84/85 (CUDA fault), 124 (stall), 86 (compute-sanitizer)
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
    """The first (innermost) error of ``exception``'s chain that says a peer is gone (``"gone"``) or did
    not answer in time (``"timeout"``), with which; None when there is none."""
    found = [(error, how) for error in exception_chain(exception) if (how := _lost(error)) is not None]
    return found[-1] if found else None


def lost_peer_reported(run_dir: Path) -> bool:
    """Whether ``run_dir/.FAILURE`` reports a lost peer (a rank's own error, the cause, may replace it)."""
    try:
        with open(Path(run_dir) / ".FAILURE", encoding="utf-8") as handle:
            return PeerLostError.__name__ in handle.readline()
    except OSError:
        return False


def _message(error: BaseException, how: str, run_dir: Path) -> str:
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
    return (
        f"LOST CONTACT WITH THE OTHER RANKS: {who}{where}: {cause}; {type(error).__name__}: {first}. "
        f"Its own log says why: train.log or train-node<n>-rank<k>.log in {run_dir}, or its launcher's "
        f"output on its node. This rank stops too, with exit code {EXIT_PEER_LOST}. Continue the run "
        f"with: runners/train.py resume={run_dir} (docs/distributed.md)"
    )


def exit_on_lost_peer(exception: BaseException, run_dir: Path) -> None:
    """For the runners' task wrapper: end the process here when ``exception`` says a peer is lost.

    Writes ``.FAILURE`` with the explanation unless another process of the run reported there first (the
    rank that failed for its own reason); the transport's traceback goes to the log file. Returns only
    when no peer was lost.
    """
    found = find_lost_peer(exception)
    if found is None:
        return
    error, how = found
    message = _message(error, how, Path(run_dir))
    log_file_only(error_record("The error that showed the lost peer:", exception))
    path = Path(run_dir) / ".FAILURE"
    # Another rank's report since this run started is the cause; keep it (unless it is a lost peer too).
    if not failure_written(run_dir) or written_by_this_process(run_dir) or lost_peer_reported(run_dir):
        failure = PeerLostError(message)
        failure.__cause__ = error
        try:
            write_failure(run_dir, failure)
        except OSError as exc:
            log.error("Could not write %s: %s", path, exc)
    end_process(EXIT_PEER_LOST, [(message, None)])
