"""The device's share of post-processing: sigmoid and threshold where the logits are, then one
non-blocking copy into pinned host memory, with an event that says when it has landed.

Per pixel the host gets the uint8 bitmap and the probabilities, as float32 or, under 16-bit autocast, as
the int16 codes of the logits (decoded on the host by a table of the device's own sigmoid, so the scores
are a float32 map's bit for bit): 3 bytes instead of 4. On the CPU the arrays are views of the tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from ocr.evaluation.host_work import ImageMaps

__all__ = ["CODED_DTYPES", "HostMaps", "code_table", "maps_to_host", "probabilities_to_host"]

# 16-bit logit dtypes sent as codes, by the table name the workers look them up with.
CODED_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


def code_table(dtype: torch.dtype, device: torch.device) -> npt.NDArray[np.float32]:
    """(65536,) float32 ``sigmoid(logit.float())`` of every ``dtype`` bit pattern, computed on ``device``
    by the same kernel as the maps' (so that decoding a code gives the device's value), indexed by the
    pattern read as uint16."""
    codes = torch.arange(-(2**15), 2**15, dtype=torch.int32, device=device).to(torch.int16)
    table = torch.sigmoid(codes.view(dtype).float()).cpu().numpy()  # (65536,), codes -32768..32767
    return np.roll(table, -(2**15))  # index by uint16: 0..32767 first, then the negative patterns


@dataclass(frozen=True)
class HostMaps:
    """A batch's maps on the host (or on their way): (B, H, W) uint8 0/1 ``bitmap``, (B, H, W) ``prob``
    (float32, or int16 logit codes decoded by the ``table`` named), and the ``copied`` event (None: landed).
    """

    bitmap: Tensor
    prob: Tensor
    table: str | None
    copied: torch.cuda.Event | None

    def wait(self) -> None:
        """Block until the copies have landed (releases the GIL while it waits)."""
        if self.copied is not None:
            self.copied.synchronize()

    def __len__(self) -> int:
        return int(self.bitmap.shape[0])

    def shared(self) -> HostMaps:
        """The maps moved into shared memory (after :meth:`wait`): a worker process then receives an
        image's maps as a handle to them instead of a pickled copy (5 MB per 1024 px image in float32,
        copied four times on its way)."""
        return HostMaps(self.bitmap.share_memory_(), self.prob.share_memory_(), self.table, None)

    def image(self, index: int) -> ImageMaps:
        """Image ``index`` as NumPy views (call after :meth:`wait`)."""
        return ImageMaps(self.bitmap[index].numpy(), self.prob[index].numpy(), self.table)


def maps_to_host(prob_logits: Tensor, thresh: float) -> HostMaps:
    """(B, 1, H, W) probability logits on any device -> ``sigmoid(logits.float())`` and ``prob > thresh`` on
    the host (float32 comparisons, as NumPy's); on CUDA the copies are queued and :meth:`HostMaps.wait`
    waits for them. ValueError: not (B, 1, H, W)."""
    logits = _checked("prob_logits", prob_logits).detach()
    prob = torch.sigmoid(logits.float())[:, 0]  # (B, H, W) float32
    table = CODED_DTYPES.get(logits.dtype)
    return _to_host(prob, logits[:, 0].view(torch.int16) if table is not None else None, table, thresh)


def probabilities_to_host(prob_map: Tensor, thresh: float) -> HostMaps:
    """:func:`maps_to_host` for a (B, 1, H, W) probability map (ONNX Runtime's output)."""
    return _to_host(_checked("prob_map", prob_map).detach().float()[:, 0], None, None, thresh)


def _checked(name: str, maps: Tensor) -> Tensor:
    if maps.ndim != 4 or maps.shape[1] != 1:
        raise ValueError(
            f"{name}: expected (B, 1, H, W), got {tuple(maps.shape)} {maps.dtype} on {maps.device}"
        )
    return maps


def _to_host(prob: Tensor, codes: Tensor | None, table: str | None, thresh: float) -> HostMaps:
    """Threshold (B, H, W) float32 ``prob`` where it is and start the copies of the bitmap and of
    ``codes`` (when given) or ``prob``."""
    bitmap = (prob > thresh).to(torch.uint8)
    if prob.device.type == "cpu":
        return HostMaps(bitmap, prob, None, None)
    payload = codes if codes is not None else prob
    if prob.device.type != "cuda":  # another accelerator: plain blocking copies
        return HostMaps(bitmap.cpu(), payload.cpu(), table, None)
    host_bitmap = torch.empty(bitmap.shape, dtype=bitmap.dtype, pin_memory=True)
    host_prob = torch.empty(payload.shape, dtype=payload.dtype, pin_memory=True)
    host_bitmap.copy_(bitmap, non_blocking=True)
    host_prob.copy_(payload, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record()
    return HostMaps(host_bitmap, host_prob, table, copied)
