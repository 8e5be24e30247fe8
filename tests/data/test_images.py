from __future__ import annotations

import logging
import warnings
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image, ImageOps

from ocr.data import images
from ocr.data.images import (
    DecodedImage,
    ImageReadError,
    list_images,
    orientation_matrix,
    read_header,
    read_image,
    resolve_frame,
)

RAW_W, RAW_H = 48, 32  # non-square, so a wrong axis swap cannot pass
ORIENTATIONS = range(1, 9)


def _blocky(width: int, height: int, seed: int = 0) -> np.ndarray:
    """(H, W, 3) uint8 of 8x8 single-colour blocks, which survive JPEG almost unchanged."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (-(-height // 8), -(-width // 8), 3), dtype=np.uint8)
    return np.repeat(np.repeat(blocks, 8, axis=0), 8, axis=1)[:height, :width]


def _write_jpeg(path: Path, pixels: np.ndarray, orientation: int | None) -> Path:
    img = Image.fromarray(pixels)
    if orientation is None:
        img.save(path, quality=95)
    else:
        exif = Image.Exif()
        exif[0x0112] = orientation
        img.save(path, quality=95, exif=exif)
    return path


def _exif_transposed(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """Pillow's own EXIF transpose of an in-memory image (the reference, independent of our table)."""
    img = Image.fromarray(pixels)
    img.getexif()[0x0112] = orientation
    return np.asarray(ImageOps.exif_transpose(img))


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_orientation_matrix_maps_every_pixel_onto_the_same_content(orientation):
    raw = np.random.default_rng(orientation).integers(0, 256, (RAW_H, RAW_W, 3), dtype=np.uint8)
    upright = _exif_transposed(raw, orientation)
    matrix = orientation_matrix(orientation, RAW_W, RAW_H)
    ys, xs = np.mgrid[0:RAW_H, 0:RAW_W]
    centres = np.stack([xs.ravel() + 0.5, ys.ravel() + 0.5, np.ones(xs.size)], axis=1)
    mapped = centres @ matrix.T
    cols, rows = np.floor(mapped[:, 0]).astype(int), np.floor(mapped[:, 1]).astype(int)
    np.testing.assert_array_equal(upright[rows, cols], raw[ys.ravel(), xs.ravel()])
    np.testing.assert_allclose(mapped[:, :2] % 1.0, 0.5)  # pixel centres land on pixel centres


