"""DB loss: weighted balanced BCE (prob), masked L1 (threshold) and Dice (binary), in float32."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ocr.models.autocast import autocast_disabled
from ocr.models.loss.bce import balanced_bce
from ocr.models.loss.checks import check_loss_inputs, value_check_mode
from ocr.models.loss.dice import dice_loss
from ocr.models.loss.l1 import masked_l1
from ocr.types import DBOutput

__all__ = ["DBLoss"]


class DBLoss(nn.Module):
    """``prob_weight * BCE_ohem + thresh_weight * L1 + binary_weight * Dice`` (DB paper: 5, 10, 1).

    Runs with autocast disabled on float32 copies of the inputs, since the BCE/sigmoid terms are not
    safe in half precision. Inputs are checked by :func:`check_loss_inputs`; on CUDA (``flag`` mode)
    bad input values make the total loss NaN instead of firing a device-side assert, so the non-finite
    guard stops the run with the step and the CUDA context stays usable for the crash bundle.

    Args:
        prob_weight: weight of the balanced BCE on ``prob_logits``.
        thresh_weight: weight of the masked L1 on ``sigmoid(thresh_logits)``.
        binary_weight: weight of the Dice on ``sigmoid(binary_logits)``.
        ohem_ratio: hard negatives kept per positive pixel.
        eps: denominator guard for all terms.
        strict: synchronising value checks with exact messages (debugging) instead of async asserts.
    """

    def __init__(
        self,
        *,
        prob_weight: float,
        thresh_weight: float,
        binary_weight: float,
        ohem_ratio: float,
        eps: float,
        strict: bool,
    ) -> None:
        super().__init__()
        self.prob_weight = prob_weight
        self.thresh_weight = thresh_weight
        self.binary_weight = binary_weight
        self.ohem_ratio = ohem_ratio
        self.eps = eps
        self.strict = strict

    def forward(self, output: DBOutput, batch: Mapping[str, Any]) -> dict[str, Tensor]:
        """Loss terms by name: ``loss`` (weighted total), ``loss/prob``, ``loss/thresh``, ``loss/binary``.

        Raises:
            LossInputError: missing key, wrong shape/dtype/device (always) or bad values (strict mode,
                and on the CPU).
        """
        logits = output.prob_logits
        return self.terms(output, batch, logits.device.type if isinstance(logits, Tensor) else "cpu")

    def terms(self, output: DBOutput, batch: Mapping[str, Any], device_type: str) -> dict[str, Tensor]:
        """:meth:`forward` with the value-check mode of ``device_type`` (tests run the CUDA path on CPU)."""
        mode = value_check_mode(device_type, self.strict)
        tensors, valid = check_loss_inputs(output, batch, mode)
        with autocast_disabled(tensors["prob_logits"].device.type):
            t = {name: value.float() for name, value in tensors.items()}
            prob = balanced_bce(
                t["prob_logits"], t["prob_map"], t["prob_mask"], ohem_ratio=self.ohem_ratio, eps=self.eps
            )
            thresh = masked_l1(t["thresh_logits"], t["thresh_map"], t["thresh_mask"], eps=self.eps)
            binary = dice_loss(t["binary_logits"], t["prob_map"], t["prob_mask"], eps=self.eps)
            total = self.prob_weight * prob + self.thresh_weight * thresh + self.binary_weight * binary
            if valid is not None:
                total = torch.where(valid, total, torch.full_like(total, float("nan")))
        return {"loss": total, "loss/prob": prob, "loss/thresh": thresh, "loss/binary": binary}
