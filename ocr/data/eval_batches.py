"""Evaluation batches of one input size each, so that a batch of receipts is not mostly padding.

With ``data.eval_transform.pad_multiple`` each image keeps its own input size and images of one size are
batched together (dataset order within a size, sizes by first image), so an image's input does not
depend on its batch; without it the batches are the plain consecutive ones. The loader iterates over
whole batches (``batch_size=None``), shared between DDP ranks without repeats.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DataLoader, Dataset

from ocr.data.collate import collate_batch
from ocr.types import Sample

__all__ = ["BatchList", "SizedEvalDataset", "eval_loader", "plan_batches"]

log = logging.getLogger(__name__)


class SizedEvalDataset(Protocol):
    """An evaluation dataset that can tell each image's input size before decoding it."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Sample: ...

    def input_size(self, index: int) -> tuple[int, int]:
        """(height, width) of image ``index`` as the network will see it."""
        ...


def plan_batches(sizes: Sequence[tuple[int, int]], batch_size: int, min_batches: int) -> list[list[int]]:
    """Index lists of at most ``batch_size`` images of one (height, width) in ``sizes`` (sizes by first image,
    indices ascending), the largest split until there are ``min_batches`` (one per DDP rank) or singletons."""
    groups: dict[tuple[int, int], list[int]] = {}
    for index, size in enumerate(sizes):
        groups.setdefault(tuple(size), []).append(index)  # type: ignore[arg-type]
    batches = [
        group[i : i + batch_size] for group in groups.values() for i in range(0, len(group), batch_size)
    ]
    while batches and len(batches) < min_batches:  # an empty split has no batch to split
        largest = max(range(len(batches)), key=lambda k: len(batches[k]))
        if len(batches[largest]) < 2:
            break
        half = (len(batches[largest]) + 1) // 2
        batches[largest : largest + 1] = [batches[largest][:half], batches[largest][half:]]
    return batches


class BatchList(Dataset[list[Sample]]):
    """The samples of one planned batch (:func:`plan_batches`) per item, for the loader's ``collate_fn``."""

    def __init__(self, dataset: Dataset[Sample], batches: list[list[int]]) -> None:
        self.dataset = dataset
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int) -> list[Sample]:
        return [self.dataset[i] for i in self.batches[index]]


def eval_loader(
    dataset: SizedEvalDataset,
    *,
    batch_size: int,
    world_size: int,
    num_workers: int,
    pin_memory: bool,
    persistent_workers: bool,
    worker_init_fn: Callable[[int], None],
) -> DataLoader[Any]:
    """The val/test/predict loader of ``dataset``: batches of one input size (:func:`plan_batches`); with
    ``world_size > 1`` each rank gets its share of the batches, none twice (CLEval would count a repeated
    image twice)."""
    sizes = [dataset.input_size(i) for i in range(len(dataset))]
    batches = plan_batches(sizes, batch_size, min_batches=world_size)
    if len(set(sizes)) > 1:
        log.info(
            "eval batches: %d images of %d input sizes in %d batches (at most %d images each)",
            len(sizes),
            len(set(sizes)),
            len(batches),
            batch_size,
        )
    batch_list = BatchList(dataset, batches)  # type: ignore[arg-type]
    sampler = UnrepeatedDistributedSampler(batch_list, shuffle=False) if world_size > 1 else None
    return DataLoader(
        batch_list,
        batch_size=None,
        sampler=sampler,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=persistent_workers,
        worker_init_fn=worker_init_fn,
        collate_fn=collate_batch,
    )
