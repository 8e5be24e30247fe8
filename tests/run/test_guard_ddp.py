"""Under DDP (two CPU ranks, gloo) a CUDA fault on one rank stops the other too, within seconds, and the
other rank says which rank faulted and where its report is. NCCL on GPUs is not tested here."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torch.distributed as dist

from ocr.debug.inject import CUDA_FAULT_MESSAGE
from ocr.run.faults import EXIT_CUDA_FAULT, EXIT_PEER_FAULT
from ocr.run.guard import Guard
from tests.helpers.triage_tiny import TinyModule, tiny_loader

RANKS_TIMEOUT_S = 120


class FaultOnRank(TinyModule):
    def __init__(self, faulty_rank: int) -> None:
        super().__init__()
        self.faulty_rank = faulty_rank

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        if self.global_rank == self.faulty_rank and self.global_step == 2:
            raise torch.AcceleratorError(CUDA_FAULT_MESSAGE.format(step=2))
        return super().training_step(batch, batch_idx)


def _rank(rank: int, faulty_rank: int, out: str) -> None:
    from lightning.pytorch.utilities import rank_zero_only

    torch.set_num_threads(1)  # two ranks on a small CI machine
    handler = logging.FileHandler(Path(out, f"rank{rank}.log"))
    handler.setFormatter(logging.Formatter("[%(name)s][%(levelname)s] - %(message)s"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    # What a DDP launcher sets; the group rendezvous through a file (no TCP port to race for).
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", NODE_RANK="0")
    rank_zero_only.rank = rank
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=2)
    trainer = L.Trainer(
        default_root_dir=out,
        max_steps=200,  # the fault comes at step 2; the healthy rank waits in its next all-reduce
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[Guard.for_inference(out)],
    )
    trainer.fit(FaultOnRank(faulty_rank), train_dataloaders=tiny_loader(num=64))


@pytest.mark.parametrize("faulty_rank", [1, 0])
def test_the_other_rank_stops_too_and_says_why(faulty_rank: int, tmp_path: Path) -> None:
    # Not fork: autograd's threads, started by any earlier test in this process, do not survive it.
    context = multiprocessing.get_context("spawn")
    ranks = [context.Process(target=_rank, args=(r, faulty_rank, str(tmp_path))) for r in (0, 1)]
    for process in ranks:
        process.start()
    deadline = time.monotonic() + RANKS_TIMEOUT_S
    ended: dict[int, float] = {}
    while len(ended) < 2 and time.monotonic() < deadline:
        for r, process in enumerate(ranks):
            if r not in ended and process.exitcode is not None:
                ended[r] = time.time()
        time.sleep(0.05)
    for process in ranks:
        if process.exitcode is None:
            process.kill()
    healthy = 1 - faulty_rank
    assert [ranks[faulty_rank].exitcode, ranks[healthy].exitcode] == [EXIT_CUDA_FAULT, EXIT_PEER_FAULT], [
        (tmp_path / f"rank{r}.log").read_text() for r in (0, 1)
    ]
    crash = tmp_path / ("crash" if faulty_rank == 0 else f"crash-node0-rank{faulty_rank}")
    fault = json.loads((crash / "fault.json").read_text())
    assert fault["rank"] == faulty_rank and fault["world_size"] == 2
    assert max(ended.values()) - fault["detected_unix_s"] < 10
    said = (tmp_path / f"rank{healthy}.log").read_text().strip().splitlines()
    why = f"CUDA FAULT on rank {faulty_rank} (device-side assert in training, global step 2"
    assert said[-1].startswith(f"[ocr.run.peers][ERROR] - {why}") or why in said[-1], said[-3:]
    assert f"This rank ({healthy}) stops too, with exit code {EXIT_PEER_FAULT}" in said[-1]
    assert "AcceleratorError" in (tmp_path / ".FAILURE").read_text()  # written by the faulting rank
