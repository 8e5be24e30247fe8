"""The inference settings a checkpoint (or an ONNX export) carries, and which of them an invocation uses.

Test, predict and export take the evaluation transform, loss targets and post-processing from the
checkpoint's run config (``backend=onnx``: the export's sidecar), as MMOCR and docTR read them from the
model's config; a value on the command line wins and is logged beside the stored one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from ocr.utils.config_types import check_config_types
from ocr.utils.errors import UsageError

__all__ = [
    "EVAL_TRANSFORM_KEYS",
    "Choice",
    "apply_stored_settings",
    "command_line_keys",
    "export_long_side",
    "stored_setting_keys",
]

# What the network sees at evaluation time, under data.eval_transform.
EVAL_TRANSFORM_KEYS = ("long_side", "mean", "std", "fill")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Choice:
    """Where one setting's value came from (``stored``: the checkpoint's or export's, None: none)."""

    key: str  # full config key (postprocess.thresh)
    value: Any  # the value used
    stored: Any
    from_command_line: bool

    @property
    def differs(self) -> bool:
        """A command-line value other than the stored one."""
        return self.from_command_line and self.stored is not None and self.value != self.stored


def command_line_keys(overrides: Sequence[str]) -> set[str]:
    """The keys ``overrides`` set (``+``/``~``/``++`` prefixes dropped): ``postprocess.thresh=0.2`` gives
    ``postprocess.thresh``; a group choice (``postprocess=db``) gives the group's name."""
    return {o.lstrip("+~").partition("=")[0] for o in overrides}


def stored_setting_keys(cfg: DictConfig, *, targets: bool = False) -> list[str]:
    """The keys of ``cfg`` a checkpoint supplies; ``targets``: also ``data.targets.*`` (test: its loss is
    then the validation loss)."""
    keys = [f"postprocess.{k}" for k in cfg.postprocess if not str(k).startswith("_")]
    if targets:
        keys = [f"data.targets.{k}" for k in cfg.data.targets] + keys
    if "data" in cfg:
        keys = [f"data.eval_transform.{k}" for k in EVAL_TRANSFORM_KEYS] + keys
    return keys


def apply_stored_settings(
    cfg: DictConfig, stored: Mapping[str, Any], keys: Sequence[str], source: str
) -> list[Choice]:
    """Set each of ``keys`` in ``cfg`` to its value in ``stored`` unless the command line set it; log where
    each came from (``source``: what ``stored`` is) and return one :class:`Choice` per key."""
    # A config composed by other means than a Hydra run or compose_config has no command line to read.
    overrides = OmegaConf.select(cfg, "command_line", default=[], throw_on_resolution_failure=False)
    given = command_line_keys([str(o) for o in overrides or []])
    saved = OmegaConf.create(dict(stored))
    choices = []
    for key in keys:
        stored_value = _plain(OmegaConf.select(saved, key))
        explicit = key in given or key.rpartition(".")[0] in given  # postprocess=<option> sets them all
        if stored_value is not None and not explicit:
            OmegaConf.update(cfg, key, stored_value, merge=False)
        choices.append(Choice(key, _plain(OmegaConf.select(cfg, key)), stored_value, explicit))
    _log(choices, source)
    try:  # the invocation's own values passed this check: a problem now is a stored value's
        check_config_types(cfg)
    except UsageError as exc:
        raise type(exc)(f"{source}: a stored value is refused (export or train again): {exc}") from exc
    return choices


def _plain(value: Any) -> Any:
    return (
        OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig | ListConfig) else value
    )


def _log(choices: list[Choice], source: str) -> None:
    taken = [f"{c.key}={c.value}" for c in choices if not c.from_command_line and c.stored is not None]
    given = [
        f"{c.key}={c.value}" + (f" (stored: {c.stored})" if c.differs else "")
        for c in choices
        if c.from_command_line
    ]
    missing = [c.key for c in choices if not c.from_command_line and c.stored is None]
    parts = [f"from {source}: {', '.join(taken) or 'none'}"]
    parts += [f"from the command line: {', '.join(given)}"] if given else []
    parts += [f"not in {source}, this config's: {', '.join(missing)}"] if missing else []
    log.info("Inference settings %s", "; ".join(parts))
    for choice in choices:
        if choice.differs and choice.key.startswith("data."):
            log.warning(
                "%s=%s (command line) differs from %s in %s: the network sees other inputs than it was "
                "validated on; drop the override to use the stored value",
                choice.key,
                choice.value,
                choice.stored,
                source,
            )


def export_long_side(given: int | None, trained: int) -> int:
    """The input side ``runners/export.py`` exports and checks at: its ``long_side`` when given (a warning
    when it differs from the training run's ``data.eval_transform.long_side``), else the training run's."""
    if given is None:
        return trained
    if given != trained:
        log.warning(
            "long_side=%d (command line) differs from data.eval_transform.long_side=%d in the checkpoint's "
            "training run: the parity check and the sidecar use %d, and so does predict backend=onnx",
            given,
            trained,
            given,
        )
    return given
