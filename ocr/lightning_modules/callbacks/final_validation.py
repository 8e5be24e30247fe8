"""Every fit with validation ends with one: the final state is scored, so the run has a best checkpoint.

Lightning validates at the end of an epoch whose number is a multiple of ``check_val_every_n_epoch`` (or
every ``val_check_interval`` batches). A run that ends elsewhere, at ``trainer.max_steps`` in the middle
of an epoch (``trainer.max_steps=20`` with 25 steps per epoch, or a time budget's plan) or at a last epoch
off the interval (7 epochs validating every 2), stopped without scoring its final weights: with fewer
steps than one interval, no validation ran at all and no best checkpoint was kept.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

__all__ = ["ValidateAtEnd"]


class ValidateAtEnd(Callback):
    """After the last training step, makes Lightning validate (it decides right after this hook)."""

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not trainer.enable_validation or not _is_last_step(trainer):
            return
        if trainer.check_val_every_n_epoch is not None:
            trainer.check_val_every_n_epoch = 1
        # Lightning validates when a stop is requested and allowed (its rule for early stopping).
        trainer.should_stop = True


def _is_last_step(trainer: L.Trainer) -> bool:
    last_batch = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
    max_epochs = trainer.max_epochs
    if max_epochs is not None and max_epochs >= 0 and last_batch and trainer.current_epoch + 1 >= max_epochs:
        return True
    return 0 <= trainer.max_steps <= trainer.global_step
