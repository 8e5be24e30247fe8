"""Photometric augmentation on the device: albumentations' draws, the same pixels as its uint8 ops."""

from __future__ import annotations

import albumentations as A
import cv2
import numpy as np
import pytest
import torch

from ocr.data.photometric import COLUMNS, PhotometricParams, apply_photometric
from tests.helpers.receipt_fixtures import PHOTOMETRIC_KEYS, TRAIN_ARGS

CONFIG = {key: TRAIN_ARGS[key] for key in PHOTOMETRIC_KEYS}


def _image(seed: int = 0, size: int = 48) -> np.ndarray:
    """(H, W, 3) uint8 RGB: coloured gradients, dark strokes and saturated patches (clipping is exercised)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size] / (size - 1)
    image = np.stack([x, y, 1.0 - 0.5 * (x + y)], -1) * 255.0
    image[size // 3 : size // 3 + 3, 4:-4] = rng.integers(0, 40, 3)
    image[-10:, -10:] = (255, 250, 10)
    return np.clip(image + rng.normal(0, 6, image.shape), 0, 255).astype(np.uint8)


def _row(size: int = 5, **values: float) -> torch.Tensor:
    row = torch.zeros(len(COLUMNS) + size * size)
    row[[COLUMNS.index(k) for k in ("brightness", "contrast", "saturation")]] = 1.0
    row[[COLUMNS.index(f"order{i}") for i in range(4)]] = torch.arange(4.0)
    row[len(COLUMNS) + (size * size) // 2] = 1.0  # identity kernel
    for key, value in values.items():
        row[COLUMNS.index(key)] = value
    return row


def _device(image: np.ndarray, rows: torch.Tensor) -> np.ndarray:
    batch = torch.from_numpy(image).permute(2, 0, 1)[None].float() / 255.0
    out = apply_photometric(batch.expand(len(rows), -1, -1, -1).contiguous(), rows)
    return (out * 255.0).permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize(
    ("op", "factor", "uint8_mean", "uint8_max"),
    [("brightness", 1.17, 0.5, 1.0), ("brightness", 0.83, 0.5, 1.0), ("contrast", 1.2, 0.6, 1.5),
     ("contrast", 0.8, 0.6, 1.5), ("saturation", 1.2, 0.6, 1.5), ("saturation", 0.8, 0.6, 1.5),
     ("hue", 0.02, 1.1, 10.0), ("hue", -0.015, 1.1, 10.0)],
)  # fmt: skip
def test_each_colour_op_matches_albumentations(
    op: str, factor: float, uint8_mean: float, uint8_max: float
) -> None:
    image = _image()
    ranges = {"brightness": (1, 1), "contrast": (1, 1), "saturation": (1, 1), "hue": (0, 0)}
    ranges[op] = (factor, factor)
    jitter = A.ColorJitter(**ranges, p=1.0)
    got = _device(image, _row(colour=1.0, **{op: factor})[None])[0]
    # albumentations' float32 path: the same pixels
    as_float = jitter(image=image.astype(np.float32) / 255.0)["image"] * 255.0
    assert np.abs(got - as_float).max() < 0.05
    # its uint8 path (the workers' former one) rounds after each op, and OpenCV's uint8 HSV keeps the hue
    # in 2-degree steps: that, and only that, differs
    diff = np.abs(got - jitter(image=image)["image"])
    assert diff.mean() < uint8_mean and diff.max() <= uint8_max, (diff.mean(), diff.max())
    assert np.abs(got - image).mean() > 2.0  # the op did change the image


def test_colour_ops_apply_in_the_drawn_order() -> None:
    image = _image(1)
    params = {"brightness": 1.2, "contrast": 0.8, "saturation": 1.2, "hue": 0.0}
    orders = ([0, 1, 2, 3], [2, 1, 0, 3])
    rows = torch.stack([_row(colour=1.0, **params) for _ in orders])
    for i, order in enumerate(orders):
        rows[i, [COLUMNS.index(f"order{k}") for k in range(4)]] = torch.tensor(order, dtype=torch.float32)
    got = _device(image, rows)
    jitter = A.ColorJitter(brightness=(1.2, 1.2), contrast=(0.8, 0.8), saturation=(1.2, 1.2), hue=(0, 0))
    for i, order in enumerate(orders):
        expected = jitter.apply(image.astype(np.float32) / 255.0, **params, order=order) * 255.0
        assert np.abs(got[i] - expected).max() < 0.05
    assert np.abs(got[0] - got[1]).mean() > 0.5  # brightness before or after the clipping contrast differs


@pytest.mark.parametrize("which", [0, 1])
def test_blur_kernels_are_albumentations_and_convolve_as_opencv(which: int) -> None:
    params = PhotometricParams(**{**CONFIG, "p_blur": 1.0})
    params.set_random_seed(3)
    kernel = params._embed(params._blur_kernel(which))
    assert kernel.shape == (5, 5) and abs(kernel.sum() - 1.0) < 1e-5
    image = _image(2)
    row = _row()
    row[len(COLUMNS) :] = torch.from_numpy(kernel.ravel())
    expected = cv2.filter2D(image.astype(np.float32), -1, kernel, borderType=cv2.BORDER_REFLECT_101)
    got = _device(image, row[None])[0]
    assert np.abs(got - expected).max() < 1e-3


def test_noise_has_the_drawn_std_and_repeats_for_the_same_rows() -> None:
    image = np.full((64, 64, 3), 128, np.uint8)
    rows = torch.stack([_row(noise_std=0.03, noise_seed=11.0), _row()])
    got = _device(image, rows)
    assert np.std(got[0] - 128.0) == pytest.approx(0.03 * 255, rel=0.05)
    assert np.abs(got[1] - 128.0).max() < 1e-3  # the other sample is untouched
    np.testing.assert_array_equal(got, _device(image, rows))


def test_parameter_draws_follow_the_configured_probabilities_and_ranges() -> None:
    params = PhotometricParams(**CONFIG)
    params.set_random_seed(0)
    rows = torch.stack([params() for _ in range(4000)])
    colour = rows[:, COLUMNS.index("colour")] > 0
    noisy = rows[:, COLUMNS.index("noise_std")] > 0
    identity = torch.zeros(25)
    identity[12] = 1.0
    blurred = (rows[:, len(COLUMNS) :] != identity).any(1)
    for flags, p in ((colour, 0.5), (blurred, 0.1), (noisy, 0.1)):
        assert float(flags.float().mean()) == pytest.approx(p, abs=0.03)
    for i, name in enumerate(("brightness", "contrast", "saturation")):
        values = rows[colour, COLUMNS.index(name)]
        assert 0.8 <= float(values.min()) and float(values.max()) <= 1.2 and float(values.std()) > 0.1
        assert (rows[~colour, COLUMNS.index(name)] == 1.0).all(), i
    assert rows[colour, COLUMNS.index("hue")].abs().max() <= 0.02
    orders = rows[colour][:, [COLUMNS.index(f"order{k}") for k in range(4)]]
    assert (orders.sort(1).values == torch.arange(4.0)).all() and len(
        {tuple(o.tolist()) for o in orders}
    ) > 20
    std = rows[noisy, COLUMNS.index("noise_std")]
    assert 0.01 <= float(std.min()) and float(std.max()) <= 0.04
    params.set_random_seed(0)
    torch.testing.assert_close(torch.stack([params() for _ in range(50)]), rows[:50])


def test_rows_that_change_nothing_leave_the_batch_as_is() -> None:
    images = torch.rand(3, 3, 16, 16)
    assert apply_photometric(images, torch.stack([_row() for _ in range(3)])) is images
