"""Loss input checks: metadata always (free), values without a host-device sync unless ``strict``.

Value checks have three modes (:func:`value_check_mode`): ``strict`` (synchronising, exact counts),
``assert`` (``torch._assert_async`` on the CPU, raising at once) and ``flag`` (CUDA and other
accelerators). A failed device-side assert poisons the CUDA context, so nothing can be written or read
afterwards and the error surfaces at an unrelated later line; in ``flag`` mode the checks return one
on-device bool instead, which :class:`ocr.models.loss.DBLoss` turns into a NaN loss that the non-finite
guard reports with its step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from ocr.types import TARGET_KEYS, DBOutput
from ocr.utils.errors import UsageError

__all__ = [
    "LossInputError",
    "LOGIT_NAMES",
    "ValueCheckMode",
    "check_loss_inputs",
    "device_message",
    "image_ids_of",
    "value_check_mode",
]

LOGIT_NAMES = DBOutput._fields
MAX_IDS_SHOWN = 8
STRICT_HINT = "set loss.strict=true (configs/loss/db.yaml) for the exact counts and image ids"
# CUDA's _assert_async refuses messages of 255 characters or more ("Message length must be smaller than
# 255"): device-side messages are constant per tensor and never carry image ids.
MAX_DEVICE_MESSAGE = 160

ValueCheckMode = Literal["strict", "assert", "flag"]


class LossInputError(UsageError, ValueError):
    """A loss input has the wrong key, shape, dtype, device or values."""


def image_ids_of(batch: Mapping[str, Any]) -> str:
    """The batch's image ids, shortened, for error messages."""
    ids = batch.get("image_id")
    if ids is None:
        return "image ids: unknown (batch has no 'image_id')"
    ids = [str(i) for i in ids]
    more = f" ... (+{len(ids) - MAX_IDS_SHOWN} more)" if len(ids) > MAX_IDS_SHOWN else ""
    return f"image ids: {ids[:MAX_IDS_SHOWN]}{more}"


def _fail(name: str, expected: str, got: str, batch: Mapping[str, Any]) -> LossInputError:
    return LossInputError(f"{name}: expected {expected}, got {got} ({image_ids_of(batch)})")


def _describe(t: Tensor) -> str:
    return f"{tuple(t.shape)} {t.dtype} on {t.device}"


def _check_tensor(name: str, value: Any, ref: Tensor | None, batch: Mapping[str, Any]) -> Tensor:
    if not isinstance(value, Tensor):
        raise _fail(name, "a torch.Tensor", type(value).__name__, batch)
    if value.ndim != 4 or value.shape[1] != 1:
        raise _fail(name, "shape (B, 1, H, W)", _describe(value), batch)
    if not value.is_floating_point():
        raise _fail(name, "a floating dtype", _describe(value), batch)
    if ref is not None and value.shape != ref.shape:
        raise _fail(name, f"shape {tuple(ref.shape)} like prob_logits", _describe(value), batch)
    if ref is not None and value.device != ref.device:
        raise _fail(name, f"device {ref.device} like prob_logits", _describe(value), batch)
    return value


def check_metadata(output: DBOutput, batch: Mapping[str, Any]) -> dict[str, Tensor]:
    """Check keys, shapes, dtypes and devices (no data access, no sync): the three logits and four
    targets by name, each (B, 1, H, W)."""
    missing = [k for k in TARGET_KEYS if k not in batch]
    if missing:
        raise _fail(f"batch[{missing[0]!r}]", f"keys {list(TARGET_KEYS)}", f"keys {sorted(batch)}", batch)
    ref = _check_tensor("prob_logits", output.prob_logits, None, batch)
    tensors = {name: _check_tensor(name, getattr(output, name), ref, batch) for name in LOGIT_NAMES}
    for key in TARGET_KEYS:
        tensors[key] = _check_tensor(key, batch[key], ref, batch)
    ids = batch.get("image_id")
    if ids is not None and len(ids) != ref.shape[0]:
        raise _fail("batch['image_id']", f"{ref.shape[0]} ids (batch size)", f"{len(ids)}", batch)
    return tensors


