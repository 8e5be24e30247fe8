"""LightningDataModule for receipt detection: train/val/test splits and a predict folder scan, and the
batch's way to the device.

A sample's route: the datasets (``ocr.data.dataset``) run in DataLoader workers, ``collate_batch`` stacks
the compact samples (the train loader is a :class:`~ocr.data.stream.TrainStream` whose workers never stop),
and this datamodule's batch-transfer hooks keep the CPU batch for crash bundles, move it
(``ocr.data.coding.move_batch``) and decode it on the device (``decode_batch``), for every stage.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import cv2
import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_only
from torch.utils.data import ConcatDataset, DataLoader, Dataset

from ocr.data.coding import decode_batch, move_batch
from ocr.data.collate import collate_batch
from ocr.data.dataset import ImageFolderDataset, ReceiptDataset
from ocr.data.eval_batches import eval_loader
from ocr.data.stream import LoaderWait, StreamBatches, TrainStream
from ocr.data.synthetic.generate import generate_dataset, synthetic_settings
from ocr.data.transforms import Transform
from ocr.types import Batch, Sample
from ocr.utils.config_types import NonNegativeInt, PositiveInt
from ocr.utils.errors import ConfigValueError, InputNotFoundError

__all__ = ["ReceiptDataModule", "TrainSets", "seed_worker"]

log = logging.getLogger(__name__)

# The datasets each Lightning stage needs; "train", "val" and "test" read the splits named in the config.
STAGE_DATASETS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("predict",)}


def seed_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: no OpenCV thread pool (one used before the fork can hang the
    workers), and distinct RNG streams per worker, epoch and rank."""
    cv2.setNumThreads(0)
    # Under DDP every rank starts from the same seed: mix in the global rank so augmentations differ.
    # Lightning sets it on each rank before the workers fork; SLURM and Lightning's own launcher leave
    # RANK unset, so the environment would give every node's local rank k the same stream.
    rank = int(getattr(rank_zero_only, "rank", 0) or 0)
    seed = (torch.initial_seed() + 1_000_003 * rank) % 2**32
    np.random.seed(seed)
    random.seed(seed)
    info = torch.utils.data.get_worker_info()
    transform = getattr(info.dataset, "transform", None) if info is not None else None
    if transform is not None and hasattr(transform, "set_random_seed"):
        transform.set_random_seed(seed)


class TrainSets(ConcatDataset[Sample]):
    """The train split of the data root followed by those of ``data.extra_train_roots``, as one dataset
    for the train stream; they share one train transform (re-seeded per sample by the stream)."""

    def __init__(self, datasets: Sequence[ReceiptDataset]) -> None:
        super().__init__(datasets)
        self.transform = datasets[0].transform


