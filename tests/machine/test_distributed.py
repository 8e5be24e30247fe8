"""What torchrun, SLURM and Lightning's launcher tell a process, and the names every rank derives from it."""

from __future__ import annotations

import logging

import pytest

from ocr.machine import distributed
from ocr.machine.distributed import (
    MultiProcessRunDirError,
    launch_info,
    rank_tag,
    run_name,
    warn_unlaunched_multi_node,
)
from tests.helpers.launch_env import SRUN_NODE1, TORCHRUN_NODE1


def test_torchrun_variables() -> None:
    info = launch_info(TORCHRUN_NODE1)
    assert (info.launcher, info.world_size, info.rank, info.local_rank) == ("torchelastic", 4, 3, 1)
    assert (info.node_rank, info.num_nodes, info.local_world_size) == (1, 2, 2)
    assert (info.master, info.run_id) == ("node0:29500", "job42")
    assert info.variables["TORCHELASTIC_RUN_ID"] == "job42" and info.multi_process


def test_srun_variables() -> None:
    info = launch_info(SRUN_NODE1)
    assert (info.launcher, info.world_size, info.rank, info.local_rank) == ("slurm", 8, 5, 1)
    assert (info.node_rank, info.num_nodes, info.local_world_size) == (1, 2, 4)
    assert (info.master, info.run_id) == ("gpu[01-02]", "777")


def test_an_interactive_slurm_shell_is_not_a_launch() -> None:
    """As Lightning: a job named bash or interactive did not start this process with srun."""
    assert launch_info({**SRUN_NODE1, "SLURM_JOB_NAME": "bash"}).launcher == "none"


def test_lightning_launcher_and_single_process() -> None:
    node1 = launch_info({"NODE_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "1234"})
    assert (node1.launcher, node1.rank, node1.node_rank, node1.multi_process) == ("lightning", None, 1, True)
    child = launch_info({"LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"})
    assert (child.rank, child.node_rank, child.world_size) == (None, 0, 2)
    alone = launch_info({})
    assert (alone.launcher, alone.world_size, alone.rank, alone.multi_process) == ("none", 1, 0, False)


@pytest.mark.parametrize(
    "rank,node,tag",
    [(0, 0, ""), (3, 1, "node1-rank3"), (1, 0, "node0-rank1"), (None, 1, "node1"), (None, 0, "")],
)
def test_rank_tag(rank: int | None, node: int | None, tag: str) -> None:
    assert rank_tag(rank, node) == tag


def test_log_names_and_the_config_record_per_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in TORCHRUN_NODE1.items():
        monkeypatch.setenv(key, value)
    assert distributed.log_name("train") == "train-node1-rank3"
    assert distributed.rank_zero_only_value(".hydra/x") is None
    assert (distributed.num_nodes(1), distributed.devices_per_node(-1)) == (2, 2)
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0"}.items():
        monkeypatch.setenv(key, value)
    assert distributed.log_name("train") == "train"
    assert distributed.rank_zero_only_value(".hydra/x") == ".hydra/x"


def test_without_a_launcher_the_preset_defaults_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(TORCHRUN_NODE1) + list(SRUN_NODE1) + ["NODE_RANK"]:
        monkeypatch.delenv(key, raising=False)
    assert (distributed.num_nodes(1), distributed.devices_per_node(-1)) == (1, -1)
    assert distributed.log_name("train") == "train"


def test_run_names_every_process_of_a_run_agrees_on() -> None:
    assert run_name("2026-11-26_10-00-00", {}) == "2026-11-26_10-00-00"
    assert run_name("2026-11-26_10-00-00", TORCHRUN_NODE1) == "torchrun-job42"
    assert run_name("2026-11-26_10-00-00", SRUN_NODE1) == "slurm-777.0"
    array = {**SRUN_NODE1, "SLURM_ARRAY_JOB_ID": "900", "SLURM_ARRAY_TASK_ID": "3"}
    assert run_name("x", array) == "slurm-900_3.0"


def test_one_node_of_torchrun_without_an_id_names_the_run_by_the_agent_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    one_node = {**TORCHRUN_NODE1, "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "WORLD_SIZE": "2"}
    one_node["TORCHELASTIC_RUN_ID"] = "none"
    monkeypatch.setattr(distributed, "_parent_started", lambda fmt: "2026-11-26_09-59-58")
    assert run_name("2026-11-26_10-00-00", one_node) == "2026-11-26_09-59-58"


def test_several_nodes_without_a_shared_name_are_refused() -> None:
    static = {**TORCHRUN_NODE1, "TORCHELASTIC_RUN_ID": "none"}
    with pytest.raises(MultiProcessRunDirError, match=r"hydra.run.dir=<folder on the shared file system>"):
        run_name("x", static)
    with pytest.raises(MultiProcessRunDirError, match="rank None of 1 on node 1"):
        run_name("x", {"NODE_RANK": "1", "MASTER_ADDR": "node0"})


def test_multi_node_without_a_launcher_says_it_trains_as_one_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="ocr.machine.distributed"):
        assert warn_unlaunched_multi_node("multi_node", env={})
        assert not warn_unlaunched_multi_node("multi_node", env=TORCHRUN_NODE1)
        assert not warn_unlaunched_multi_node("auto", env={})
    [record] = caplog.records
    assert "training as ONE process on this machine" in record.getMessage()
