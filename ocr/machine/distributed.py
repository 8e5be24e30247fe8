"""What the launcher (torchrun, SLURM's ``srun``, Lightning's own) tells a process about its place in a run.

Read from environment variables only, so the doctor, the resolvers and every callback see the same facts
before and after the process group exists.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "LaunchInfo",
    "MultiProcessRunDirError",
    "launch_info",
    "log_name",
    "num_nodes",
    "devices_per_node",
    "rank_tag",
    "warn_unlaunched_multi_node",
    "rank_zero_only_value",
    "run_name",
]

TORCHELASTIC_KEYS = ("RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")  # Lightning's detection
RANK_KEYS = {  # global rank, local rank, node rank
    "torchelastic": ("RANK", "LOCAL_RANK", "GROUP_RANK"),
    "slurm": ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID"),
}
log = logging.getLogger(__name__)
# What the doctor reports, when set.
REPORTED_PREFIXES = ("SLURM_", "TORCHELASTIC_")
REPORTED_KEYS = tuple(
    "RANK LOCAL_RANK GROUP_RANK NODE_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_WORLD_SIZE MASTER_ADDR "
    "MASTER_PORT".split()
)
SLURM_INTERACTIVE_NAMES = ("bash", "interactive")  # Lightning treats these jobs as not launched by srun
STAMP_FORMAT = "%Y-%m-%d_%H-%M-%S"  # the run directory's time stamp (configs/hydra/default.yaml)


class MultiProcessRunDirError(ValueError):
    """The processes of one multi-node run cannot agree on a run directory by themselves."""


@dataclass(frozen=True)
class LaunchInfo:
    """This process's place in the run, as the launcher states it (``launcher="none"``: one process);
    ``rank``/``node_rank`` None where it has not said yet (Lightning's launcher sets them in its children)."""

    launcher: str  # torchelastic | slurm | lightning | none
    world_size: int
    rank: int | None
    local_rank: int
    node_rank: int | None
    num_nodes: int | None
    local_world_size: int | None
    master: str | None  # address:port of the rendezvous
    run_id: str | None  # torchrun --rdzv-id, SLURM job id
    variables: dict[str, str]  # the launcher variables set in this process

    @property
    def multi_process(self) -> bool:
        """True when this process is one of several of a run, or a node of a multi-node run."""
        nodes = (self.num_nodes or 1) > 1 or bool(self.node_rank)
        # Lightning's own launcher on a node: MASTER_ADDR names the first node, NODE_RANK this one.
        return self.world_size > 1 or nodes or (self.launcher == "lightning" and self.master is not None)


def _int(env: Mapping[str, str], key: str) -> int | None:
    value = env.get(key, "").strip()
    return int(value) if value.lstrip("-").isdigit() else None


def _tasks_per_node(text: str) -> int | None:
    """SLURM's ``SLURM_NTASKS_PER_NODE`` (``4``, or ``4(x2)`` for 4 tasks on each of 2 nodes)."""
    match = re.match(r"\s*(\d+)", text)
    return int(match.group(1)) if match else None


def _slurm_job(env: Mapping[str, str]) -> str | None:
    array_job = env.get("SLURM_ARRAY_JOB_ID")
    if array_job is not None:
        return f"{array_job}_{env.get('SLURM_ARRAY_TASK_ID', '0')}"
    return env.get("SLURM_JOB_ID")


def _master(env: Mapping[str, str]) -> str | None:
    address = env.get("MASTER_ADDR")
    return f"{address}:{env.get('MASTER_PORT', '?')}" if address else None


def _launched(
    launcher: str,
    env: Mapping[str, str],
    sizes: tuple[int, int, int],
    master: str | None,
    run_id: str | None,
    variables: dict[str, str],
) -> LaunchInfo:
    """A torchrun or SLURM launch: ranks from ``env``, ``sizes`` = (world size, nodes, processes per node)."""
    rank, local_rank, node_rank = (_int(env, key) for key in RANK_KEYS[launcher])
    world, nodes, per_node = sizes
    return LaunchInfo(
        launcher, world, rank, local_rank or 0, node_rank, nodes, per_node, master, run_id, variables
    )


def launch_info(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """Where this process stands, read from ``env`` (default ``os.environ``); torchrun first, as
    Lightning picks its cluster environment."""
    env = os.environ if env is None else env
    variables = {
        key: value
        for key, value in sorted(env.items())
        if key in REPORTED_KEYS or key.startswith(REPORTED_PREFIXES)
    }
    if all(key in env for key in TORCHELASTIC_KEYS):
        world, per_node = _int(env, "WORLD_SIZE") or 1, _int(env, "LOCAL_WORLD_SIZE") or 1
        nodes = _int(env, "GROUP_WORLD_SIZE") or max(1, world // per_node)
        run_id = env.get("TORCHELASTIC_RUN_ID")
        return _launched("torchelastic", env, (world, nodes, per_node), _master(env), run_id, variables)
    if "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in SLURM_INTERACTIVE_NAMES:
        tasks, nodes = _int(env, "SLURM_NTASKS") or 1, _int(env, "SLURM_NNODES") or 1
        per_node = _tasks_per_node(env.get("SLURM_NTASKS_PER_NODE", "")) or max(1, tasks // nodes)
        master = _master(env) or env.get("SLURM_NODELIST")
        return _launched("slurm", env, (tasks, nodes, per_node), master, _slurm_job(env), variables)
    node = _int(env, "NODE_RANK")
    if node is not None or "LOCAL_RANK" in env:
        # The process a user starts on a node is its local rank 0; the global rank of the processes
        # Lightning starts beside it is not in their environment.
        rank = _int(env, "RANK")
        if rank is None and not node and "LOCAL_RANK" not in env:
            rank = 0
        world, local = _int(env, "WORLD_SIZE") or 1, _int(env, "LOCAL_RANK") or 0
        master = _master(env)
        return LaunchInfo("lightning", world, rank, local, node or 0, None, None, master, None, variables)
    return LaunchInfo("none", 1, 0, 0, 0, 1, 1, None, None, variables)


def warn_unlaunched_multi_node(hardware: str | None, env: Mapping[str, str] | None = None) -> bool:
    """Warn when ``hardware=multi_node`` was started without torchrun or SLURM (nor Lightning's own node
    variables): it then trains as one process on this machine. Returns whether it warned."""
    if hardware != "multi_node" or launch_info(env).launcher != "none":
        return False
    log.warning(
        "hardware=multi_node, but no torchrun or SLURM launch is found in the environment (no "
        "TORCHELASTIC_* or SLURM_NTASKS): training as ONE process on this machine. Start each node with "
        "torchrun or srun (docs/distributed.md), or use hardware=auto for one machine"
    )
    return True


def rank_tag(rank: int | None, node_rank: int | None) -> str:
    """How files of a rank other than global rank 0 are named: ``node1-rank3`` (``""`` on rank 0;
    ``node1`` where the launcher has not said the global rank yet)."""
    if not rank and not node_rank:
        return ""
    return f"node{node_rank or 0}" + (f"-rank{rank}" if rank is not None else "")


def num_nodes(default: int) -> int:
    """``${hw.num_nodes:default}``: the nodes torchrun or SLURM started, else ``default``."""
    info = launch_info()
    return info.num_nodes if info.launcher in ("torchelastic", "slurm") and info.num_nodes else int(default)


def devices_per_node(default: int) -> int:
    """``${hw.devices_per_node:default}``: training processes per node as torchrun
    (``--nproc-per-node``) or SLURM (``--ntasks-per-node``) started them, else ``default``."""
    info = launch_info()
    started = info.local_world_size if info.launcher in ("torchelastic", "slurm") else None
    return started or int(default)


def log_name(job_name: str) -> str:
    """``${dist.log_name:${hydra.job.name}}``: the log file's stem, ``train`` on global rank 0 and
    ``train-node1-rank3`` on the others, so ranks sharing a run directory never write one file."""
    info = launch_info()
    tag = rank_tag(info.rank, info.node_rank)
    return f"{job_name}-{tag}" if tag else job_name


def rank_zero_only_value(value: str) -> str | None:
    """``${dist.rank_zero_only:value}``: ``value`` on global rank 0, None on the others (Hydra's
    ``output_subdir``: the composed config is recorded once)."""
    info = launch_info()
    return None if rank_tag(info.rank, info.node_rank) else value


def _parent_started(stamp_format: str) -> str | None:
    """The start time of this process's parent (torchrun's agent on a single node), formatted."""
    try:
        stat = Path(f"/proc/{os.getppid()}/stat").read_text(encoding="ascii")
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return None
    started = time.time() - uptime + start_ticks / os.sysconf("SC_CLK_TCK")
    return time.strftime(stamp_format, time.localtime(started))


def run_name(stamp: str, env: Mapping[str, str] | None = None) -> str:
    """``${dist.run_name:${now:...}}``: a run directory name every process agrees on: ``stamp`` for one
    process, ``torchrun-<rdzv id>`` (on one node without one, the agent's start time), or
    ``slurm-<job id>[.<step id>]``. MultiProcessRunDirError: several nodes and nothing shared to name it by.
    """
    env = os.environ if env is None else env
    info = launch_info(env)
    if not info.multi_process:
        return stamp
    if info.launcher == "torchelastic":
        if info.run_id and info.run_id != "none":
            return f"torchrun-{info.run_id}"
        parent = _parent_started(STAMP_FORMAT) if info.num_nodes == 1 else None
        if parent is not None:
            return parent
    if info.launcher == "slurm" and info.run_id:
        step = env.get("SLURM_STEP_ID")
        return f"slurm-{info.run_id}" + (f".{step}" if step and step.isdigit() else "")
    raise MultiProcessRunDirError(
        f"this process is rank {info.rank} of {info.world_size} on node {info.node_rank} "
        f"(launcher: {info.launcher}), and the processes of one run must share one run directory, but "
        "they cannot agree on a time-stamped name. Pass hydra.run.dir=<folder on the shared file system>, "
        "the same on every node (or torchrun --rdzv-id=<job id>); see docs/distributed.md"
    )
