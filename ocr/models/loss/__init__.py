"""DB losses and their input checks."""

from ocr.models.loss.bce import balanced_bce
from ocr.models.loss.checks import LossInputError, check_loss_inputs
from ocr.models.loss.db_loss import DBLoss
from ocr.models.loss.dice import dice_loss
from ocr.models.loss.l1 import masked_l1

__all__ = ["DBLoss", "LossInputError", "balanced_bce", "check_loss_inputs", "dice_loss", "masked_l1"]
