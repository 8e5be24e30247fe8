"""DBNet network parts, post-processing and losses (see docs/architecture.md)."""

from ocr.models.dbnet import DBNet
from ocr.models.decoder import FPNDecoder, UNetDecoder
from ocr.models.encoder import TimmEncoder
from ocr.models.head import DBHead
from ocr.models.postprocess import DBPostProcessor

__all__ = ["DBNet", "DBHead", "DBPostProcessor", "FPNDecoder", "TimmEncoder", "UNetDecoder"]
