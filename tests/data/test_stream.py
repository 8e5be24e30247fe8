"""The train stream: one pass per epoch from one DataLoader iterator, per-sample seeds, exact resume."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ocr.data.datamodule import ReceiptDataModule
from ocr.data.stream import StreamBatches, TrainStream
from ocr.types import Batch
from tests.helpers.receipt_fixtures import block_words, make_root, receipt_datamodule, write_split


def _stream(root: Path, num_workers: int = 0, batch_size: int = 2) -> tuple[ReceiptDataModule, TrainStream]:
    module = receipt_datamodule(root, num_workers=num_workers, batch_size=batch_size, crop_size=32)
    module.setup("fit")
    stream = module.train_dataloader()
    assert isinstance(stream, TrainStream)
    return module, stream


def _key(batch: Batch) -> tuple[Any, ...]:
    """What makes two batches the same: images, their crops' geometry and photometric draws."""
    rows = batch["photometric"]
    assert rows is not None
    matrices = tuple(g.matrix.round(6).tobytes() for g in batch["geometry"])
    return tuple(batch["image_id"]), matrices, batch["images"].numpy().tobytes(), rows.numpy().tobytes()


def _train(stream: TrainStream, epochs: int) -> list[tuple[Any, ...]]:
    """Read ``epochs`` epochs as Lightning does, counting each batch as trained."""
    keys = []
    for _ in range(epochs):
        for batch in stream:
            stream.count_trained()
            keys.append(_key(batch))
    return keys


def test_each_epoch_is_one_shuffled_pass_read_from_one_iterator(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    write_split(root, "train", {f"t{i}.png": block_words() for i in range(5)})
    _, stream = _stream(root)
    loaders = []
    make_loader = stream.make_loader
    stream.make_loader = lambda *args: loaders.append(1) or make_loader(*args)  # type: ignore[func-returns-value]
    epochs = [[batch["image_id"] for batch in stream] for _ in range(4)]
    assert len(stream) == 2 and all(len(epoch) == 2 for epoch in epochs)  # 5 images: the fifth is dropped
    for epoch in epochs:
        names = [name for batch in epoch for name in batch]
        assert len(set(names)) == 4  # each image at most once per epoch
    assert len({tuple(map(tuple, epoch)) for epoch in epochs}) > 1  # a new order per pass
    assert len(loaders) == 1  # the workers' iterator carries over from epoch to epoch


def test_batches_do_not_depend_on_the_number_of_workers(tmp_path: Path) -> None:
    root = make_root(tmp_path, num_images=4)
    torch.manual_seed(7)
    alone = _train(_stream(root)[1], epochs=2)
    torch.manual_seed(7)
    module, stream = _stream(root, num_workers=2)
    with_workers = _train(stream, epochs=2)
    module.teardown("fit")
    assert with_workers == alone
    assert len(set(alone)) == len(alone)  # every batch of the two passes drawn afresh


def test_a_stream_resumed_from_its_state_continues_as_the_uninterrupted_one(tmp_path: Path) -> None:
    root = make_root(tmp_path, num_images=4)
    _, stream = _stream(root)
    first = _train(stream, epochs=1)
    # A loop that fetches one batch ahead: the epoch's second batch is fetched while its first trains.
    epoch: Iterator[Batch] = iter(stream)
    trained = next(epoch)
    stream.count_trained()
    prefetched = next(epoch)
    state = stream.state_dict()  # a checkpoint between the two steps
    uninterrupted = [_key(trained), _key(prefetched), *_train(stream, epochs=2)]

    _, resumed = _stream(root)
    resumed.load_state_dict(state)
    assert [_key(batch) for batch in resumed] == [uninterrupted[1]]  # the rest of that epoch
    assert _train(resumed, epochs=2) == uninterrupted[2:]
    assert first[0] not in uninterrupted


def test_a_checkpoint_of_another_data_size_continues_at_a_pass_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, stream = _stream(make_root(tmp_path, num_images=4))
    state = {**stream.state_dict(), "trained": 7, "batches_per_pass": 3}
    stream.load_state_dict(state)
    assert stream.trained == 3 * len(stream)  # pass 3: the one after the checkpoint's third
    assert "another data set, batch size or device count" in caplog.text


def test_ranks_share_each_pass_without_overlap() -> None:
    def batches(rank: int, start: int = 0) -> list[list[tuple[int, int]]]:
        sampler = StreamBatches(
            num_samples=9, batch_size=2, seed=3, shuffle=True, rank=rank, world_size=2, start=start
        )
        stream = iter(sampler)
        return [next(stream) for _ in range(4)]  # two passes of two batches

    rank0, rank1 = batches(0), batches(1)
    for pass_index in (0, 1):
        mine = {i for batch in rank0[2 * pass_index : 2 * pass_index + 2] for i, _ in batch}
        theirs = {i for batch in rank1[2 * pass_index : 2 * pass_index + 2] for i, _ in batch}
        assert len(mine) == len(theirs) == 4 and not mine & theirs
    assert batches(0, start=3) == batches(0)[3:] + batches(0, start=4)[:3]  # a start is a position
    seeds = [seed for batch in rank0 + rank1 for _, seed in batch]
    assert len(set(seeds)) == len(seeds)


def test_a_data_set_smaller_than_a_batch_is_one_batch_per_pass() -> None:
    sampler = StreamBatches(num_samples=3, batch_size=8, seed=0, shuffle=False, rank=0, world_size=1, start=0)
    stream = iter(sampler)
    assert [[i for i, _ in next(stream)] for _ in range(2)] == [[0, 1, 2], [0, 1, 2]]
    assert sampler.batches_per_pass == 1 and np.isclose(sampler.batch_size, 3)


def test_the_datamodule_carries_the_position_through_a_checkpoint(tmp_path: Path) -> None:
    """Lightning restores a datamodule before it asks for the train loader: the position waits for it."""
    root = make_root(tmp_path, num_images=4)
    module, stream = _stream(root)
    _train(stream, epochs=1)
    state = module.state_dict()
    assert state == {"train_stream": stream.state_dict()} and state["train_stream"]["trained"] == 2
    continued = _train(stream, epochs=1)
    restored = receipt_datamodule(root, crop_size=32)
    restored.load_state_dict(state)
    restored.setup("fit")
    resumed = restored.train_dataloader()
    assert isinstance(resumed, TrainStream) and _train(resumed, epochs=1) == continued
