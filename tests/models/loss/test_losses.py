from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ocr.models.loss import DBLoss, balanced_bce, dice_loss, masked_l1
from ocr.models.loss.bce import sum_of_largest
from ocr.types import DBOutput

B, H, W = 2, 24, 24


def random_inputs(seed=0, pos_fraction=0.1, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    logits = [torch.randn(B, 1, H, W, generator=gen).to(device).requires_grad_() for _ in range(3)]
    batch = {
        "prob_map": (torch.rand(B, 1, H, W, generator=gen) < pos_fraction).float().to(device),
        "prob_mask": (torch.rand(B, 1, H, W, generator=gen) < 0.9).float().to(device),
        "thresh_map": (0.3 + 0.4 * torch.rand(B, 1, H, W, generator=gen)).to(device),
        "thresh_mask": (torch.rand(B, 1, H, W, generator=gen) < 0.3).float().to(device),
        "image_id": [f"img{i}" for i in range(B)],
    }
    return DBOutput(*logits), batch


def make_loss(strict=False):
    return DBLoss(prob_weight=5, thresh_weight=10, binary_weight=1, ohem_ratio=3, eps=1e-6, strict=strict)


def reference_balanced_bce(logits, target, mask, ratio=3.0, eps=1e-6):
    """DB reference: boolean indexing, topk with a host-side k."""
    loss = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    positive = (target * mask).bool()
    negative = ((1 - target) * mask).bool()
    pos_count = int(positive.sum())
    k = min(int(negative.sum()), int(pos_count * ratio))
    neg_loss, _ = loss[negative].topk(k)
    return (loss[positive].sum() + neg_loss.sum()) / (pos_count + k + eps)


@pytest.mark.parametrize(("seed", "pos_fraction"), [(0, 0.1), (1, 0.4), (2, 0.02), (3, 0.9)])
def test_ohem_matches_reference(seed, pos_fraction):
    output, batch = random_inputs(seed, pos_fraction)
    args = (output.prob_logits, batch["prob_map"], batch["prob_mask"])
    ours = balanced_bce(*args, ohem_ratio=3.0, eps=1e-6)
    assert torch.allclose(ours, reference_balanced_bce(*args), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(("seed", "pos_fraction"), [(0, 0.1), (3, 0.9)])
def test_ohem_selects_exactly_min_neg_and_3_pos_hardest_negatives(seed, pos_fraction):
    output, batch = random_inputs(seed, pos_fraction)
    logits, target, mask = output.prob_logits, batch["prob_map"], batch["prob_mask"]
    balanced_bce(logits, target, mask, ohem_ratio=3.0, eps=1e-6).backward()
    negative = ((1 - target) * mask).bool()
    pos_count, neg_count = int((target * mask).sum()), int(negative.sum())
    selected = (logits.grad != 0) & negative
    k = min(neg_count, 3 * pos_count)
    assert int(selected.sum()) == k
    if k < neg_count:
        loss = F.binary_cross_entropy_with_logits(logits.detach(), target, reduction="none")
        assert loss[selected].min() >= loss[negative & ~selected].max()


def test_no_positives_gives_zero_prob_term():
    output, batch = random_inputs()
    batch["prob_map"].zero_()
    value = balanced_bce(output.prob_logits, batch["prob_map"], batch["prob_mask"], ohem_ratio=3.0, eps=1e-6)
    assert value.item() == 0.0


def test_empty_masks_give_zero_not_nan():
    output, batch = random_inputs()
    batch["prob_mask"].zero_()
    batch["thresh_mask"].zero_()
    losses = make_loss()(output, batch)
    for name in ("loss/prob", "loss/thresh", "loss/binary", "loss"):
        assert losses[name].item() == 0.0, name
    losses["loss"].backward()
    assert all(torch.isfinite(t.grad).all() for t in output)


def test_terms_match_hand_formulas_and_weights():
    output, batch = random_inputs()
    losses = make_loss()(output, batch)
    mask = batch["thresh_mask"]
    l1 = ((torch.sigmoid(output.thresh_logits) - batch["thresh_map"]).abs() * mask).sum() / mask.sum()
    pred, gt, m = torch.sigmoid(output.binary_logits), batch["prob_map"], batch["prob_mask"]
    dice = 1 - 2 * (pred * gt * m).sum() / ((pred * m).sum() + (gt * m).sum())
    assert torch.allclose(losses["loss/thresh"], l1, rtol=1e-5)
    assert torch.allclose(losses["loss/binary"], dice, rtol=1e-5)
    total = 5 * losses["loss/prob"] + 10 * losses["loss/thresh"] + losses["loss/binary"]
    assert torch.allclose(losses["loss"], total)
    assert set(losses) == {"loss", "loss/prob", "loss/thresh", "loss/binary"}


def test_gradients_reach_all_three_logits():
    output, batch = random_inputs()
    make_loss()(output, batch)["loss"].backward()
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in output)


def test_float32_under_bf16_autocast():
    output, batch = random_inputs()
    bf16 = DBOutput(*(t.detach().bfloat16().requires_grad_() for t in output))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses = make_loss()(bf16, batch)
    assert all(v.dtype == torch.float32 for v in losses.values())
    assert torch.allclose(losses["loss"], make_loss()(output, batch)["loss"], rtol=2e-2)


def test_default_mode_never_reads_tensor_values_on_the_host():
    """Meta tensors have no data: any .item(), .cpu(), nonzero or `if tensor` would raise."""
    output, batch = random_inputs(device="meta")
    losses = make_loss()(output, batch)
    assert losses["loss"].device.type == "meta"
    losses["loss"].backward()
    with pytest.raises((RuntimeError, NotImplementedError)):
        make_loss(strict=True)(output, batch)


def test_dice_and_l1_zero_on_empty_mask():
    logits = torch.randn(1, 1, 4, 4)
    empty = torch.zeros(1, 1, 4, 4)
    assert dice_loss(logits, empty, empty, eps=1e-6).item() == 0.0
    assert masked_l1(logits, empty, empty, eps=1e-6).item() == 0.0


@pytest.mark.parametrize("k", [0.0, 1.0, 2.5, 7.0, 10.0])
def test_sum_of_largest_equals_the_sorted_sum_with_ties_and_zeros(k):
    values = torch.tensor([0.0, 3.0, 1.5, 3.0, 0.25, 0.0, 2.0, 1.5, 1e-30, 7.0])
    expected = values.sort(descending=True).values[: int(torch.tensor(k).ceil())].sum()
    assert torch.allclose(sum_of_largest(values, torch.tensor(k)), expected)


def test_sum_of_largest_propagates_nan():
    values = torch.tensor([1.0, float("nan"), 2.0])
    assert torch.isnan(sum_of_largest(values, torch.tensor(1.0)))


def test_sum_of_largest_of_nothing_is_zero():
    assert sum_of_largest(torch.zeros(0), torch.tensor(0.0)).item() == 0.0
