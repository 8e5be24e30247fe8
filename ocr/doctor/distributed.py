"""The doctor's view of a multi-node launch: what torchrun, SLURM or Lightning's launcher told this process,
and the usual mistakes (a node count or devices per node that disagree with it, too few GPUs on the node,
data that this node cannot see)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ocr.machine.checks import CheckResult
from ocr.machine.distributed import LaunchInfo, launch_info

__all__ = ["check_distributed", "describe_launch"]

HW_PRESET = "hardware=multi_node reads both from the launcher"


def describe_launch(info: LaunchInfo) -> str:
    """One line: the launcher, this process's ranks and the rendezvous."""
    if info.launcher == "none":
        return "one process: no torchrun, SLURM (srun) or Lightning launcher variables"
    parts = [
        f"{info.launcher}: rank {_known(info.rank)} of {info.world_size}",
        f"local rank {info.local_rank}",
        f"node {_known(info.node_rank)} of {_known(info.num_nodes)}",
        f"{_known(info.local_world_size)} processes per node",
        f"master {info.master or 'not set'}",
    ]
    if info.run_id:
        parts.append(f"run id {info.run_id}")
    return ", ".join(parts)


def _known(value: int | None) -> str:
    return "?" if value is None else str(value)


def _mistakes(
    info: LaunchInfo, num_nodes: int | None, devices: int | None, gpus: int, data_root: Path | None
) -> list[tuple[str, str]]:
    """(problem, fix) pairs."""
    launched = info.launcher in ("torchelastic", "slurm")
    per_node = info.local_world_size if launched else None
    found = []
    if launched and num_nodes is not None and info.num_nodes is not None and num_nodes != info.num_nodes:
        problem = f"trainer.num_nodes={num_nodes}, but {info.launcher} started {info.num_nodes} nodes"
        found.append((problem, f"pass trainer.num_nodes={info.num_nodes} ({HW_PRESET})"))
    if per_node is not None and devices is not None and devices > 0 and devices != per_node:
        problem = f"trainer.devices={devices}, but {info.launcher} started {per_node} processes on this node"
        found.append((problem, f"pass trainer.devices={per_node}: one process per GPU ({HW_PRESET})"))
    if gpus and devices is not None and devices > gpus:
        fix = f"use at most {gpus} devices per node (SLURM: --gres=gpu:{gpus} --ntasks-per-node={gpus})"
        found.append((f"trainer.devices={devices}, but this node has {gpus} GPUs", fix))
    if data_root is not None and not data_root.is_dir():
        fix = "put the data on a file system that every node mounts at the same path, and pass that "
        fix += "path as data.root"
        found.append((f"data root {data_root} is not visible on this node", fix))
    return found


def check_distributed(
    num_nodes: int | None = None,
    devices: int | None = None,
    data_root: Path | None = None,
    gpus: int | None = None,
    env: Mapping[str, str] | None = None,
) -> CheckResult:
    """The launch this process sees; warns where the planned ``num_nodes``/``devices`` (per node) or the
    data root disagree with it or with the node (``gpus``: this node's GPUs, default what torch sees)."""
    info = launch_info(env)
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    detail = describe_launch(info)
    mistakes = _mistakes(info, num_nodes, devices, gpus, data_root)
    if not mistakes:
        return CheckResult("distributed", "ok", detail)
    return CheckResult(
        "distributed",
        "warn",
        detail + "; " + "; ".join(problem for problem, _ in mistakes),
        "; ".join(fix for _, fix in mistakes),
    )
