"""Photometric augmentation in two halves: the DataLoader worker draws each sample's parameters, the
device applies them to the whole batch (``ocr.data.coding.decode_batch``).

The draws are albumentations' own, as ``A.Compose([ColorJitter(p), OneOf([GaussianBlur, MotionBlur], p),
GaussNoise(p)])`` makes them: the same probabilities, ColorJitter's factors and random order, the blur
kernels built by albumentations, GaussNoise's standard deviation. Only the pixel work moves: float32 ops on
the batch's device instead of uint8 ops per image in the worker, which cost 3.6 ms of the worker's 33 ms per
640 px receipt crop on one CPU core (docs/benchmarks.md). Colour ops clamp to [0, 1] after each step as the
uint8 ops saturate; the remaining differences are uint8 rounding (tests/data/test_photometric.py).

A sample's parameters are one float32 row: ``COLUMNS`` named scalars, then the K x K blur kernel
(row-major, the identity when the sample is not blurred), K the largest kernel the blur limit allows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import albumentations as A
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["COLUMNS", "PhotometricParams", "apply_photometric", "to_device"]

# colour: 1 when ColorJitter applies; order0..3: the positions of brightness (0), contrast (1),
# saturation (2) and hue (3) in the order they apply; noise_std in [0, 1] units; noise_seed: an integer.
COLUMNS = tuple(
    "colour brightness contrast saturation hue order0 order1 order2 order3 noise_std noise_seed".split()
)
_COL = {name: i for i, name in enumerate(COLUMNS)}
_SEEDS = 2**24  # exactly representable in float32
_NO_COLOUR_CHANGE = (1.0, 1.0, 1.0, 0.0)  # brightness, contrast, saturation factors and hue shift
_GRAY = (0.299, 0.587, 0.114)  # OpenCV's RGB2GRAY weights


class PhotometricParams:
    """Draws one sample's parameter row (worker side) with ColorJitter's ``brightness`` to ``hue``, a
    Gaussian/motion blur of odd size in ``blur_limit`` and noise std in ``noise_std_range`` (fractions of
    255), each op with its own probability; built from ``data.train_transform.photometric``."""

    def __init__(
        self,
        *,
        brightness: float,
        contrast: float,
        saturation: float,
        hue: float,
        p_color: float,
        blur_limit: Sequence[int],
        p_blur: float,
        noise_std_range: Sequence[float],
        p_noise: float,
    ) -> None:
        blur = (int(blur_limit[0]), int(blur_limit[1]))
        self.colour = A.ColorJitter(brightness=brightness, contrast=contrast, saturation=saturation, hue=hue)
        self.blurs = (A.GaussianBlur(blur_limit=blur), A.MotionBlur(blur_limit=blur))
        self.noise_std_range = (float(noise_std_range[0]), float(noise_std_range[1]))
        self.p_color, self.p_blur, self.p_noise = float(p_color), float(p_blur), float(p_noise)
        self.kernel_size = blur[1] + 1 - blur[1] % 2  # GaussianBlur rounds an even size up
        self.set_random_seed(0)

    def set_random_seed(self, seed: int) -> None:
        """Re-seed every draw (per DataLoader worker, through ``TrainTransform.set_random_seed``)."""
        self._rng = np.random.default_rng(seed)
        for transform in (self.colour, *self.blurs):
            transform.set_random_seed(seed)

    def __call__(self) -> Tensor:
        """One sample's row: ``len(COLUMNS) + K * K`` float32 values."""
        rng = self._rng
        row = np.zeros(len(COLUMNS) + self.kernel_size**2, np.float32)
        row[_COL["brightness"] : _COL["hue"] + 1] = _NO_COLOUR_CHANGE
        row[_COL["order0"] : _COL["order3"] + 1] = (0, 1, 2, 3)
        if rng.random() < self.p_color:
            params = self.colour.get_params()
            row[_COL["colour"]] = 1.0
            row[_COL["brightness"] : _COL["hue"] + 1] = [
                params[k] for k in ("brightness", "contrast", "saturation", "hue")
            ]
            row[_COL["order0"] : _COL["order3"] + 1] = params["order"]
        kernel = _identity_kernel(self.kernel_size)
        if rng.random() < self.p_blur:
            kernel = self._embed(self._blur_kernel(int(rng.integers(len(self.blurs)))))
        row[len(COLUMNS) :] = kernel.ravel()
        if rng.random() < self.p_noise:
            row[_COL["noise_std"]] = rng.uniform(*self.noise_std_range)
            row[_COL["noise_seed"]] = rng.integers(_SEEDS)
        return torch.from_numpy(row)

    def _blur_kernel(self, which: int) -> np.ndarray:
        """The 2-D kernel GaussianBlur (separable, ``which`` 0) or MotionBlur (1) would convolve with."""
        if which == 0:
            line = self.blurs[0].get_params_dependent_on_data({}, {})["kernel"]
            return np.outer(line, line).astype(np.float32)
        return np.asarray(self.blurs[1].get_params()["kernel"], np.float32)

    def _embed(self, kernel: np.ndarray) -> np.ndarray:
        """``kernel`` centred (OpenCV's anchor, size // 2) in a K x K array."""
        out = np.zeros((self.kernel_size, self.kernel_size), np.float32)
        start = self.kernel_size // 2 - kernel.shape[0] // 2
        out[start : start + kernel.shape[0], start : start + kernel.shape[1]] = kernel
        return out


