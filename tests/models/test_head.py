from __future__ import annotations

import pytest
import torch

from ocr.models.head import DBHead, prior_bias


def test_prior_bias_inverts_sigmoid():
    assert torch.sigmoid(torch.tensor(prior_bias(0.01))).item() == pytest.approx(0.01)
    assert prior_bias(0.5) == 0.0


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1])
def test_prior_prob_must_be_a_probability(bad):
    with pytest.raises(ValueError, match="prior_prob"):
        DBHead(in_channels=16, k=50, prior_prob=bad)


def test_untrained_head_starts_at_the_background_prior():
    head = DBHead(in_channels=16, k=50, prior_prob=0.01).eval()
    out = head(torch.zeros(1, 16, 8, 8), output_size=(32, 32))
    assert torch.allclose(torch.sigmoid(out.prob_logits), torch.full_like(out.prob_logits, 0.01))


def test_logits_at_input_resolution_and_binary_is_db_step_logit():
    head = DBHead(in_channels=16, k=50, prior_prob=0.01)
    out = head(torch.randn(2, 16, 8, 12), output_size=(32, 48))
    assert all(tuple(t.shape) == (2, 1, 32, 48) for t in out)
    expected = 50 * (torch.sigmoid(out.prob_logits) - torch.sigmoid(out.thresh_logits))
    assert torch.allclose(out.binary_logits, expected)


def test_non_multiple_sizes_are_resized_exactly():
    head = DBHead(in_channels=16, k=50, prior_prob=0.01)
    out = head(torch.randn(1, 16, 26, 19), output_size=(102, 75))
    assert tuple(out.prob_logits.shape) == (1, 1, 102, 75)


def test_binary_logits_in_float32_under_bf16_autocast():
    """bf16 sigmoids step by ~0.004 near 0.5: times k = 50 that is a logit error of ~0.2."""
    head = DBHead(in_channels=16, k=50, prior_prob=0.01)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = head(torch.randn(2, 16, 8, 8), output_size=(32, 32))
    assert out.prob_logits.dtype == torch.bfloat16  # the branches do run in bf16
    assert out.binary_logits.dtype == torch.float32
    expected = 50 * (torch.sigmoid(out.prob_logits.float()) - torch.sigmoid(out.thresh_logits.float()))
    assert torch.allclose(out.binary_logits, expected, atol=1e-5, rtol=0)
