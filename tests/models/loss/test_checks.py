from __future__ import annotations

import pytest
import torch

from ocr.models.loss import DBLoss, LossInputError
from ocr.models.loss.checks import (
    LOGIT_NAMES,
    MAX_DEVICE_MESSAGE,
    device_message,
    value_check_mode,
)
from ocr.types import TARGET_KEYS, DBOutput

B, H, W = 2, 16, 16
IDS = ["receipt_a.jpg", "receipt_b.jpg"]


def make_inputs(device="cpu"):
    output = DBOutput(*(torch.randn(B, 1, H, W, device=device) for _ in range(3)))
    batch = {
        "prob_map": torch.zeros(B, 1, H, W, device=device),
        "prob_mask": torch.ones(B, 1, H, W, device=device),
        "thresh_map": torch.full((B, 1, H, W), 0.3, device=device),
        "thresh_mask": torch.ones(B, 1, H, W, device=device),
        "image_id": list(IDS),
    }
    return output, batch


def loss_fn(strict=False):
    return DBLoss(prob_weight=5, thresh_weight=10, binary_weight=1, ohem_ratio=3, eps=1e-6, strict=strict)


def assert_message(info, *parts, ids=IDS):
    message = str(info.value)
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"
    for image_id in ids:
        assert image_id in message, f"{image_id!r} not in {message!r}"


@pytest.mark.parametrize("strict", [False, True])
def test_target_shape_mismatch(strict):
    output, batch = make_inputs()
    batch["thresh_map"] = torch.zeros(B, 1, H // 2, W // 2)
    with pytest.raises(LossInputError) as info:
        loss_fn(strict)(output, batch)
    assert_message(info, "thresh_map", "expected shape (2, 1, 16, 16)", "got (2, 1, 8, 8)")


def test_logits_without_channel_dim():
    output, batch = make_inputs()
    output = output._replace(prob_logits=torch.randn(B, H, W))
    with pytest.raises(LossInputError) as info:
        loss_fn()(output, batch)
    assert_message(info, "prob_logits", "expected shape (B, 1, H, W)", "got (2, 16, 16)")


def test_integer_target_dtype():
    output, batch = make_inputs()
    batch["prob_mask"] = torch.ones(B, 1, H, W, dtype=torch.uint8)
    with pytest.raises(LossInputError) as info:
        loss_fn()(output, batch)
    assert_message(info, "prob_mask", "expected a floating dtype", "torch.uint8")


def test_device_mismatch():
    output, batch = make_inputs()
    batch["prob_map"] = batch["prob_map"].to("meta")
    with pytest.raises(LossInputError) as info:
        loss_fn()(output, batch)
    assert_message(info, "prob_map", "expected device cpu", "on meta")


def test_target_not_a_tensor():
    output, batch = make_inputs()
    batch["thresh_mask"] = batch["thresh_mask"].numpy()
    with pytest.raises(LossInputError) as info:
        loss_fn()(output, batch)
    assert_message(info, "thresh_mask", "expected a torch.Tensor", "got ndarray")


def test_missing_key():
    output, batch = make_inputs()
    del batch["thresh_mask"]
    with pytest.raises(LossInputError) as info:
        loss_fn()(output, batch)
    assert_message(info, "batch['thresh_mask']", "expected keys", "got keys ['image_id', 'prob_map'")


def test_missing_image_ids_are_reported_as_unknown():
    output, batch = make_inputs()
    del batch["image_id"]
    batch["prob_map"] = batch["prob_map"].double()[:1]
    with pytest.raises(LossInputError, match=r"prob_map: .*image ids: unknown"):
        loss_fn()(output, batch)


def test_image_id_count_must_match_batch():
    output, batch = make_inputs()
    batch["image_id"] = IDS[:1]
    with pytest.raises(LossInputError, match=r"batch\['image_id'\]: expected 2 ids \(batch size\), got 1"):
        loss_fn()(output, batch)


def test_nan_logits_default_mode_fails_on_cpu_and_names_tensor_and_ids():
    output, batch = make_inputs()
    output.binary_logits[1, 0, 3, 3] = float("nan")
    with pytest.raises(LossInputError) as info:
        loss_fn()(output, batch)
    assert_message(info, "binary_logits", "expected all finite values", "strict=true")


def test_device_assert_messages_are_short_and_constant_for_any_batch(monkeypatch):
    """CUDA's _assert_async refuses messages of 255 characters or more: ids must stay on the host."""
    messages = []
    monkeypatch.setattr(torch, "_assert_async", lambda ok, message: messages.append(message))
    ids = [f"X510056{i:05d}_receipt_scan_with_a_long_file_name_from_a_phone.jpg" for i in range(64)]
    batch_size = len(ids)
    output = DBOutput(*(torch.randn(batch_size, 1, 8, 8) for _ in range(3)))
    batch = {
        "prob_map": torch.zeros(batch_size, 1, 8, 8),
        "prob_mask": torch.ones(batch_size, 1, 8, 8),
        "thresh_map": torch.full((batch_size, 1, 8, 8), 0.3),
        "thresh_mask": torch.ones(batch_size, 1, 8, 8),
        "image_id": ids,
    }
    loss_fn()(output, batch)
    assert len(messages) == 7
    assert all(len(m) < MAX_DEVICE_MESSAGE < 255 for m in messages), max(messages, key=len)
    assert not any(image_id in m for m in messages for image_id in ids)
    assert messages == [device_message(name) for name in (*LOGIT_NAMES, *TARGET_KEYS)]


def test_value_check_mode_per_device():
    assert value_check_mode("cpu", strict=False) == "assert"
    assert value_check_mode("meta", strict=False) == "assert"
    assert value_check_mode("cuda", strict=False) == "flag"
    assert value_check_mode("cuda", strict=True) == "strict"


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda output, batch: output.binary_logits.__setitem__((1, 0, 3, 3), float("nan")),
        lambda output, batch: output.prob_logits.__setitem__((0, 0, 0, 0), float("inf")),
        lambda output, batch: batch["thresh_map"].__setitem__((0, 0, 1, 1), 1.5),
        lambda output, batch: batch["prob_mask"].__setitem__((1, 0, 2, 2), -1.0),
    ],
)
def test_cuda_mode_flags_bad_values_as_nan_loss_instead_of_asserting(corrupt, monkeypatch):
    """The CUDA branch on the CPU: no device assert (it would poison the context), a NaN total instead."""
    monkeypatch.setattr(torch, "_assert_async", lambda *a: pytest.fail("device assert in CUDA mode"))
    output, batch = make_inputs()
    clean = loss_fn().terms(output, batch, "cuda")["loss"]
    assert torch.isfinite(clean)
    corrupt(output, batch)
    losses = loss_fn().terms(output, batch, "cuda")
    assert torch.isnan(losses["loss"])


