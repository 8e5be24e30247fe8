"""A tiny LightningModule, loader, datamodule and quiet trainer for the callback tests (2 conv layers,
random tensors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader

from ocr.checkpoints.saving import RunCheckpoint


class TinyModule(L.LightningModule):
    """Two convolutions trained towards ``prob_map``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 1, 3, padding=1))

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        return F.mse_loss(self.net(batch["images"]), batch["prob_map"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def tiny_loader(num: int = 8, size: int = 16, batch_size: int = 2) -> DataLoader:
    gen = torch.Generator().manual_seed(0)
    samples = [
        {
            "images": torch.randn(3, size, size, generator=gen),
            "prob_map": (torch.rand(1, size, size, generator=gen) > 0.5).float(),
        }
        for _ in range(num)
    ]
    return DataLoader(samples, batch_size=batch_size, shuffle=False)


class TinyData(L.LightningDataModule):
    """:func:`tiny_loader` for training; keeps ``last_cpu_batch`` like ``ReceiptDataModule`` does."""

    def __init__(self) -> None:
        super().__init__()
        self.last_cpu_batch: dict[str, Any] | None = None

    def train_dataloader(self) -> DataLoader:
        return tiny_loader()

    def on_before_batch_transfer(self, batch: dict[str, Any], dataloader_idx: int) -> dict[str, Any]:
        self.last_cpu_batch = batch
        return batch


def fit_tiny(
    root: Path,
    callbacks: list[Callback],
    max_steps: int = 4,
    module: TinyModule | None = None,
    accumulate_grad_batches: int = 1,
) -> TinyModule:
    module = module or TinyModule()
    trainer = quiet_cpu_trainer(
        root,
        callbacks,
        max_steps=max_steps,
        limit_val_batches=0,
        accumulate_grad_batches=accumulate_grad_batches,
    )
    trainer.fit(module, datamodule=TinyData())
    return module


def quiet_cpu_trainer(root: Path, callbacks: list[Callback], **trainer_args: Any) -> L.Trainer:
    """A CPU trainer without logger, progress bar, model summary or sanity validation; checkpointing only
    when ``callbacks`` hold a checkpoint callback; ``trainer_args`` are the run's own."""
    return L.Trainer(
        default_root_dir=root,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        **{"num_sanity_val_steps": 0, **trainer_args},
    )


def run_checkpoint(dirpath: Path, every_n_steps: int | None = None) -> RunCheckpoint:
    """The run's checkpoint callback (best by ``val/hmean``, ``last.ckpt``) writing into ``dirpath``."""
    return RunCheckpoint(
        dirpath=str(dirpath),
        monitor="val/hmean",
        mode="max",
        save_top_k=1,
        every_n_steps=every_n_steps,
        every_n_minutes=None,
    )
