"""Two nodes on one host through torchrun: two agents (``--nnodes=2 --nproc-per-node=1 --node-rank=0|1``,
a static rendezvous on 127.0.0.1 at a free port), CPU and gloo, the real runner with ``hardware=multi_node``
on a tiny run. Both ranks end with the same weights and the same validation figures, the run directory
holds one checkpoint set, one ``.SUCCESS`` and one log per rank, and the figures equal a single process's
evaluation of the same checkpoint on the same data (docs/distributed.md, "Tested"). ``kill -9`` of one
node ends the other with our message within the configured timeout."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from omegaconf import DictConfig

from ocr.data.synthetic.generate import generate_dataset
from ocr.run.faults import EXIT_PEER_LOST
from tests.helpers.paths import REPO_ROOT
from tests.helpers.rank_report import weights_sha256

pytestmark = pytest.mark.slow  # two torchrun agents and two training processes: a minute on 2 cores

NODE_TIMEOUT_S = 900  # generous for a loaded CI machine; the runs themselves are tiny
PEER_TIMEOUT_MINUTES = 1  # trainer.strategy.timeout: the survivor of a kill -9 must end within it
# Validation figures of the two-node run against one process scoring the same checkpoint on the same
# images (documented in docs/distributed.md): CLEval counts are summed exactly; the loss is a mean over
# images whose order of summation differs.
METRIC_TOL = 1e-6
LOSS_REL_TOL = 1e-5


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny synthetic set, generated once here so that the two nodes do not both write it."""
    root = tmp_path_factory.mktemp("two_nodes") / "data"
    generate_dataset(root, num_train=6, num_val=3, num_test=3, seed=0, long_side=96)
    return root


def _overrides(tiny_run: list[str], data_root: Path, out: Path, *extra: str) -> list[str]:
    return [
        *(o for o in tiny_run if not o.startswith("hardware=")),
        "hardware=multi_node",
        f"data.root={data_root}",
        f"data.cache_dir={out / 'decode_cache'}",  # per node in real life; both "nodes" share it here
        "data.eval_batch_size=1",  # the loss of a batch depends on its images: compare per image
        "model.encoder.name=test_resnet",
        "model.decoder.channels=16",
        f"trainer.strategy.timeout.minutes={PEER_TIMEOUT_MINUTES}",
        "test_after_fit=false",
        "+callbacks.rank_report._target_=tests.helpers.rank_report.RankReport",
        f"+callbacks.rank_report.dirpath={out / 'ranks'}",
        *extra,
    ]


