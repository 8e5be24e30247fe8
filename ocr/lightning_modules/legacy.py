"""Run configs stored by older versions (checkpoints' ``ocr_config``), brought to today's layout on read."""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["TARGET_ALIASES", "upgrade_run_config"]

log = logging.getLogger(__name__)

# Old ``_target_`` path -> today's, for every class or function a stored config may name that moved.
# The metric config builds the options record since issue 9 (the builder wraps it in CLEvalMetric).
TARGET_ALIASES = {
    "ocr.metrics.metric.CLEvalMetric": "ocr.metrics.cleval.options.CLEvalOptions",
    "ocr.metrics.cleval.metric.CLEvalMetric": "ocr.metrics.cleval.options.CLEvalOptions",
}

# Keys configs/module/default.yaml held before the builder passed them from their own groups.
_OLD_MODULE_KEYS = ("optimizer", "scheduler")

# ``data.synthetic`` keys added since, with the value that describes the sets generated before them.
_NEW_SYNTHETIC_KEYS = {"style": "basic", "granularity": "word"}

# Keys and groups added since, with the values that describe how the runs before them evaluated: the
# square letterbox, and post-processing in the main thread after each batch.
_NEW_EVAL_TRANSFORM_KEYS: dict[str, Any] = {"pad_multiple": None}
_NEW_GROUPS: dict[str, dict[str, Any]] = {
    "pipeline": {
        "_target_": "ocr.inference.pipeline.PipelineSettings",
        "kind": "inline",
        "workers": 0,
        "max_pending_batches": 1,
    }
}


def upgrade_run_config(run_config: dict[str, Any]) -> dict[str, Any]:
    """A copy of a stored run config with moved ``_target_`` paths renamed (:data:`TARGET_ALIASES`) and
    the old ``module.optimizer``/``module.scheduler`` copies of the ``optimizer``/``scheduler`` groups
    dropped, ``data.synthetic`` and ``data.eval_transform`` given the keys added since, and the groups
    added since (``pipeline``) with the values of before; each change is logged once."""
    changes: list[str] = []
    upgraded = _rename_targets(run_config, "", changes)
    module = upgraded.get("module")
    if isinstance(module, dict):
        for key in _OLD_MODULE_KEYS:
            if key in module:
                del module[key]
                changes.append(f"module.{key} dropped (built from the {key} group)")
    data = upgraded.get("data")
    synthetic = data.get("synthetic") if isinstance(data, dict) else None
    if isinstance(synthetic, dict):
        for key, value in _NEW_SYNTHETIC_KEYS.items():
            if key not in synthetic:
                synthetic[key] = value
                changes.append(f"data.synthetic.{key}: {value} (the only one before)")
    eval_transform = data.get("eval_transform") if isinstance(data, dict) else None
    if isinstance(eval_transform, dict):
        for key, before in _NEW_EVAL_TRANSFORM_KEYS.items():
            if key not in eval_transform:
                eval_transform[key] = before
                changes.append(f"data.eval_transform.{key}: {before} (the square letterbox of before)")
    for group, default in _NEW_GROUPS.items():
        if group not in upgraded:
            upgraded[group] = dict(default)
            changes.append(f"{group}: {default} (as before the group existed)")
    if changes:
        log.warning("The stored run config was written by an older version; upgraded: %s", "; ".join(changes))
    return upgraded


def _rename_targets(node: Any, path: str, changes: list[str]) -> Any:
    if isinstance(node, list):
        return [_rename_targets(item, f"{path}[{i}]", changes) for i, item in enumerate(node)]
    if not isinstance(node, dict):
        return node
    renamed = {}
    for key, value in node.items():
        full_key = f"{path}.{key}" if path else str(key)
        if key == "_target_" and value in TARGET_ALIASES:
            changes.append(f"{full_key}: {value} -> {TARGET_ALIASES[value]}")
            value = TARGET_ALIASES[value]
        renamed[key] = _rename_targets(value, full_key, changes)
    return renamed
