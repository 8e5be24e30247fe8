"""Train a DBNet detector: compose the config, instantiate, fit, then test the kept checkpoint.

uv run runners/train.py                       # built-in synthetic receipts
uv run runners/train.py data=receipts data.root=../shared/datasets/sroie-compact trainer.max_steps=20
uv run runners/train.py resume=outputs/train/<run>   # continue a run with its own config
"""

from __future__ import annotations

from typing import Any, cast

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ocr.checkpoints.reading import allow_checkpoint_types
from ocr.machine.hardware import register_resolvers
from ocr.run.entry import TrainingRun, entry, quiet_third_party

register_resolvers()
quiet_third_party()


@entry("train", training=True)
def train(cfg: DictConfig, run: TrainingRun) -> dict[str, float]:
    """Fit (from ``run.resume`` when given), then test with the kept checkpoint; the final metrics. The run
    shell (``ocr.run.entry``) has checked the config, claimed the run folder and made the callbacks."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from ocr.checkpoints.saving import scalar_metrics
    from ocr.lightning_modules.build import build_module
    from ocr.lightning_modules.callbacks.time_budget import TimeBudget

    datamodule = instantiate(cfg.data)
    run.record_config(datamodule)  # a resume's data is checked before its config is written
    # A resumed run gets every weight from its checkpoint: no pretrained download, no model.init_from.
    module = build_module(cfg, weights_free=run.resume is not None)
    module.run_config = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))
    # Without our checkpoint callback (callbacks=none) Lightning would add its own: off means off.
    checkpointing = any(isinstance(c, ModelCheckpoint) for c in run.callbacks)
    trainer = instantiate(
        cfg.trainer, callbacks=run.callbacks, logger=run.loggers or False, enable_checkpointing=checkpointing
    )

    allow_checkpoint_types()  # Lightning's weights-only loads of our checkpoints (resume, the kept one)
    ckpt_path = str(run.resume.checkpoint) if run.resume is not None else None
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    metrics = scalar_metrics(trainer)
    kept = getattr(trainer.checkpoint_callback, "kept_path", "")  # the best, or last.ckpt (keep=last)
    if cfg.test_after_fit:
        results = trainer.test(module, datamodule=datamodule, ckpt_path=kept or None, weights_only=True)
        metrics.update(results[0])
    reason = datamodule.no_validation_reason
    budget = next((c for c in run.callbacks if isinstance(c, TimeBudget)), None)
    cut = budget.cut_summary(trainer.global_step) if budget is not None else None
    run.finish(trainer, metrics, reason and f"No validation ran: {reason}", cut)
    return metrics


if __name__ == "__main__":
    train.main()