def test_nan_logits_strict_mode_counts_them():
    output, batch = make_inputs()
    output.binary_logits[1, 0, 3, 3] = float("nan")
    output.binary_logits[1, 0, 4, 4] = float("inf")
    with pytest.raises(LossInputError) as info:
        loss_fn(strict=True)(output, batch)
    assert_message(
        info,
        "binary_logits",
        "expected all finite values",
        "got 2 non-finite of 512 in images ['receipt_b.jpg']",
    )


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize(("key", "bad"), [("prob_map", 2.0), ("prob_mask", -1.0), ("thresh_map", 1.5)])
def test_target_out_of_range(strict, key, bad):
    output, batch = make_inputs()
    batch[key][0, 0, 0, 0] = bad
    with pytest.raises(LossInputError) as info:
        loss_fn(strict)(output, batch)
    assert_message(info, key, "expected values in [0, 1]")
    if strict:
        assert f"{bad:.4g}" in str(info.value)


def test_nan_target_strict_reports_finite_range():
    output, batch = make_inputs()
    batch["thresh_map"][0, 0, 1, 1] = float("nan")
    with pytest.raises(LossInputError) as info:
        loss_fn(strict=True)(output, batch)
    assert_message(
        info, "thresh_map", "1 values outside (finite min 0.3, max 0.3) in images ['receipt_a.jpg']"
    )


@pytest.mark.parametrize("strict", [False, True])
def test_valid_inputs_pass(strict):
    output, batch = make_inputs()
    losses = loss_fn(strict)(output, batch)
    assert torch.isfinite(losses["loss"])