def test_orientation_matrix_rejects_unknown_tags():
    with pytest.raises(ValueError, match="1..8"):
        orientation_matrix(9, RAW_W, RAW_H)


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_read_image_applies_exif_orientation(tmp_path, orientation):
    path = _write_jpeg(tmp_path / f"o{orientation}.jpg", _blocky(RAW_W, RAW_H), orientation)
    decoded = read_image(path)
    reference = np.asarray(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))
    np.testing.assert_array_equal(decoded.image, reference)
    # OpenCV applies EXIF orientation too; its JPEG decoder may round differently.
    opencv = cv2.cvtColor(cv2.imread(str(path), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    assert opencv.shape == decoded.image.shape
    assert np.abs(opencv.astype(int) - decoded.image).mean() < 3
    swap = orientation >= 5
    assert (decoded.raw_width, decoded.raw_height) == (RAW_W, RAW_H)
    assert (decoded.orig_width, decoded.orig_height) == ((RAW_H, RAW_W) if swap else (RAW_W, RAW_H))
    assert decoded.image.shape == (decoded.orig_height, decoded.orig_width, 3)
    assert decoded.orientation == orientation and decoded.decode_scale == 1.0
    assert decoded.image.dtype == np.uint8 and decoded.image.flags.writeable


def test_read_image_without_exif_and_png(tmp_path):
    pixels = _blocky(RAW_W, RAW_H)
    assert read_image(_write_jpeg(tmp_path / "a.jpg", pixels, None)).orientation == 1
    Image.fromarray(pixels).convert("L").save(tmp_path / "g.png")
    gray = read_image(tmp_path / "g.png", min_long_side=4)
    assert gray.image.shape == (RAW_H, RAW_W, 3) and gray.decode_scale == 1.0  # PNG: no DCT scaling


@pytest.mark.parametrize(
    ("min_long_side", "scale", "shape"),
    [(None, 1.0, (128, 256)), (200, 1.0, (128, 256)), (128, 0.5, (64, 128)), (100, 0.5, (64, 128)),
     (64, 0.25, (32, 64)), (40, 0.25, (32, 64)), (32, 0.125, (16, 32)), (8, 0.125, (16, 32))],
)  # fmt: skip
def test_reduced_scale_jpeg_decode(tmp_path, min_long_side, scale, shape):
    pixels = _blocky(256, 128, seed=3)
    decoded = read_image(_write_jpeg(tmp_path / "big.jpg", pixels, None), min_long_side=min_long_side)
    assert decoded.decode_scale == scale
    assert decoded.image.shape == (*shape, 3)
    assert (decoded.orig_width, decoded.orig_height) == (256, 128)
    expected = cv2.resize(pixels, shape[::-1], interpolation=cv2.INTER_AREA)
    assert np.abs(expected.astype(int) - decoded.image).mean() < 12


def test_reduced_decode_with_rotation_and_odd_size(tmp_path):
    pixels = _blocky(203, 101, seed=4)
    decoded = read_image(_write_jpeg(tmp_path / "r.jpg", pixels, 6), min_long_side=50)
    assert decoded.decode_scale == 0.25
    assert decoded.image.shape == (51, 26, 3)  # ceil(203 / 4) x ceil(101 / 4), rotated
    assert (decoded.orig_width, decoded.orig_height) == (101, 203)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ImageReadError, match=r"nope\.jpg: missing file"):
        read_image(tmp_path / "nope.jpg")
    with pytest.raises(ImageReadError, match="not a file"):
        read_image(tmp_path)


def test_garbage_file_is_named(tmp_path):
    path = tmp_path / "garbage.jpg"
    path.write_bytes(b"this is not an image" * 10)
    with pytest.raises(ImageReadError, match=r"garbage\.jpg: unreadable"):
        read_image(path)


@pytest.mark.parametrize("min_long_side", [None, 16])
def test_truncated_jpeg_is_named(tmp_path, min_long_side):
    full = _write_jpeg(
        tmp_path / "full.jpg", np.random.default_rng(0).integers(0, 256, (96, 96, 3), np.uint8), None
    )
    path = tmp_path / "cut.jpg"
    path.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(ImageReadError, match=r"cut\.jpg: corrupt or truncated"):
        read_image(path, min_long_side=min_long_side)


def _decoded(orientation: int, raw_w: int = 200, raw_h: int = 100) -> DecodedImage:
    swap = orientation >= 5
    ow, oh = (raw_h, raw_w) if swap else (raw_w, raw_h)
    return DecodedImage(np.zeros((oh, ow, 3), np.uint8), ow, oh, raw_w, raw_h, orientation, 1.0)


def _box(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float32)


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_resolve_frame_raw_maps_with_the_orientation_matrix(orientation):
    polys = [_box(10, 20, 150, 40)]
    out, ambiguous = resolve_frame(polys, _decoded(orientation), "raw")
    matrix = orientation_matrix(orientation, 200, 100)
    expected = np.c_[polys[0], np.ones(4)] @ matrix.T
    np.testing.assert_allclose(out[0], expected[:, :2], atol=1e-4)
    assert out[0].dtype == np.float32 and not ambiguous
    unchanged, _ = resolve_frame(polys, _decoded(orientation), "rotated")
    np.testing.assert_array_equal(unchanged[0], polys[0])


def test_resolve_frame_auto_picks_the_frame_that_fits():
    decoded = _decoded(6)  # raw 200x100, upright 100x200
    raw_frame = [_box(120, 10, 190, 30)]  # x > 100: only fits the raw frame
    out, ambiguous = resolve_frame(raw_frame, decoded, "auto")
    np.testing.assert_allclose(out[0], resolve_frame(raw_frame, decoded, "raw")[0][0])
    assert not ambiguous
    upright_frame = [_box(10, 120, 90, 190)]  # y > 100: only fits the upright frame
    out, ambiguous = resolve_frame(upright_frame, decoded, "auto")
    np.testing.assert_array_equal(out[0], upright_frame[0])
    assert not ambiguous


def test_resolve_frame_auto_ties_keep_rotated_and_are_ambiguous():
    decoded = _decoded(8)
    both = [_box(10, 10, 60, 40)]
    neither = [_box(10, 10, 60, 40), _box(150, 150, 250, 190)]
    for polys in (both, neither):
        out, ambiguous = resolve_frame(polys, decoded, "auto")
        assert ambiguous
        np.testing.assert_array_equal(out[0], polys[0])
    within_tolerance = [_box(10, 10, 101, 40)]  # one px past the upright width still fits it
    assert resolve_frame(within_tolerance, decoded, "auto")[1]
    assert resolve_frame([], decoded, "auto") == ([], False)
    assert resolve_frame(both, _decoded(1), "auto")[1] is False


def test_resolve_frame_rejects_unknown_mode():
    with pytest.raises(ValueError, match="exif_mode"):
        resolve_frame([], _decoded(1), "upright")


def _png(path, image: Image.Image, **save_args) -> Path:
    image.save(path, format="PNG", **save_args)
    return path


def test_sixteen_bit_grey_png_is_scaled_not_clipped_to_white(tmp_path):
    grey16 = np.tile(np.linspace(0, 65535, 64).astype(np.uint16), (8, 1))
    decoded = read_image(_png(tmp_path / "g16.png", Image.fromarray(grey16)))
    assert decoded.image.dtype == np.uint8 and decoded.image.shape == (8, 64, 3)
    expected = np.round(grey16.astype(np.float64) / 257).astype(np.uint8)
    np.testing.assert_array_equal(decoded.image[..., 0], expected)
    assert 120 < decoded.image.mean() < 135  # a ramp, not all white


def test_sixteen_bit_rgb_png_keeps_its_colours(tmp_path):
    rgb16 = np.zeros((8, 8, 3), np.uint16)
    rgb16[..., 0], rgb16[..., 2] = 40000, 1000  # OpenCV writes BGR: red 1000, blue 40000
    path = tmp_path / "rgb16.png"
    assert cv2.imwrite(str(path), rgb16)
    np.testing.assert_allclose(read_image(path).image[0, 0], (1000 / 257, 0, 40000 / 257), atol=1)


def test_palette_png_is_expanded(tmp_path):
    palette = Image.new("P", (8, 8), 1)
    palette.putpalette([0, 0, 0, 200, 10, 10] + [0] * 762)
    np.testing.assert_array_equal(read_image(_png(tmp_path / "p.png", palette)).image[0, 0], (200, 10, 10))


@pytest.mark.parametrize(
    ("mode", "colour"),
    [("RGBA", (0, 0, 0, 0)), ("LA", (0, 0)), ("P", 0)],
)
def test_transparent_pixels_become_white_and_opaque_ones_keep_their_colour(tmp_path, mode, colour):
    image = Image.new(mode, (8, 8), colour)
    save_args = {}
    if mode == "P":
        image.putpalette([0, 0, 0, 40, 40, 40] + [0] * 762)
        save_args["transparency"] = 0
    image.paste(1 if mode == "P" else (40, 255) if mode == "LA" else (40, 40, 40, 255), (0, 0, 4, 8))
    decoded = read_image(_png(tmp_path / f"{mode}.png", image, **save_args)).image
    np.testing.assert_array_equal(decoded[0, 0], (40, 40, 40))  # opaque half
    np.testing.assert_array_equal(decoded[0, 7], (255, 255, 255))  # transparent half: paper white


@pytest.mark.parametrize(("dtype", "mode"), [(np.int32, "I"), (np.float32, "F")])
def test_thirty_two_bit_greyscale_is_refused_by_name(tmp_path, dtype, mode):
    path = tmp_path / f"{mode}.tif"
    Image.fromarray(np.full((8, 8), 70000, dtype)).save(path)
    with pytest.raises(ImageReadError, match=rf"{mode}\.tif: unsupported pixel format '{mode}'"):
        read_image(path)


def test_list_images_is_recursive_sorted_and_case_insensitive(tmp_path):
    """The one listing behind the predict folder scan and the count of unannotated image files."""
    for name in ("b.PNG", "sub/a.jpg", "notes.txt", "sub/c.JpEg"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "folder.jpg").mkdir()
    assert list_images(tmp_path) == ["b.PNG", "sub/a.jpg", "sub/c.JpEg"]


def test_a_large_image_is_said_once_in_our_words_not_as_pils_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 300)  # 20 x 20 = 400 px: PIL warns (errors above 600)
    monkeypatch.setattr(images, "_large_image_said", False)
    path = tmp_path / "big.png"
    Image.new("RGB", (20, 20), (255, 255, 255)).save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with caplog.at_level(logging.INFO, logger="ocr.data.images"):
            read_image(path)
            read_header(path)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: a large image (20 x 20 px, over PIL's 300-pixel warning limit): decoded anyway "
        "(images over twice the limit are refused as unreadable)"
    ]