class ReceiptDataModule(L.LightningDataModule):
    """Datasets and loaders for ``<root>/{images,jsons}``; predict scans ``predict_image_dir``."""

    def __init__(
        self,
        *,
        root: str,
        train_split: str,
        val_split: str,
        test_split: str,
        predict_image_dir: str | None,
        train_transform: Transform,
        eval_transform: Transform,
        exif_mode: str,
        on_missing_image: str,
        min_polygon_size: float,
        targets: Mapping[str, float],
        cache_dir: str | None,
        render_on: str,
        batch_size: PositiveInt,  # bounds checked when the config is read (check_config_types)
        eval_batch_size: PositiveInt,
        num_workers: NonNegativeInt,
        pin_memory: bool,
        persistent_workers: bool,
        synthetic: Mapping[str, int | str] | None,
        extra_train_roots: Sequence[str] = (),
    ) -> None:
        """Store the config (``configs/data/``); datasets are built in ``setup``. ``predict_image_dir``
        None reads ``<root>/images/<test_split>``; ``persistent_workers`` applies to the evaluation loaders
        (the train stream's run for the whole fit); ``synthetic`` generates a set into ``root`` first;
        ``extra_train_roots`` are trained on after ``root``'s train split (validation reads ``root`` only).
        """
        super().__init__()
        self.root = Path(root)
        self.extra_train_roots = [Path(r) for r in extra_train_roots]
        self.splits = {"train": train_split, "val": val_split, "test": test_split}  # dataset -> split
        self.predict_image_dir = (
            Path(predict_image_dir) if predict_image_dir else self.root / "images" / test_split
        )
        self.train_transform, self.eval_transform = train_transform, eval_transform
        self.dataset_options: dict[str, Any] = {
            "exif_mode": exif_mode,
            "on_missing_image": on_missing_image,
            "min_polygon_size": min_polygon_size,
            "targets": dict(targets),
            "cache_dir": cache_dir,
            "render_on": render_on,
        }
        self.batch_size, self.eval_batch_size = int(batch_size), int(eval_batch_size)
        self.num_workers, self.pin_memory = int(num_workers), bool(pin_memory)
        self.persistent_workers = bool(persistent_workers) and self.num_workers > 0
        self.synthetic = None if synthetic is None else synthetic_settings(synthetic)
        self.datasets: dict[str, ReceiptDataset | ImageFolderDataset | TrainSets] = {}
        self.no_validation_reason: str | None = None  # set by setup when the val split is empty
        # The data root is on a file system every node shares (docs/distributed.md): global rank 0 alone
        # generates a synthetic set there, while the other ranks, on every node, wait for it.
        self.prepare_data_per_node = False
        self.loader_wait = LoaderWait()  # time the training loop waited for train batches
        self.last_cpu_batch: Batch | None = None  # the compact CPU batch last moved, for crash bundles
        self._train_stream: TrainStream | None = None
        self._stream_state: dict[str, int] | None = None  # a checkpoint's, applied to the next stream

    @functools.cached_property
    def fingerprint(self) -> str | None:
        """Short sha256 of the split annotation files, stored with checkpoints (None when none exist)."""
        digest, found = hashlib.sha256(), False
        for split in sorted(set(self.splits.values())):
            path = self.root / "jsons" / f"{split}.json"
            if path.is_file():
                digest.update(split.encode() + b"\0" + path.read_bytes())
                found = True
        for i, root in enumerate(self.extra_train_roots):  # none: the digest of a single root, as before
            path = root / "jsons" / f"{self.splits['train']}.json"
            if path.is_file():
                digest.update(f"extra_train_roots[{i}]".encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()[:16] if found else None

    def prepare_data(self) -> None:
        """Generate the synthetic set into ``root`` when configured (Lightning runs this on global rank 0)."""
        if self.synthetic is not None:
            log.info("Ensuring the synthetic dataset in %s <data.synthetic=%s>", self.root, self.synthetic)
            generate_dataset(self.root, **self.synthetic)

    def setup(self, stage: str | None = None) -> None:
        """Build the datasets ``stage`` needs (all labelled splits when None), refusing an unusable train
        split and (DDP) an evaluation split with fewer images than ranks."""
        names = STAGE_DATASETS.get(stage or "", tuple(self.splits))
        for name in names:
            if name not in self.datasets:
                self.datasets[name] = self._build(name)
                self._check_not_empty(name)
            self._check_per_rank(name)

    def _build(self, name: str) -> ReceiptDataset | ImageFolderDataset | TrainSets:
        if name == "predict":
            dataset = ImageFolderDataset(image_dir=self.predict_image_dir, transform=self.eval_transform)
            log.info("predict: %d images in %s", len(dataset), self.predict_image_dir)
            return dataset
        split = self.splits[name]
        transform = self.train_transform if name == "train" else self.eval_transform
        labelled = ReceiptDataset(root=self.root, split=split, transform=transform, **self.dataset_options)
        log.info("%s dataset <data.root=%s>: %s", name, self.root, labelled.report.summary())
        if name != "train" or not self.extra_train_roots:
            return labelled
        parts = [labelled]
        for i, root in enumerate(self.extra_train_roots):
            extra = ReceiptDataset(root=root, split=split, transform=transform, **self.dataset_options)
            log.info("train dataset <data.extra_train_roots[%d]=%s>: %s", i, root, extra.report.summary())
            if len(extra) == 0:
                raise InputNotFoundError(
                    f"{extra.annotation_path}: train split {split!r} of data.extra_train_roots[{i}]={root} "
                    f"has no usable image ({_unusable(extra)}); drop the root or fix it"
                )
            parts.append(extra)
        if len(labelled) == 0:  # the root's own split must hold images too (same rule as without extras)
            return labelled
        trained = TrainSets(parts)
        log.info("train: %d images from %d roots", len(trained), len(parts))
        return trained

    def _split_name(self, name: str) -> str:
        """How errors name a labelled split: its annotation file, split and config key."""
        split = self.splits[name]
        return f"{self.root / 'jsons' / f'{split}.json'}: {name} split {split!r} <data.{name}_split={split}>"

    def _check_not_empty(self, name: str) -> None:
        dataset = self.datasets[name]
        if not isinstance(dataset, ReceiptDataset):
            return
        labelled = any(not all(entry.ignore) for entry in dataset.entries if entry.polygons)
        if name == "train" and len(dataset) > 0 and not labelled:
            raise InputNotFoundError(
                f"{self._split_name(name)} has no labelled words: {len(dataset)} usable images, none with a "
                "word to learn (every word list empty, marked ignore/###, or removed by sanitation: "
                f"{_sanitation(dataset)}); training needs labelled text"
            )
        if len(dataset) > 0:
            return
        reason = f"{self._split_name(name)} has no usable image ({_unusable(dataset)})"
        if name == "train":
            raise InputNotFoundError(f"{reason}; training needs at least one")
        if name == "val":
            self.no_validation_reason = reason
            reason += ": no validation will run, so no val/hmean and no best checkpoint"
        log.warning("%s", reason)

    def _check_per_rank(self, name: str) -> None:
        dataset = self.datasets[name]
        world_size = self.trainer.world_size if self.trainer is not None else 1
        if name in ("val", "test") and 0 < len(dataset) < world_size:
            # Evaluation is sharded without repeats (CLEval would count a repeat twice): a rank without a
            # batch would wait forever in the val/loss sync of the others.
            raise ValueError(
                f"{self._split_name(name)} has {len(dataset)} images for {world_size} ranks (DDP): "
                "every rank needs at least one; add images or run on fewer devices (trainer.devices)"
            )

    def train_dataloader(self) -> TrainStream | DataLoader:
        """The train stream: one shuffled pass per epoch from workers that never stop (a last incomplete
        batch is dropped, so BatchNorm never sees a batch of 1). When Lightning overfits batches
        (``trainer.overfit_batches``) a plain DataLoader, which Lightning reads in order."""
        if self.trainer is not None and self.trainer.overfit_batches:  # type: ignore[attr-defined]
            return self._loader("train", self.batch_size, shuffle=True)
        if "train" not in self.datasets:
            self.setup("fit")
        rank, world_size = 0, 1
        seed = torch.initial_seed()  # seed_everything's seed; drawing a new one would move the global RNG
        if self.trainer is not None:
            rank, world_size = self.trainer.global_rank, self.trainer.world_size
            if world_size > 1:
                seed = self.trainer.strategy.broadcast(seed, src=0)
        self._train_stream = TrainStream(
            dataset=self.datasets["train"],  # type: ignore[arg-type]  # a ReceiptDataset
            batch_size=self.batch_size,
            seed=seed,
            rank=rank,
            world_size=world_size,
            make_loader=self._stream_loader,
            wait=self.loader_wait,
        )
        if self._stream_state is not None:
            self._train_stream.load_state_dict(self._stream_state)
            self._stream_state = None
        self._check_val_interval(len(self._train_stream))
        return self._train_stream

    def _check_val_interval(self, batches: int) -> None:
        """Lightning's refusal of a step interval longer than an epoch (when it validates by epochs), in one
        line with both fixes instead of a traceback."""
        trainer = self.trainer
        interval = getattr(trainer, "val_check_interval", None)
        if trainer is None or isinstance(interval, bool) or not isinstance(interval, int):
            return
        if trainer.check_val_every_n_epoch is None or interval <= batches:
            return
        raise ConfigValueError(
            f"trainer.val_check_interval: expected <= {batches} (the training batches per epoch: "
            f"{len(self.datasets['train'])} images, data.batch_size={self.batch_size}, "
            f"{trainer.world_size} process(es)), got {interval}; to validate every {interval} steps across "
            "epochs set trainer.check_val_every_n_epoch=null too"
        )

    def state_dict(self) -> dict[str, Any]:
        """The train stream's position, saved in checkpoints (exact resume, ``ocr.data.stream``)."""
        return {} if self._train_stream is None else {"train_stream": self._train_stream.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep a checkpoint's stream position for the next train stream (Lightning's own copy of a
        stateful loader's state is loaded too late: it sets up the train data before the restore)."""
        self._stream_state = state_dict.get("train_stream")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.eval_batch_size, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.eval_batch_size, shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("predict", self.eval_batch_size, shuffle=False)

    def _loader(self, name: str, batch_size: int, shuffle: bool) -> DataLoader:
        if name not in self.datasets:
            self.setup({"train": "fit", "val": "validate"}.get(name, name))
        dataset = self.datasets[name]
        if not shuffle:  # batches of one input size each (ocr.data.eval_batches); DDP: none twice
            distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
            return eval_loader(
                dataset,  # type: ignore[arg-type]
                batch_size=batch_size,
                world_size=torch.distributed.get_world_size() if distributed else 1,
                num_workers=self.num_workers,
                pin_memory=self.pin_memory,
                persistent_workers=self.persistent_workers,
                worker_init_fn=seed_worker,
            )
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            drop_last=len(dataset) > batch_size,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            worker_init_fn=seed_worker,
            collate_fn=collate_batch,
        )

    def _stream_loader(self, samples: Dataset[Sample], batches: StreamBatches) -> DataLoader[Sample]:
        """The train stream's one DataLoader; its generator (the workers' base seed) is the stream's, so
        starting it draws nothing from the global RNG."""
        return DataLoader(
            samples,
            batch_sampler=batches,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            worker_init_fn=seed_worker,
            collate_fn=collate_batch,
            generator=torch.Generator().manual_seed(batches.seed % 2**63),
        )

    def on_before_batch_transfer(self, batch: Batch, dataloader_idx: int) -> Batch:
        """Keep a reference to the compact CPU batch (after a CUDA fault nothing can be copied back) and
        count a training batch in the train stream's position."""
        self.last_cpu_batch = batch
        if self._train_stream is not None and self.trainer is not None and self.trainer.training:
            self._train_stream.count_trained()
        return batch

    def transfer_batch_to_device(self, batch: Batch, device: torch.device, dataloader_idx: int) -> Batch:
        """Only the compact tensors travel (a new dict: ``last_cpu_batch`` stays as it was)."""
        return move_batch(batch, device)

    def on_after_batch_transfer(self, batch: Batch, dataloader_idx: int) -> Batch:
        """Decode on the device: float32 maps, photometric augmentation (train), normalised images."""
        return decode_batch(batch)

    def teardown(self, stage: str) -> None:
        """Stop the train stream's workers when fitting ends."""
        if stage == "fit" and self._train_stream is not None:
            self._train_stream.close()


def _sanitation(dataset: ReceiptDataset) -> str:
    counts = dataset.report.sanitation
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()) if v) or "nothing removed"


def _unusable(dataset: ReceiptDataset) -> str:
    """What the scan of an empty split found, for the error or warning."""
    report = dataset.report
    listed = len(report.missing) + len(report.unreadable)
    if not listed:
        return "the annotation file lists no image"
    return f"{listed} listed, {len(report.missing)} missing, {len(report.unreadable)} unreadable"
