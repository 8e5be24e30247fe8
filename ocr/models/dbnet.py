"""DBNet: encoder -> decoder -> DB head, composed from Hydra-instantiated parts."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from ocr.models.encoder import TimmEncoder
from ocr.models.head import DBHead
from ocr.types import DBOutput

__all__ = ["DBNet"]


class DBNet(nn.Module):
    """Text detector with a differentiable-binarization head.

    The decoder and head need channel counts known only once the encoder exists, so the config gives
    them as Hydra partials (``_partial_: true``) and this class completes them.

    Args:
        encoder: the backbone; its ``channels`` (strides 4, 8, 16, 32) size the decoder.
        decoder: partial called as ``decoder(in_channels=encoder.channels)``; the result must have
            ``out_channels``.
        head: partial called as ``head(in_channels=decoder.out_channels)``.
    """

    def __init__(
        self,
        *,
        encoder: TimmEncoder,
        decoder: Callable[..., nn.Module],
        head: Callable[..., DBHead],
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder(in_channels=list(encoder.channels))
        out_channels = getattr(self.decoder, "out_channels", None)
        if not isinstance(out_channels, int):
            raise TypeError(
                "model.decoder: expected a module with an int `out_channels`, "
                f"got {type(self.decoder).__name__} without one"
            )
        self.head = head(in_channels=out_channels)

    def forward(self, images: Tensor) -> DBOutput:
        """(B, 3, H, W) normalised images -> DBOutput of (B, 1, H, W) logits."""
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"images: expected (B, 3, H, W), got {tuple(images.shape)} {images.dtype}")
        features = self.encoder(images)  # 4 maps at strides 4, 8, 16, 32
        fused = self.decoder(features)  # (B, C, H/4, W/4)
        return self.head(fused, output_size=(images.shape[-2], images.shape[-1]))
