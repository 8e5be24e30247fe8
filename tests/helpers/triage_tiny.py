"""A tiny LightningModule, loader and datamodule for the triage callback tests (2 conv layers, random
tensors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.utils.data import DataLoader


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
    trainer = L.Trainer(
        default_root_dir=root,
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        accumulate_grad_batches=accumulate_grad_batches,
        callbacks=callbacks,
    )
    trainer.fit(module, datamodule=TinyData())
    return module
