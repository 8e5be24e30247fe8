"""Train a DBNet detector: compose the config, instantiate, fit, then test the best checkpoint.

uv run runners/train.py                       # built-in synthetic receipts
uv run runners/train.py data=receipts data.root=../shared/datasets/sroie-compact trainer.max_steps=20
uv run runners/train.py resume=outputs/train/<run>   # continue a run with its own config
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ocr.checkpoints.reading import allow_checkpoint_types
from ocr.checkpoints.resume import Resume
from ocr.machine.hardware import register_resolvers
from ocr.run.entry import entry, format_metrics, instantiate_all, quiet_third_party, save_config
from ocr.utils.commands import run_next_commands

register_resolvers()
quiet_third_party()


@entry("train", training=True)
def train(cfg: DictConfig, resume: Resume | None) -> dict[str, float]:
    """Fit (from ``resume`` when given), then test with the best checkpoint; the final metrics. The run
    shell (``ocr.run.entry``) has checked the config and claimed the run folder."""
    import lightning as L
    from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint

    from ocr.checkpoints.saving import scalar_metrics
    from ocr.lightning_modules.build import build_module
    from ocr.lightning_modules.callbacks.time_budget import TimeBudget
    from ocr.utils.io import atomic_write_json

    directory = Path(cfg.paths.output_dir)
    if cfg.seed is not None:
        L.seed_everything(cfg.seed, workers=True)
    callbacks = instantiate_all(cfg.callbacks)  # first: the watchdog covers start-up
    if resume is None:
        save_config(cfg, directory)
    datamodule = instantiate(cfg.data)
    if resume is not None:  # validated before the resumed config is written into the run directory
        resume.check_data(datamodule, allow_change=cfg.resume_allow_data_change)
        save_config(cfg, directory, resume.config_name, resume.header)
    # A resumed run gets every weight from its checkpoint: no pretrained download, no model.init_from.
    module = build_module(cfg, weights_free=resume is not None)
    module.run_config = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))
    loggers = instantiate_all(cfg.logger)
    if not loggers:  # logger=none: Lightning's LR monitor refuses to run without a logger
        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    # Without our checkpoint callback (callbacks=none) Lightning would add its own: off means off.
    checkpointing = any(isinstance(c, ModelCheckpoint) for c in callbacks)
    trainer = instantiate(
        cfg.trainer, callbacks=callbacks, logger=loggers or False, enable_checkpointing=checkpointing
    )

    allow_checkpoint_types()  # Lightning's weights-only loads of our checkpoints (resume, best for test)
    ckpt_path = str(resume.checkpoint) if resume is not None else None
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    metrics = scalar_metrics(trainer)
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    if cfg.test_after_fit:
        results = trainer.test(module, datamodule=datamodule, ckpt_path=best or None, weights_only=True)
        metrics.update(results[0])
    if trainer.is_global_zero:
        atomic_write_json(directory / "metrics.json", {"metrics": metrics, "best_checkpoint": best or None})
        print(format_metrics(metrics, "Final metrics"))
        print(f"Best checkpoint: {best or '(none: no validation ran, or checkpointing is off)'}")
        if datamodule.no_validation_reason:
            print(f"No validation ran: {datamodule.no_validation_reason}")
        budget = next((c for c in callbacks if isinstance(c, TimeBudget)), None)
        cut = budget.cut_summary(trainer.global_step) if budget is not None else None
        if cut:  # said at the end too: the plan's warning is minutes up the log
            print(cut)
        print(f"Run directory: {directory}")
        checkpoint = best or (
            trainer.checkpoint_callback.last_model_path if trainer.checkpoint_callback else ""
        )
        if checkpoint:
            print(f"Next commands:\n{run_next_commands(cfg, directory, Path(checkpoint))}")
    return metrics


if __name__ == "__main__":
    train.main()
