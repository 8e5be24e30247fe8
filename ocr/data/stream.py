"""The train loader that never drains: one DataLoader iterator for the whole fit, read one epoch at a time.

A DataLoader read afresh each epoch starts cold: every worker builds a whole batch before the first one
arrives, which on a few hundred receipts costs as much as the epoch's compute on a GPU. :class:`TrainStream`
keeps one iterator over endless shuffled passes and hands Lightning one pass per epoch, so the workers
build the next epoch's batches while this one trains. An epoch is still one pass (the last incomplete
batch dropped); each sample's augmentation seed derives from the stream seed, the pass and the slot, so
batches depend neither on the workers nor on an interruption (the position is saved in checkpoints).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from torch.utils.data import DataLoader, Dataset

from ocr.types import Batch, Sample

__all__ = ["LoaderWait", "SeededSamples", "StreamBatches", "TrainStream"]

log = logging.getLogger(__name__)

_SEEDS = 2**31  # per-sample seeds


@dataclass
class LoaderWait:
    """Host seconds the training loop spent blocked in ``next()`` on the train loader (the data-wait
    figure's numerator, ``ocr.lightning_modules.callbacks.progress``), batches received, and the wait for
    each epoch's first batch."""

    seconds: float = 0.0
    batches: int = 0
    first_batch: list[float] = field(default_factory=list)


class _TransformedDataset(Protocol):
    transform: Any

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Sample: ...


class SeededSamples(Dataset[Sample]):
    """``dataset`` read by ``(index, seed)`` items: the transform is re-seeded with ``seed`` before the
    sample is built, so a sample's augmentation depends on its seed alone."""

    def __init__(self, dataset: _TransformedDataset) -> None:
        reseed = getattr(dataset.transform, "set_random_seed", None)
        if reseed is None:
            raise TypeError(
                f"train stream: the train transform {type(dataset.transform).__name__} has no "
                "set_random_seed(seed), so its augmentation cannot be drawn per sample"
            )
        self.dataset = dataset
        self._reseed: Callable[[int], None] = reseed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: tuple[int, int]) -> Sample:  # type: ignore[override]
        index, seed = item
        self._reseed(seed)
        return self.dataset[index]


class StreamBatches:
    """Endless batches of ``(index, seed)`` items: pass after pass over ``num_samples`` samples, from batch
    ``start`` on (counted from the first pass). Pass ``p`` is a permutation of the samples (the identity with
    ``shuffle=False``) and a seed per slot, both drawn from ``numpy.random.default_rng([seed, p])``. Under DDP
    rank ``r`` of ``world_size`` takes slots ``r, r + world_size, ...``; every rank gets the same number of
    batches per pass. A pass ends with its last full batch (the rest is dropped), unless it has fewer samples
    than one batch: then it is one smaller batch."""

    def __init__(
        self,
        *,
        num_samples: int,
        batch_size: int,
        seed: int,
        shuffle: bool,
        rank: int,
        world_size: int,
        start: int,
    ) -> None:
        per_rank = num_samples // world_size
        if per_rank < 1 or batch_size < 1:
            raise ValueError(
                f"train stream: expected at least one sample per rank and a positive batch size, got "
                f"{num_samples} samples for {world_size} ranks and batch size {batch_size}"
            )
        self.num_samples, self.seed, self.shuffle = num_samples, seed, shuffle
        self.rank, self.world_size, self.start = rank, world_size, start
        self.batch_size = min(batch_size, per_rank)
        self.batches_per_pass = per_rank // self.batch_size

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        pass_index, first = divmod(self.start, self.batches_per_pass)
        while True:
            indices, seeds = self._pass(pass_index)
            for b in range(first, self.batches_per_pass):
                window = slice(b * self.batch_size, (b + 1) * self.batch_size)
                yield list(zip(indices[window].tolist(), seeds[window].tolist(), strict=True))
            pass_index, first = pass_index + 1, 0

    def _pass(self, pass_index: int) -> tuple[np.ndarray, np.ndarray]:
        """This rank's sample indices and seeds of pass ``pass_index``."""
        rng = np.random.default_rng([self.seed, pass_index])
        order = rng.permutation(self.num_samples) if self.shuffle else np.arange(self.num_samples)
        seeds = rng.integers(_SEEDS, size=self.num_samples)
        mine = slice(self.rank, self.batches_per_pass * self.batch_size * self.world_size, self.world_size)
        return order[mine], seeds[mine]