def apply_photometric(images: Tensor, params: Tensor) -> Tensor:
    """Apply each sample's row of ``params`` (B, len(COLUMNS) + K * K), kept on the host, to ``images``
    (B, 3, H, W) float RGB in [0, 1] on any device; returns a new tensor. Which samples each op touches
    is decided on the host, so a CUDA batch never waits for the device; rows that change nothing cost
    nothing."""
    rows = params.detach().to("cpu", torch.float32)
    size = math.isqrt(rows.shape[1] - len(COLUMNS))
    identity = torch.from_numpy(_identity_kernel(size).ravel())
    steps: list[tuple[int, Tensor]] = []  # (op: 0-3 colour, 4 blur, 5 noise), the samples it touches
    colour = rows[:, _COL["colour"]] > 0
    for position in range(4):
        for op, unchanged in enumerate(_NO_COLOUR_CHANGE):
            factor = rows[:, _COL["brightness"] + op]
            steps.append((op, colour & (rows[:, _COL["order0"] + position] == op) & (factor != unchanged)))
    steps.append((4, (rows[:, len(COLUMNS) :] != identity).any(1)))
    steps.append((5, rows[:, _COL["noise_std"]] > 0))
    steps = [(op, mask.nonzero().squeeze(1)) for op, mask in steps if bool(mask.any())]
    if not steps:
        return images
    seed = int(rows[:, _COL["noise_seed"]].sum())
    # One host-to-device copy of the rows and one of every index (pinned, so non-blocking on CUDA).
    indices = to_device(torch.cat([index for _, index in steps]), images.device)
    table = to_device(rows, images.device)
    out = images.clone()
    start = 0
    for op, host_index in steps:
        index = indices[start : start + len(host_index)]
        start += len(host_index)
        selected, row = out.index_select(0, index), table.index_select(0, index)
        if op < 4:
            changed = _COLOUR_OPS[op](selected, row[:, _COL["brightness"] + op])
        elif op == 4:
            changed = _convolve(selected, row[:, len(COLUMNS) :].reshape(-1, size, size))
        else:
            changed = _noise(selected, row[:, _COL["noise_std"]], seed)
        out.index_copy_(0, index, changed)
    return out