def _start_nodes(out: Path, overrides: list[str], rdzv_id: str) -> list[subprocess.Popen]:
    """torchrun on "node" 0 and 1 of this host."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    port = _free_port()
    nodes = []
    for node in (0, 1):
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",  # torchrun
            "--nnodes=2",
            "--nproc-per-node=1",
            f"--node-rank={node}",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            f"--rdzv-id={rdzv_id}",  # names the run directory: outputs/train/torchrun-<id>
            str(REPO_ROOT / "runners" / "train.py"),
            *overrides,
        ]
        log = (out / f"node{node}.out").open("w")
        nodes.append(subprocess.Popen(command, cwd=out, env=env, stdout=log, stderr=subprocess.STDOUT))
    return nodes


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux ``/proc``). torchrun starts each training process in a session
    of its own, so killing the agent's process group would leave it running."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    return tree


def _kill_node(agent: subprocess.Popen) -> None:
    """SIGKILL a "node": its torchrun agent and every process under it."""
    for pid in _process_tree(agent.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    agent.wait()


def _stop(nodes: list[subprocess.Popen]) -> None:
    for process in nodes:
        if process.poll() is None:
            _kill_node(process)


def test_two_nodes_train_one_run_with_the_same_weights_and_figures(
    tmp_path: Path,
    data_root: Path,
    tiny_run: list[str],
    compose_cfg: Callable[[str, list[str], Path], DictConfig],
    runner_module: Callable[[str], ModuleType],
) -> None:
    steps = ("trainer.max_steps=3", "trainer.max_epochs=3")  # one step per epoch per rank, validated
    nodes = _start_nodes(tmp_path, _overrides(tiny_run, data_root, tmp_path, *steps), "tiny")
    try:
        codes = [process.wait(NODE_TIMEOUT_S) for process in nodes]
    finally:
        _stop(nodes)
    outputs = [(tmp_path / f"node{n}.out").read_text() for n in (0, 1)]
    assert codes == [0, 0], "\n".join(text[-4000:] for text in outputs)
    run = tmp_path / "outputs" / "train" / "torchrun-tiny"
    assert f"Run directory: {run}" in outputs[0] and "Run directory" not in outputs[1]

    ranks = [json.loads((tmp_path / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["rank"], r["node"], r["world_size"]) for r in ranks] == [(0, 0, 2), (1, 1, 2)]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]
    assert ranks[0]["validations"] == ranks[1]["validations"] and len(ranks[0]["validations"]) == 3
    assert ranks[0]["best_model_path"] == ranks[1]["best_model_path"]

    # One run directory, written once: one checkpoint set, one status, one log per rank.
    names = {p.name for p in run.iterdir()}
    assert {".SUCCESS", "config.yaml", "train.log", "train-node1-rank1.log", "checkpoints"} <= names
    assert ".FAILURE" not in names and not any(n.startswith(("crash", "stall")) for n in names)
    assert len(list((run / ".hydra").iterdir())) == 1  # global rank 0 records the composed config
    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert len(checkpoints) == 4 and checkpoints[2:] == ["last.ckpt", "last.ckpt.json"], checkpoints
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["world_size"] == 2 and last["global_step"] == 3

    # The same checkpoint scored by one process on the same validation images.
    module = runner_module("test")
    single = module.evaluate(
        compose_cfg(
            "test",
            [
                *tiny_run,
                f"data.root={data_root}",
                "data.eval_batch_size=1",
                f"ckpt={run / 'checkpoints' / 'last.ckpt'}",
                "split=val",
                "report.enabled=false",
            ],
            tmp_path / "single",
        )
    )
    two_nodes = ranks[0]["validations"][-1]
    for name in ("val/hmean", "val/precision", "val/recall"):
        assert two_nodes[name] == pytest.approx(single[name], abs=METRIC_TOL), name
    assert two_nodes["val/loss"] == pytest.approx(single["val/loss"], rel=LOSS_REL_TOL)
    assert weights_sha256(last["state_dict"]) == ranks[0]["weights_sha256"]  # the checkpoint holds them


def test_kill_9_of_one_node_ends_the_other_with_our_message(
    tmp_path: Path, data_root: Path, tiny_run: list[str]
) -> None:
    steps = ("trainer.max_steps=400", "trainer.max_epochs=400", "time_budget_minutes=null")
    nodes = _start_nodes(tmp_path, _overrides(tiny_run, data_root, tmp_path, *steps), "killed")
    run = tmp_path / "outputs" / "train" / "torchrun-killed"
    try:
        deadline = time.monotonic() + NODE_TIMEOUT_S
        while not (run / "checkpoints" / "last.ckpt.json").exists():  # both ranks train and validate
            assert time.monotonic() < deadline and all(p.poll() is None for p in nodes), (
                tmp_path / "node0.out"
            ).read_text()[-4000:]
            time.sleep(0.2)
        _kill_node(nodes[1])  # node 1 goes down: its agent and its training process
        killed_at = time.monotonic()
        code = nodes[0].wait(NODE_TIMEOUT_S)
        ended_after = time.monotonic() - killed_at
    finally:
        _stop(nodes)
    output = (tmp_path / "node0.out").read_text()
    assert code != 0 and f"exitcode  : {EXIT_PEER_LOST}" in output, output[-4000:]
    assert ended_after < 60 * PEER_TIMEOUT_MINUTES, ended_after
    print(f"node 0 ended {ended_after:.1f} s after node 1 was killed")  # shown with pytest -s
    said = [line for line in (run / "train.log").read_text().splitlines() if "[ERROR]" in line]
    assert (
        "LOST CONTACT WITH THE OTHER RANKS: rank 0 of 2 (node 0): another process of this run has ended"
        in (said[-1])
    )
    assert f"This rank stops too, with exit code {EXIT_PEER_LOST}" in said[-1] and f"resume={run}" in said[-1]
    assert "PeerLostError: LOST CONTACT" in (run / ".FAILURE").read_text()
    assert not (run / ".SUCCESS").exists()
