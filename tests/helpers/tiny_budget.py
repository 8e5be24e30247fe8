"""The trainer budget of the tiny end-to-end runs: a few steps, validated by steps at the last one."""

from __future__ import annotations


def tiny_budget(steps: int) -> list[str]:
    """Overrides that train ``steps`` steps and validate at the last, logging to CSV."""
    return [
        f"trainer.max_steps={steps}",
        "trainer.check_val_every_n_epoch=null",
        f"trainer.val_check_interval={steps}",
        "logger=csv",
    ]