def _value_conditions(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """One 0-d bool tensor per input, True when its values are valid (finite logits, targets in [0, 1])."""
    conditions = {name: torch.isfinite(tensors[name]).all() for name in LOGIT_NAMES}
    for key in TARGET_KEYS:
        lo, hi = torch.aminmax(tensors[key].detach())
        conditions[key] = (lo >= 0) & (hi <= 1)  # NaN compares False, so it fails too
    return conditions


def device_message(name: str) -> str:
    """The constant message of the device-side value check on ``name`` (< ``MAX_DEVICE_MESSAGE`` chars)."""
    expected = "all finite values" if name in LOGIT_NAMES else "values in [0, 1]"
    return f"loss input {name}: expected {expected}; {STRICT_HINT}"


def value_check_mode(device_type: str, strict: bool) -> ValueCheckMode:
    """``strict`` when asked; ``assert`` on the CPU (and meta); ``flag`` on CUDA and other accelerators."""
    if strict:
        return "strict"
    return "assert" if device_type in ("cpu", "meta") else "flag"


def _assert_values(tensors: Mapping[str, Tensor], batch: Mapping[str, Any]) -> None:
    """``torch._assert_async`` per input; on the CPU it raises at once, so the ids are added here."""
    for name, ok in _value_conditions(tensors).items():
        message = device_message(name)
        try:
            torch._assert_async(ok, message)
        except RuntimeError as exc:
            raise LossInputError(f"{message} ({image_ids_of(batch)})") from exc


def _ids_where(bad_per_image: Tensor, batch: Mapping[str, Any]) -> list[str]:
    ids: Sequence[Any] = batch.get("image_id") or [f"#{i}" for i in range(len(bad_per_image))]
    return [str(ids[i]) for i, bad in enumerate(bad_per_image.tolist()) if bad]


def _check_values_strict(tensors: Mapping[str, Tensor], batch: Mapping[str, Any]) -> None:
    """Synchronising checks with exact counts; for debugging (strict mode)."""
    for name in LOGIT_NAMES:
        bad = ~torch.isfinite(tensors[name].detach())
        count = int(bad.sum())
        if count:
            where = _ids_where(bad.flatten(1).any(1), batch)
            got = f"{count} non-finite of {bad.numel()} in images {where}"
            raise _fail(name, "all finite values", got, batch)
    for key in TARGET_KEYS:
        t = tensors[key].detach()
        bad = ~((t >= 0) & (t <= 1))
        count = int(bad.sum())
        if count:
            finite = t[torch.isfinite(t)]
            lo, hi = (float(finite.min()), float(finite.max())) if finite.numel() else (float("nan"),) * 2
            where = _ids_where(bad.flatten(1).any(1), batch)
            got = f"{count} values outside (finite min {lo:.4g}, max {hi:.4g}) in images {where}"
            raise _fail(key, "values in [0, 1]", got, batch)


def check_loss_inputs(
    output: DBOutput, batch: Mapping[str, Any], mode: ValueCheckMode
) -> tuple[dict[str, Tensor], Tensor | None]:
    """The checked logits and targets by name, each (B, 1, H, W), and in ``flag`` mode a 0-d bool on
    their device, False when a value check failed (None in the other modes, which raise)."""
    tensors = check_metadata(output, batch)
    if mode == "strict":
        _check_values_strict(tensors, batch)
    elif mode == "assert":
        _assert_values(tensors, batch)
    elif mode == "flag":
        return tensors, torch.stack(list(_value_conditions(tensors).values())).all()  # no sync
    else:
        raise ValueError(f"mode: expected one of 'strict', 'assert', 'flag', got {mode!r}")
    return tensors, None