class TrainStream:
    """Lightning's train loader: ``len()`` batches per epoch (one pass), all from one DataLoader iterator
    (``make_loader(samples, batch_sampler)``) over :class:`StreamBatches` that lives until :meth:`close`. Each
    ``iter()`` yields the batches up to the end of the current pass, so the workers' queue carries over into
    the next epoch. The position counts batches that reached a training step (:meth:`count_trained`), not
    batches fetched ahead: a checkpoint resumes at the batch after the last."""

    def __init__(
        self,
        *,
        dataset: _TransformedDataset,
        batch_size: int,
        seed: int,
        rank: int,
        world_size: int,
        make_loader: Callable[[Dataset[Sample], StreamBatches], DataLoader[Sample]],
        wait: LoaderWait,
    ) -> None:
        self.samples = SeededSamples(dataset)
        self.batch_size, self.seed, self.rank, self.world_size = batch_size, seed, rank, world_size
        self.make_loader = make_loader
        self.wait = wait
        self.trained = 0  # batches that reached a training step: where a resumed stream starts
        self._fetched = 0  # batches taken from the iterator
        self._iterator: Iterator[Batch] | None = None
        self.batches_per_pass = self._batches(start=0).batches_per_pass

    def __len__(self) -> int:
        return self.batches_per_pass

    def __iter__(self) -> Iterator[Batch]:
        if self._iterator is None:
            self._iterator = iter(self.make_loader(self.samples, self._batches(start=self.trained)))
            self._fetched = self.trained
        return self._epoch()

    def _epoch(self) -> Iterator[Batch]:
        """Batches up to the end of the current pass."""
        first = True
        while True:
            assert self._iterator is not None
            started = time.perf_counter()
            batch = next(self._iterator)
            waited = time.perf_counter() - started
            self.wait.seconds += waited
            self.wait.batches += 1
            if first:
                self.wait.first_batch.append(waited)
                first = False
            self._fetched += 1
            yield batch
            if self._fetched % self.batches_per_pass == 0:
                return

    def count_trained(self) -> None:
        """One more batch reached a training step."""
        self.trained += 1

    def _batches(self, start: int) -> StreamBatches:
        return StreamBatches(
            num_samples=len(self.samples),
            batch_size=self.batch_size,
            seed=self.seed,
            shuffle=True,
            rank=self.rank,
            world_size=self.world_size,
            start=start,
        )

    def close(self) -> None:
        """Stop the workers (the iterator's own clean-up); a later ``iter()`` starts at :attr:`trained`."""
        self._iterator = None

    def state_dict(self) -> dict[str, int]:
        """The stream's position: saved in checkpoints by the datamodule (``ReceiptDataModule.state_dict``)
        and by Lightning with the fit loop's state."""
        return {
            "seed": self.seed,
            "trained": self.trained,
            "batches_per_pass": self.batches_per_pass,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue at the batch after the checkpoint's last trained, with its seed; after another data
        size, batch size or world size, at the start of the next pass (with a warning)."""
        self.seed = int(state["seed"])
        saved_shape = (int(state["batches_per_pass"]), int(state["world_size"]))
        trained = int(state["trained"])
        if saved_shape != (self.batches_per_pass, self.world_size):
            passes = -(-trained // saved_shape[0])
            log.warning(
                "train stream: the checkpoint's stream had %d batches per pass on %d ranks, this run has %d "
                "on %d (another data set, batch size or device count); continuing at pass %d, so the "
                "batches differ from an uninterrupted run's",
                *saved_shape,
                self.batches_per_pass,
                self.world_size,
                passes,
            )
            trained = passes * self.batches_per_pass
        self.trained = trained
        self.close()
