"""Run configs stored by older versions (checkpoints' ``ocr_config``), brought to today's layout on read (and,
for a resume, the checkpoint callback's keys: :func:`migrate_checkpoint_callback`)."""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from ocr.utils.config_types import RETIRED_KEYS

__all__ = ["TARGET_ALIASES", "migrate_checkpoint_callback", "upgrade_run_config"]

log = logging.getLogger(__name__)

# Old ``_target_`` path -> today's, for every class or function a stored config may name that moved.
# The metric config builds the options record since issue 9 (the builder wraps it in CLEvalMetric).
TARGET_ALIASES = {
    "ocr.metrics.metric.CLEvalMetric": "ocr.metrics.cleval.options.CLEvalOptions",
    "ocr.metrics.cleval.metric.CLEvalMetric": "ocr.metrics.cleval.options.CLEvalOptions",
    # The checkpoint modules became one package (issue 24).
    "ocr.lightning_modules.callbacks.checkpoint.RunCheckpoint": "ocr.checkpoints.saving.RunCheckpoint",
    "ocr.lightning_modules.callbacks.curves.TrainingCurves": "ocr.reporting.curves_callback.TrainingCurves",
}

# Keys configs/module/default.yaml held before the builder passed them from their own groups.
_OLD_MODULE_KEYS = ("optimizer", "scheduler")

# ``data.synthetic`` keys added since, with the value that describes the sets generated before them.
_NEW_SYNTHETIC_KEYS = {"style": "basic", "granularity": "word"}
# ``data`` keys added since, with the value that gives the run's former behaviour.
_NEW_DATA_KEYS = {"render_on": "worker"}
# Keys and groups added since, with the values that describe how the runs before them evaluated: the
# square letterbox, and post-processing in the main thread after each batch.
_NEW_EVAL_TRANSFORM_KEYS: dict[str, Any] = {"pad_multiple": None}
_NEW_GROUPS: dict[str, dict[str, Any]] = {
    "pipeline": {
        "_target_": "ocr.evaluation.pipeline.PipelineSettings",
        "kind": "inline",
        "workers": 0,
        "max_pending_batches": 1,
    }
}

# ``data.train_transform`` keys that moved under ``data.train_transform.photometric`` (issue 24).
_PHOTOMETRIC_KEYS = (
    "brightness",
    "contrast",
    "saturation",
    "hue",
    "p_color",
    "blur_limit",
    "p_blur",
    "noise_std_range",
    "p_noise",
)
_PHOTOMETRIC_TARGET = "ocr.data.photometric.PhotometricParams"


def upgrade_run_config(run_config: dict[str, Any]) -> dict[str, Any]:
    """A copy of a stored run config with moved ``_target_`` paths renamed (:data:`TARGET_ALIASES`) and
    the old ``module.optimizer``/``module.scheduler`` copies of the ``optimizer``/``scheduler`` groups
    dropped, retired top-level keys dropped (``RETIRED_KEYS``), ``data`` and ``data.synthetic`` given the
    keys added since (:data:`_NEW_DATA_KEYS`, :data:`_NEW_SYNTHETIC_KEYS`), ``data.eval_transform`` and
    the groups added since (``pipeline``) the values of before, and the photometric keys of
    ``data.train_transform`` nested under its ``photometric``; each change is logged once."""
    changes: list[str] = []
    upgraded = _rename_targets(run_config, "", changes)
    for key in RETIRED_KEYS:  # refused on a command line; a stored one is read by nothing, so dropped
        if key in upgraded:
            del upgraded[key]
            changes.append(f"{key} dropped (no longer read)")
    module = upgraded.get("module")
    if isinstance(module, dict):
        for key in _OLD_MODULE_KEYS:
            if key in module:
                del module[key]
                changes.append(f"module.{key} dropped (built from the {key} group)")
    data = upgraded.get("data")
    _add_missing(data, "data", _NEW_DATA_KEYS, "the only one before", changes)
    synthetic = data.get("synthetic") if isinstance(data, dict) else None
    _add_missing(synthetic, "data.synthetic", _NEW_SYNTHETIC_KEYS, "the only one before", changes)
    transform = data.get("train_transform") if isinstance(data, dict) else None
    if isinstance(transform, dict) and "photometric" not in transform:
        moved = {key: transform.pop(key) for key in _PHOTOMETRIC_KEYS if key in transform}
        if moved:
            transform["photometric"] = {"_target_": _PHOTOMETRIC_TARGET, **moved}
            changes.append(f"data.train_transform.{{{','.join(moved)}}} -> data.train_transform.photometric")
    eval_transform = data.get("eval_transform") if isinstance(data, dict) else None
    why = "the square letterbox of before"
    _add_missing(eval_transform, "data.eval_transform", _NEW_EVAL_TRANSFORM_KEYS, why, changes)
    for group, default in _NEW_GROUPS.items():
        if group not in upgraded:
            upgraded[group] = dict(default)
            changes.append(f"{group}: {default} (as before the group existed)")
    if changes:
        log.warning("The stored run config was written by an older version; upgraded: %s", "; ".join(changes))
    return upgraded


def _add_missing(node: Any, path: str, keys: dict[str, Any], why: str, changes: list[str]) -> None:
    """Give the dict ``node`` (at ``path``) each of ``keys`` it lacks, with its value of before."""
    if not isinstance(node, dict):
        return
    for key, value in keys.items():
        if key not in node:
            node[key] = value
            changes.append(f"{path}.{key}: {value} ({why})")


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


def migrate_checkpoint_callback(cfg: DictConfig, composed: DictConfig) -> list[str]:
    """Bring a run config written before RunCheckpoint's ``every_n_steps``/``every_n_minutes`` (with
    Lightning's ``save_last``, ``every_n_epochs``, ``every_n_train_steps``) to today's keys, in place; the
    changes. A resume applies it: ``every_n_minutes`` takes today's default from ``composed``."""
    node = OmegaConf.select(cfg, "callbacks.checkpoint")
    old_keys = ("save_last", "every_n_epochs", "every_n_train_steps")
    if not isinstance(node, DictConfig) or not any(key in node for key in old_keys):
        return []
    changes = []
    with open_dict(node):
        for key in ("save_last", "every_n_epochs"):
            if key in node:
                changes.append(f"dropped {key}={node[key]}")
                del node[key]
        if "every_n_train_steps" in node:
            node.every_n_steps = node.pop("every_n_train_steps")
            changes.append(f"every_n_train_steps -> every_n_steps={node.every_n_steps}")
        if "every_n_minutes" not in node:
            node.every_n_minutes = OmegaConf.select(
                composed, "callbacks.checkpoint.every_n_minutes", default=None
            )
            changes.append(f"every_n_minutes={node.every_n_minutes} (today's default)")
    return changes
