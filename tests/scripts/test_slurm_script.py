"""scripts/slurm/train_multi_node.sbatch: valid bash, and its #SBATCH options are what hardware=multi_node
reads back from the SLURM environment they create (nodes, one task per GPU, workers per task)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from ocr.machine import hardware
from tests.helpers.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "slurm" / "train_multi_node.sbatch"


def _options() -> dict[str, str]:
    """``#SBATCH --key=value`` lines (comments stripped); flags map to ``""``."""
    options = {}
    for line in SCRIPT.read_text().splitlines():
        match = re.match(r"#SBATCH\s+--([\w-]+)(?:=(\S+))?", line)
        if match:
            options[match.group(1)] = match.group(2) or ""
    return options


def test_the_script_is_valid_bash() -> None:
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_the_script_asks_for_one_task_per_gpu_and_lightnings_requeue_signal() -> None:
    options = _options()
    assert options["ntasks-per-node"] == options["gres"].rsplit(":", 1)[-1]  # srun: one task per GPU
    # Lightning's SLURMEnvironment requeues on SIGUSR1 by default; --requeue lets the job start again.
    assert options["signal"].startswith("SIGUSR1@") and "requeue" in options
    assert Path(REPO_ROOT / options["output"]).parent.is_dir()  # sbatch does not create it
    text = SCRIPT.read_text()
    assert 'runners/train.py "hydra.run.dir=${RUN_DIR}" hardware=multi_node "$@"' in text
    assert 'runners/train.py "resume=${RUN_DIR}"' in text and "hpc_ckpt_*.ckpt" in text


def test_the_preset_reads_the_scripts_options_back_from_slurm(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    compose_cfg: Callable[[str, list[str], Path], DictConfig],
) -> None:
    options = _options()
    nodes, tasks = int(options["nodes"]), int(options["ntasks-per-node"])
    cpus = int(options["cpus-per-task"])
    slurm = {  # what srun sets in the task of global rank tasks + 1 (node 1) for these options
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": options["job-name"],
        "SLURM_NNODES": str(nodes),
        "SLURM_NTASKS": str(nodes * tasks),
        "SLURM_NTASKS_PER_NODE": f"{tasks}(x{nodes})",
        "SLURM_CPUS_PER_TASK": str(cpus),
        "SLURM_PROCID": str(tasks + 1),
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
    }
    for key, value in slurm.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(hardware, "has_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(hardware, "cuda_has_native_bf16", lambda: True)
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    cfg = compose_cfg("train", ["hardware=multi_node"], tmp_path)
    trainer = OmegaConf.to_container(cfg.trainer, resolve=True)
    assert (trainer["num_nodes"], trainer["devices"], trainer["accelerator"]) == (nodes, tasks, "gpu")
    assert trainer["strategy"]["_target_"] == "lightning.pytorch.strategies.DDPStrategy"
    assert cfg.data.num_workers == min(8, cpus - 1)  # the task's own cores, not the node's