def _identity_kernel(size: int) -> np.ndarray:
    """(size, size) float32 kernel that leaves an image as it is."""
    kernel = np.zeros((size, size), np.float32)
    kernel[size // 2, size // 2] = 1.0
    return kernel


def to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """A host tensor on ``device`` without waiting for it: on CUDA through pinned memory, non-blocking
    (a copy from pageable memory would wait for the stream); a tensor already there is returned."""
    if device.type != "cuda" or tensor.device.type == "cuda":
        return tensor.to(device)
    return (tensor if tensor.is_pinned() else tensor.pin_memory()).to(device, non_blocking=True)


def _per_sample(values: Tensor) -> Tensor:
    return values.view(-1, 1, 1, 1)


def _gray(images: Tensor) -> Tensor:
    """(B, 1, H, W) luma with OpenCV's weights."""
    r, g, b = images.unbind(1)
    return (_GRAY[0] * r + _GRAY[1] * g + _GRAY[2] * b).unsqueeze(1)


def _brightness(images: Tensor, factor: Tensor) -> Tensor:
    return (images * _per_sample(factor)).clamp_(0.0, 1.0)


def _contrast(images: Tensor, factor: Tensor) -> Tensor:
    mean = _gray(images).mean(dim=(1, 2, 3), keepdim=True)
    f = _per_sample(factor)
    return (images * f + mean * (1.0 - f)).clamp_(0.0, 1.0)


def _saturation(images: Tensor, factor: Tensor) -> Tensor:
    f = _per_sample(factor)
    return (images * f + _gray(images) * (1.0 - f)).clamp_(0.0, 1.0)


def _hue(images: Tensor, shift: Tensor) -> Tensor:
    """Rotate the hue by ``shift`` turns (HSV round trip, as torchvision's and albumentations' hue)."""
    r, g, b = images.unbind(1)
    value, low = images.amax(1), images.amin(1)
    delta = value - low
    saturation = torch.where(value > 0, delta / value.clamp_min(1e-12), torch.zeros_like(value))
    safe = torch.where(delta > 0, delta, torch.ones_like(delta))
    rc, gc, bc = ((value - c) / safe for c in (r, g, b))
    sextant = torch.where(value == r, bc - gc, torch.where(value == g, 2.0 + rc - bc, 4.0 + gc - rc))
    hue6 = torch.remainder(sextant + 6.0 * shift.view(-1, 1, 1), 6.0)  # hue in sixths of a turn
    # HSV -> RGB, channel by channel: c = V - V S clamp(min(k, 4 - k), 0, 1), k = (n + 6 H) mod 6
    channels = []
    for n in (5.0, 3.0, 1.0):
        k = torch.remainder(hue6 + n, 6.0)
        channels.append(value - value * saturation * torch.minimum(k, 4.0 - k).clamp(0.0, 1.0))
    return torch.stack(channels, 1).clamp_(0.0, 1.0)


def _convolve(images: Tensor, kernels: Tensor) -> Tensor:
    """Each image correlated with its own (K, K) kernel, borders reflected (OpenCV's default)."""
    batch, channels, height, width = images.shape
    size = kernels.shape[-1]
    padded = F.pad(images.reshape(1, batch * channels, height, width), [size // 2] * 4, mode="reflect")
    weight = kernels.repeat_interleave(channels, 0).unsqueeze(1).to(images.dtype)  # (B * 3, 1, K, K)
    out = F.conv2d(padded, weight, groups=batch * channels)
    return out.reshape(batch, channels, height, width).clamp_(0.0, 1.0)


def _noise(images: Tensor, std: Tensor, seed: int) -> Tensor:
    """Zero-mean Gaussian noise per pixel and channel with each sample's ``std``, from a generator seeded
    by the batch's rows (the same batch always gets the same noise: crash replays are exact)."""
    generator = torch.Generator(device=images.device)
    generator.manual_seed(seed)
    noise = torch.randn(images.shape, generator=generator, device=images.device, dtype=images.dtype)
    return (images + noise * _per_sample(std)).clamp_(0.0, 1.0)


_COLOUR_OPS = (_brightness, _contrast, _saturation, _hue)
