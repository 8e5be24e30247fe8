"""LightningDataModule for receipt detection: train/val/test splits and a predict folder scan."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cv2
import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from ocr.data.collate import collate_batch
from ocr.data.dataset import ImageFolderDataset, ReceiptDataset
from ocr.data.eval_batches import eval_loader
from ocr.data.synthetic.generate import generate_dataset, synthetic_settings
from ocr.data.transforms import Transform

__all__ = ["ReceiptDataModule", "seed_worker"]

log = logging.getLogger(__name__)

# The datasets each Lightning stage needs; "train", "val" and "test" read the splits named in the config.
STAGE_DATASETS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("predict",)}


def seed_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: no OpenCV thread pool, and distinct RNG streams per worker.

    OpenCV's pool, once used in the parent before the fork, can hang the workers.
    ``torch.initial_seed()`` differs per worker and per epoch, so augmentations do too.
    """
    cv2.setNumThreads(0)
    # Under DDP every rank starts from the same seed: mix in the global rank so augmentations differ.
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))
    seed = (torch.initial_seed() + 1_000_003 * rank) % 2**32
    np.random.seed(seed)
    random.seed(seed)
    info = torch.utils.data.get_worker_info()
    transform = getattr(info.dataset, "transform", None) if info is not None else None
    if transform is not None and hasattr(transform, "set_random_seed"):
        transform.set_random_seed(seed)


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
        batch_size: int,
        eval_batch_size: int,
        num_workers: int,
        pin_memory: bool,
        persistent_workers: bool,
        synthetic: Mapping[str, int | str] | None,
    ) -> None:
        """Store the config; datasets are built in ``setup``.

        Args:
            root: dataset folder (``images/<split>/``, ``jsons/<split>.json``).
            train_split: split used for training.
            val_split: split used for validation.
            test_split: split used for testing.
            predict_image_dir: folder scanned for prediction; None = ``<root>/images/<test_split>``.
            train_transform: augmentation for the train split.
            eval_transform: letterbox for val/test/predict.
            exif_mode: ``rotated``, ``raw`` or ``auto``.
            on_missing_image: ``skip`` or ``fail``.
            min_polygon_size: polygons with a shorter side below this (px) are removed.
            targets: shrink_ratio, thresh_min, thresh_max, min_text_size for ``make_db_targets``.
            cache_dir: decoded-image cache folder; None disables it.
            batch_size: train batch size.
            eval_batch_size: val/test/predict batch size.
            num_workers: DataLoader worker processes.
            pin_memory: pin batches for faster host-to-GPU copies.
            persistent_workers: keep workers between epochs (only used when ``num_workers > 0``).
            synthetic: generator settings (counts, seed, long_side, style, granularity); when given,
                ``prepare_data`` generates the synthetic set into ``root`` (idempotent).
        """
        super().__init__()
        self.root = Path(root)
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
        }
        self.batch_size, self.eval_batch_size = int(batch_size), int(eval_batch_size)
        self.num_workers, self.pin_memory = int(num_workers), bool(pin_memory)
        self.persistent_workers = bool(persistent_workers) and self.num_workers > 0
        self.synthetic = None if synthetic is None else synthetic_settings(synthetic)
        self.datasets: dict[str, ReceiptDataset | ImageFolderDataset] = {}
        self.no_validation_reason: str | None = None  # set by setup when the val split is empty

    @functools.cached_property
    def fingerprint(self) -> str | None:
        """Short sha256 of the split annotation files, stored with checkpoints (None when none exist)."""
        digest, found = hashlib.sha256(), False
        for split in sorted(set(self.splits.values())):
            path = self.root / "jsons" / f"{split}.json"
            if path.is_file():
                digest.update(split.encode() + b"\0" + path.read_bytes())
                found = True
        return digest.hexdigest()[:16] if found else None

    def prepare_data(self) -> None:
        """Generate the synthetic set into ``root`` when configured (Lightning runs this on rank 0)."""
        if self.synthetic is not None:
            log.info("Ensuring the synthetic dataset in %s <data.synthetic=%s>", self.root, self.synthetic)
            generate_dataset(self.root, **self.synthetic)

    def setup(self, stage: str | None = None) -> None:
        """Build the datasets ``stage`` needs (all labelled splits when ``stage`` is None).

        Raises:
            ValueError: the train split has no usable image, or (DDP) an evaluation split has fewer
                images than the run has ranks.
        """
        names = STAGE_DATASETS.get(stage or "", tuple(self.splits))
        for name in names:
            if name not in self.datasets:
                self.datasets[name] = self._build(name)
                self._check_not_empty(name)
            self._check_per_rank(name)

    def _build(self, name: str) -> ReceiptDataset | ImageFolderDataset:
        if name == "predict":
            dataset = ImageFolderDataset(image_dir=self.predict_image_dir, transform=self.eval_transform)
            log.info("predict: %d images in %s", len(dataset), self.predict_image_dir)
            return dataset
        split = self.splits[name]
        transform = self.train_transform if name == "train" else self.eval_transform
        labelled = ReceiptDataset(root=self.root, split=split, transform=transform, **self.dataset_options)
        log.info("%s dataset <data.root=%s>: %s", name, self.root, labelled.report.summary())
        return labelled

    def _split_name(self, name: str) -> str:
        """How errors name a labelled split: its annotation file, split and config key."""
        split = self.splits[name]
        return f"{self.root / 'jsons' / f'{split}.json'}: {name} split {split!r} <data.{name}_split={split}>"

    def _check_not_empty(self, name: str) -> None:
        dataset = self.datasets[name]
        if not isinstance(dataset, ReceiptDataset) or len(dataset) > 0:
            return
        reason = f"{self._split_name(name)} has no usable image ({_unusable(dataset)})"
        if name == "train":
            raise ValueError(f"{reason}; training needs at least one")
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

    def train_dataloader(self) -> DataLoader:
        """Shuffled train loader (drops a last incomplete batch so BatchNorm never sees a batch of 1)."""
        return self._loader("train", self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        """Validation loader."""
        return self._loader("val", self.eval_batch_size, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        """Test loader."""
        return self._loader("test", self.eval_batch_size, shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        """Predict loader over the image folder."""
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


def _unusable(dataset: ReceiptDataset) -> str:
    """What the scan of an empty split found, for the error or warning."""
    report = dataset.report
    listed = len(report.missing) + len(report.unreadable)
    if not listed:
        return "the annotation file lists no image"
    return f"{listed} listed, {len(report.missing)} missing, {len(report.unreadable)} unreadable"
