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
# ``data`` keys added since, with the value that gives the run's former behaviour.
_NEW_DATA_KEYS = {"render_on": "worker"}


def upgrade_run_config(run_config: dict[str, Any]) -> dict[str, Any]:
    """A copy of a stored run config with moved ``_target_`` paths renamed (:data:`TARGET_ALIASES`) and
    the old ``module.optimizer``/``module.scheduler`` copies of the ``optimizer``/``scheduler`` groups
    dropped, and ``data`` and ``data.synthetic`` given the keys added since (:data:`_NEW_DATA_KEYS`,
    :data:`_NEW_SYNTHETIC_KEYS`); each change is logged once."""
    changes: list[str] = []
    upgraded = _rename_targets(run_config, "", changes)
    module = upgraded.get("module")
    if isinstance(module, dict):
        for key in _OLD_MODULE_KEYS:
            if key in module:
                del module[key]
                changes.append(f"module.{key} dropped (built from the {key} group)")
    data = upgraded.get("data")
    if isinstance(data, dict):
        for key, value in _NEW_DATA_KEYS.items():
            if key not in data:
                data[key] = value
                changes.append(f"data.{key}: {value} (the only one before)")
    synthetic = data.get("synthetic") if isinstance(data, dict) else None
    if isinstance(synthetic, dict):
        for key, value in _NEW_SYNTHETIC_KEYS.items():
            if key not in synthetic:
                synthetic[key] = value
                changes.append(f"data.synthetic.{key}: {value} (the only one before)")
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
