"""A rank whose peer is gone (or hangs past the timeout) ends with our message and exit code, and its
report never hides the failing rank's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ocr.run.entry import entry
from ocr.run.faults import EXIT_PEER_LOST
from ocr.run.folder import write_failure
from ocr.run.peers import exit_on_lost_peer, find_lost_peer, lost_peer_reported
from tests.helpers.exits import Exited, fake_exits

# What gloo raised on rank 0 when the process of rank 1 was killed with kill -9 (torch 2.9, two CPU nodes).
GLOO_RESET = RuntimeError(
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:59046: "
    "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the "
    "application. Check the logs of the remote worker before reporting an error. GLHF!"
)
GLOO_TIMEOUT = RuntimeError(
    "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 20000ms for recv "
    "operation to complete"
)


def _raised_during(error: BaseException) -> BaseException:
    """``error`` as Lightning hands it on: a later error raised while handling it."""
    try:
        try:
            raise error
        except BaseException:
            raise ValueError("teardown failed too") from None  # noqa: B904 (keeps __context__)
    except ValueError as outer:
        outer.__context__ = error
        return outer


@pytest.mark.parametrize("error,how", [(GLOO_RESET, "gone"), (GLOO_TIMEOUT, "timeout")])
def test_a_lost_peer_is_recognised_in_the_chain(error: BaseException, how: str) -> None:
    assert find_lost_peer(_raised_during(error)) == (error, how)


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("DataLoader worker (pid 12) timed out after 60 seconds"),  # not a collective
        ValueError("Connection reset by peer"),  # not a torch.distributed error type
        RuntimeError("CUDA error: device-side assert triggered"),
    ],
)
def test_other_errors_are_not_a_lost_peer(error: BaseException) -> None:
    assert find_lost_peer(error) is None


def test_the_rank_ends_with_our_message_and_report(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exits = fake_exits(monkeypatch)
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0", "LOCAL_WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(Exited):
        exit_on_lost_peer(_raised_during(GLOO_RESET), tmp_path)
    assert exits.codes == [EXIT_PEER_LOST]
    said = caplog.records[-1].getMessage()
    assert said.startswith("LOST CONTACT WITH THE OTHER RANKS: rank 0 of 2 (node 0): another process")
    assert f"exit code {EXIT_PEER_LOST}" in said and f"resume={tmp_path}" in said
    report = (tmp_path / ".FAILURE").read_text()
    assert "PeerLostError: LOST CONTACT" in report and "Connection reset by peer" in report
    assert lost_peer_reported(tmp_path)


def test_the_failing_ranks_own_report_is_kept_and_replaces_a_lost_peer_report(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    write_failure(run, ValueError("the cause, on another rank"))
    # As if another process of the run wrote it: this process did not.
    from ocr.run import folder as sentinels

    monkeypatch.setattr(sentinels, "_failures_written", set())
    fake_exits(monkeypatch)
    with pytest.raises(Exited):
        exit_on_lost_peer(GLOO_RESET, run)
    assert "the cause, on another rank" in (run / ".FAILURE").read_text()
    # The other way round: a lost-peer report first, then the rank with the cause fails.
    (run / ".FAILURE").unlink()
    with pytest.raises(Exited):
        exit_on_lost_peer(GLOO_RESET, run)
    monkeypatch.setattr(sentinels, "_failures_written", set())

    @entry("predict")
    def task(cfg: object) -> None:
        raise ValueError("the cause")

    with pytest.raises(ValueError):
        task(OmegaConf.create({"paths": {"output_dir": str(run)}}))
    assert "ValueError: the cause" in (run / ".FAILURE").read_text()


def test_no_lost_peer_passes_through(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    exits = fake_exits(monkeypatch)
    exit_on_lost_peer(ValueError("bad data"), tmp_path)
    assert exits.codes == [] and not (tmp_path / ".FAILURE").exists()
    assert os.listdir(tmp_path) == []
