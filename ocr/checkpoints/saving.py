"""Checkpointing with one directory per run, readable names, atomic writes and a metadata JSON."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Literal
from weakref import proxy

import lightning as L
from lightning.fabric.utilities.seed import _set_rng_states
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn

from ocr.machine.sync import sync_allowed
from ocr.utils.io import atomic_write_json, disk_full_error, is_out_of_space, remove_stale_temp_files

__all__ = [
    "RunCheckpoint",
    "TIME_CHECK_EVERY_N_STEPS",
    "estimate_checkpoint_bytes",
    "git_commit",
    "scalar_metrics",
]

log = logging.getLogger(__name__)

# every_n_minutes is checked on these steps only: the check is a broadcast (a collective and a host sync
# under DDP), which the per-step hot path must not pay.
TIME_CHECK_EVERY_N_STEPS = 50


def git_commit(cwd: str | os.PathLike[str] | None = None) -> str | None:
    """The current git commit (with ``-dirty`` when the tree has changes), or None outside a repo."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()

    try:
        head, dirty = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head


def scalar_metrics(trainer: L.Trainer) -> dict[str, float]:
    """The trainer's current one-element metrics as floats."""
    return {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}


def estimate_checkpoint_bytes(module: L.LightningModule) -> int:
    """Bytes of one checkpoint of ``module``: its state plus two optimizer moments per trainable
    parameter (AdamW, the project's optimizer), before the optimizer exists."""
    state = sum(t.numel() * t.element_size() for t in module.state_dict().values())
    moments = sum(2 * p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
    return state + moments


class RunCheckpoint(ModelCheckpoint):
    """Keeps ``best_hmean0.9312_epoch07.ckpt`` (no ``=``: a printed path works unquoted in a Hydra override)
    and ``last.ckpt``, rewritten at every validation, at the end and every ``every_n_steps`` steps or
    ``every_n_minutes`` minutes; each written to ``<name>.tmp`` and renamed, with ``<name>.json`` beside."""

    def __init__(
        self,
        *,
        dirpath: str,
        monitor: str,
        mode: str,
        save_top_k: int,
        every_n_steps: int | None,
        every_n_minutes: float | None,
        keep: Literal["best", "last"] = "best",
    ) -> None:
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(
                f"callbacks.checkpoint.every_n_steps: expected >= 1 or null, got {every_n_steps}"
            )
        if keep not in ("best", "last"):
            raise ValueError(f"callbacks.checkpoint.keep: expected 'best' or 'last', got {keep!r}")
        if every_n_minutes is not None and every_n_minutes <= 0:
            raise ValueError(
                f"callbacks.checkpoint.every_n_minutes: expected > 0 or null, got {every_n_minutes}"
            )
        metric_name = monitor.split("/")[-1]
        # Lightning's own step/time triggers would also rank top-k between validations, where the
        # monitored metric is stale: those saves are done here, for last.ckpt only.
        super().__init__(
            dirpath=dirpath,
            filename=f"best_{metric_name}{{{monitor}:.4f}}_epoch{{epoch:02d}}",
            monitor=monitor,
            mode=mode,
            save_top_k=save_top_k,
            save_last=True,
            auto_insert_metric_name=False,
            enable_version_counter=False,  # the folder is this run's: rewrite last.ckpt, never last-v1.ckpt
        )
        self.every_n_steps = every_n_steps
        self.every_n_minutes = every_n_minutes
        self.keep = keep
        self._last_write_time = time.monotonic()
        self._rng_for_next_epoch: dict[str, Any] | None = None
        self._validation_pending = False  # the checkpoint being saved interrupts a validation
        self._git_commit = git_commit(Path(__file__).parent)

    @property
    def kept_path(self) -> str:
        """The checkpoint the run keeps (tested, printed, passed on): the best validation's, or with
        ``keep="last"`` the final ``last.ckpt``; "" when none was written."""
        return self.last_model_path if self.keep == "last" else self.best_model_path

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if stage == "fit" and trainer.is_global_zero and self.dirpath is not None:
            remove_stale_temp_files(self.dirpath)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_write_time = time.monotonic()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._saving_off(trainer) or self._last_global_step_saved == trainer.global_step:
            return
        due = self.every_n_steps is not None and trainer.global_step % self.every_n_steps == 0
        if self.every_n_minutes is not None and trainer.global_step % TIME_CHECK_EVERY_N_STEPS == 0:
            elapsed = time.monotonic() - self._last_write_time >= 60 * self.every_n_minutes
            with sync_allowed():  # a documented sync every TIME_CHECK_EVERY_N_STEPS (a collective in DDP)
                due = due or trainer.strategy.broadcast(elapsed)  # every rank must take part in the save
        if due and not self._validation_follows(trainer):  # that validation writes last.ckpt at this step
            with sync_allowed():  # a save copies the weights to the host
                self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """No save at epoch ends: Lightning resumes an epoch-end checkpoint of a validated epoch one epoch
        short of max_epochs; ``on_validation_end`` and the between-validation saves cover the run."""

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._saving_off(trainer):
            candidates = self._monitor_candidates(trainer)
            self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The final state, also when training stopped between validations.
        if not self._saving_off(trainer) and self._last_global_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        datamodule = trainer.datamodule  # type: ignore[attr-defined]  # set by Lightning's connector
        checkpoint["data_fingerprint"] = getattr(datamodule, "fingerprint", None)
        checkpoint["world_size"] = trainer.world_size  # a resume on another one is refused or warned about
        checkpoint["saved_at_epoch_end"] = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        if self._validation_pending:
            _mark_validation_pending(checkpoint)

    def save_on_interrupt(self, trainer: L.Trainer) -> str | None:
        """Write ``last.ckpt`` for a run a signal stopped between steps or during a validation (which its
        resume runs again); its path, or None when saving is off."""
        if self._saving_off(trainer):
            return None
        if trainer.validating or self._last_global_step_saved != trainer.global_step:
            self._validation_pending = trainer.validating
            try:
                self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
            finally:
                self._validation_pending = False
        return self.last_model_path or None

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Setting up the train loader after the restore draws from the global RNG; an uninterrupted run
        # started the next epoch with the saved states, so apply them again there (exact resume).
        if checkpoint.get("saved_at_epoch_end"):
            self._rng_for_next_epoch = checkpoint.get("rng_states")

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._rng_for_next_epoch is not None:
            _set_rng_states(self._rng_for_next_epoch)
            self._rng_for_next_epoch = None

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # A run directory moved since the save: its best/last tracking still applies, at the new place.
        saved = state_dict.get("dirpath")
        if saved and self.dirpath and str(saved) != str(self.dirpath):

            def moved(path: str) -> str:
                return os.path.join(str(self.dirpath), os.path.relpath(path, saved)) if path else path

            state_dict = {
                **state_dict,
                "dirpath": self.dirpath,
                "best_model_path": moved(state_dict["best_model_path"]),
                "kth_best_model_path": moved(state_dict.get("kth_best_model_path", "")),
                "last_model_path": moved(state_dict.get("last_model_path", "")),
                "best_k_models": {moved(k): v for k, v in state_dict.get("best_k_models", {}).items()},
            }
        super().load_state_dict(state_dict)

    @staticmethod
    def _validation_follows(trainer: L.Trainer) -> bool:
        """True when validation runs right after this training batch (Lightning's own decision)."""
        try:
            epoch_loop = trainer.fit_loop.epoch_loop
            follows = not epoch_loop._skip_next_val and epoch_loop._should_check_val_fx(
                trainer.fit_loop._data_fetcher  # type: ignore[arg-type]  # set while fitting, when this runs
            )
        except AttributeError:  # another Lightning version: save now (at worst twice at this step)
            return False
        loaded_empty = trainer.val_dataloaders is not None and not sum(trainer.num_val_batches)
        return bool(follows) and not loaded_empty

    def _saving_off(self, trainer: L.Trainer) -> bool:
        return (
            bool(trainer.fast_dev_run)  # type: ignore[attr-defined]  # set by Lightning's connector
            or trainer.state.fn != TrainerFn.FITTING
            or trainer.sanity_checking
        )

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        # Same steps as ModelCheckpoint._save_checkpoint, with the rename before loggers hear of the file.
        tmp = f"{filepath}.tmp"
        Path(filepath).parent.mkdir(parents=True, exist_ok=True)
        try:
            trainer.save_checkpoint(tmp, self.save_weights_only)
        except BaseException as exc:
            if trainer.is_global_zero:
                Path(tmp).unlink(missing_ok=True)
            if is_out_of_space(exc):
                raise disk_full_error(filepath, estimate_checkpoint_bytes(trainer.lightning_module)) from None
            raise
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        self._last_write_time = time.monotonic()
        if trainer.is_global_zero:
            os.replace(tmp, filepath)
            atomic_write_json(f"{filepath}.json", self._metadata(trainer, filepath))
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))

    def _remove_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        super()._remove_checkpoint(trainer, filepath)
        if trainer.is_global_zero:
            Path(f"{filepath}.json").unlink(missing_ok=True)

    def _metadata(self, trainer: L.Trainer, filepath: str) -> dict[str, Any]:
        module = trainer.lightning_module
        datamodule = trainer.datamodule  # type: ignore[attr-defined]  # set by Lightning's connector
        return {
            "checkpoint": Path(filepath).name,
            "epoch": trainer.current_epoch,
            "global_step": trainer.global_step,
            "metrics": scalar_metrics(trainer),
            "monitor": self.monitor,
            "git_commit": self._git_commit,
            "data_fingerprint": getattr(datamodule, "fingerprint", None),
            "world_size": trainer.world_size,
            "config": getattr(module, "run_config", None),
        }


def _mark_validation_pending(checkpoint: dict[str, Any]) -> None:
    """Record the validation loop's progress as a save inside its first batch would, so a resume runs that
    validation again from its start (as it stands, it would skip it or continue it where it was cut)."""
    try:
        progress = checkpoint["loops"]["fit_loop"]["epoch_loop.val_loop.batch_progress"]
        total, current = progress["total"], progress["current"]
        before = total["completed"] - current["completed"]  # batches of the validations before this one
        for counts, done in ((total, before), (current, 0)):
            counts["processed"] = counts["completed"] = done
            counts["ready"] = counts["started"] = done + 1
        progress["is_last_batch"] = False
    except (KeyError, TypeError) as exc:  # another Lightning version: say what a resume will miss
        log.warning(
            "Cannot mark the interrupted validation in the checkpoint (%s: %s); a resume may skip it",
            type(exc).__name__,
            exc,
        )
