"""``model.init_from``: start a run from an earlier run's network weights (optimizer and schedule fresh)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from torch import Tensor, nn

from ocr.checkpoints.reading import load_checkpoint
from ocr.models.encoder import read_state_dict

__all__ = ["STATE_DICT_SUFFIXES", "load_init_weights", "network_weights"]

log = logging.getLogger(__name__)

# This project's Lightning checkpoints end in .ckpt; plain state dicts of the network in these.
STATE_DICT_SUFFIXES = (".pth", ".pt", ".safetensors")
# Key names shown in a log line or an error.
_SHOWN = 5
_PREFIX = "net."
# The parts after the encoder: another decoder family may change their shapes (e.g. the head's input).
_AFTER_ENCODER = ("decoder.", "head.")


def network_weights(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The network's tensors of a DetectionModule state dict (keys ``net.*``) or of a network's own state
    dict (keys as they are), keyed as ``DBNet.state_dict()`` is."""
    return {key.removeprefix(_PREFIX): value for key, value in state.items()}


def load_init_weights(net: nn.Module, init_from: str | Path) -> None:
    """Load the network weights of ``init_from`` (a ``.ckpt`` or a state dict) into ``net``; missing and
    unexpected tensors are logged, another shape is a ValueError (except in another decoder family's
    decoder and head)."""
    path = Path(init_from).expanduser()
    if not path.is_file():
        what = "a directory" if path.is_dir() else "no such file"
        raise FileNotFoundError(
            f"model.init_from={init_from}: expected a checkpoint (.ckpt) or network state dict "
            f"({'/'.join(STATE_DICT_SUFFIXES)}), got {what}"
        )
    if path.suffix == ".ckpt":
        state = load_checkpoint(path, key="model.init_from")["state_dict"]
    elif path.suffix in STATE_DICT_SUFFIXES:
        state = read_state_dict(path)
    else:
        raise ValueError(
            f"model.init_from={init_from}: expected a .ckpt checkpoint or a {'/'.join(STATE_DICT_SUFFIXES)} "
            f"state dict, got the suffix {path.suffix!r}"
        )
    weights = network_weights(state)
    own = net.state_dict()
    weights, fresh = _drop_other_family_tensors(weights, own)
    mismatched = [
        f"{key}: {tuple(value.shape)} in the file, {tuple(own[key].shape)} in the model"
        for key, value in weights.items()
        if key in own and value.shape != own[key].shape
    ]
    if mismatched:
        raise ValueError(
            f"model.init_from={init_from}: {len(mismatched)} tensor(s) do not fit the network (was it "
            f"trained with another model config?): {'; '.join(mismatched[:_SHOWN])}"
        )
    if not own.keys() & weights.keys():
        raise ValueError(
            f"model.init_from={init_from}: expected the weights of this network (keys like "
            f"{sorted(own)[:2]}), got none of its {len(own)} tensor names (the file's keys are like "
            f"{sorted(weights)[:2]})"
        )
    # Counted here: BatchNorm's loader hides an absent num_batches_tracked from missing_keys.
    missing = [key for key in own if key not in weights and key not in fresh]
    unexpected = [key for key in weights if key not in own]
    net.load_state_dict(weights, strict=False)
    loaded = len(own) - len(missing) - len(fresh)
    log.info("Loaded %d of %d network tensors from %s <model.init_from>", loaded, len(own), path)
    for keys, what in (
        (
            fresh,
            "the file's decoder is another family (its tensor names differ from the network's); %d "
            "decoder/head tensors of other shapes keep their initial weights",
        ),
        (missing, "%d network tensors are not in the file and keep their initial weights"),
        (unexpected, "%d tensors of the file are not in the network and are ignored"),
    ):
        if keys:
            log.warning(f"model.init_from=%s: {what}: %s", init_from, len(keys), _first(keys))


def _drop_other_family_tensors(
    weights: dict[str, Tensor], own: Mapping[str, Tensor]
) -> tuple[dict[str, Tensor], list[str]]:
    """``weights`` without the decoder/head tensors whose shape differs from ``own``'s when the file's decoder
    is another family (another set of ``decoder.*`` names, e.g. FPN into PAN), and those names, sorted."""
    decoder_names = {key for key in weights if key.startswith("decoder.")}
    if decoder_names == {key for key in own if key.startswith("decoder.")}:
        return weights, []
    fresh = [
        key
        for key in own
        if key.startswith(_AFTER_ENCODER) and key in weights and weights[key].shape != own[key].shape
    ]
    return {key: value for key, value in weights.items() if key not in fresh}, fresh


def _first(keys: list[str]) -> str:
    more = f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else ""
    return ", ".join(keys[:_SHOWN]) + more
