"""ReceiptDataset, ImageFolderDataset and collate on tiny on-disk fixtures (incl. 8 EXIF orientations)."""

from __future__ import annotations

import logging
import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from ocr.data.collate import collate_batch
from ocr.data.dataset import INPUT_PX, ImageFolderDataset, ReceiptDataset, build_sample
from ocr.data.images import ImageReadError, orientation_matrix
from ocr.data.transforms import TransformResult
from ocr.geometry import apply_matrix, to_input, to_original
from ocr.machine import hardware
from ocr.types import BatchCoding, Geometry, TargetParams
from tests.helpers.receipt_fixtures import (
    BLOCK,
    TARGETS,
    block_image,
    block_words,
    eval_transform,
    make_root,
    write_split,
)

MEAN, STD = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)


def _dataset(
    root: Path,
    split: str = "val",
    long_side: int = 64,
    on_missing: str = "skip",
    exif_mode: str = "rotated",
    cache_dir: Path | None = None,
) -> ReceiptDataset:
    return ReceiptDataset(
        root=root,
        split=split,
        transform=eval_transform(long_side),
        exif_mode=exif_mode,
        on_missing_image=on_missing,
        min_polygon_size=1.0,
        targets=TARGETS,
        cache_dir=cache_dir,
        render_on="worker",
    )


def _prob_centroid(sample: dict) -> np.ndarray:
    """Centre of the prob map's text pixels in input px.

    Pixel index = coordinate, the cv2.fillPoly/findContours convention the targets and post-processing share.
    """
    ys, xs = np.nonzero(sample["prob_map"][0].numpy() > 0.5)
    return np.array([[xs.mean(), ys.mean()]], np.float32)


def test_sample_contract_and_scan_counts(tmp_path: Path) -> None:
    dataset = _dataset(make_root(tmp_path))
    assert len(dataset) == 3
    sample = dataset[0]
    assert sample["image"].shape == (3, 64, 64) and sample["image"].dtype == torch.uint8
    for key in ("prob_map", "prob_mask", "thresh_map", "thresh_mask"):
        assert sample[key].shape == (1, 64, 64) and sample[key].dtype == torch.uint8, key
    # the two-point polygon is removed and counted; the don't-care word is kept with ignore=True
    assert sample["ignore"] == [False, True] and sample["texts"] == ["TOTAL", "###"]
    assert sample["sanitation"] == {"too_few_points": 1}
    np.testing.assert_allclose(sample["polygons"][0], BLOCK)
    assert dataset.report.sanitation == {"too_few_points": 3}
    assert (dataset.report.num_words, dataset.report.num_ignore) == (6, 3)
    assert sample["prob_map"].sum() > 0 and sample["thresh_mask"].sum() > 0
    assert sample["prob_mask"][0, 5:11, 49:59].sum() == 0  # don't-care region (x 48-60, y 4-12) masked
    np.testing.assert_allclose(
        to_original([_prob_centroid(sample)], sample["geometry"])[0][0], BLOCK.mean(axis=0), atol=1.0
    )


def _exif_jpeg(path: Path, orientation: int) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation
    block_image(96, 64).save(path, quality=95, exif=exif)


def test_input_px_sanitation_is_counted_and_keeps_what_the_crop_left_out_of_the_targets() -> None:
    """The transformed polygons are sanitised in input px: text the crop left out, text too small at the
    training scale and text that lost its area are removed from the targets and counted, text cut by the
    crop's border is clipped to it and counted (with the scan's counts, apart from them)."""
    size = 32
    inside = np.array([[4, 4], [20, 4], [20, 12], [4, 12]], np.float32)
    cut = np.array([[24, 20], [40, 20], [40, 28], [24, 28]], np.float32)  # half over the right border
    polygons = [
        inside,
        cut,
        inside + 100.0,  # left out by the crop
        np.array([[4, 20], [4.4, 20], [4.4, 20.4], [4, 20.4]], np.float32),  # below min_polygon_size
        np.array([[2, 28], [10, 28], [18, 28]], np.float32),  # collinear: no area
    ]
    result = TransformResult(
        image=torch.zeros((3, size, size), dtype=torch.uint8),
        polygons=polygons,
        geometry=Geometry(np.eye(3), size, size, size, size),
    )
    targets = TargetParams(min_text_size=1.0)
    sample = build_sample(
        result,
        polygons,
        [False] * len(polygons),
        [None] * len(polygons),
        "a.png",
        {"too_few_points": 2},
        1.0,
        targets,
        BatchCoding(MEAN, STD, targets.thresh_min, targets.thresh_max),
    )
    assert sample["sanitation"] == {
        "too_few_points": 2,
        f"{INPUT_PX}clipped": 1,
        f"{INPUT_PX}out_of_image": 1,
        f"{INPUT_PX}too_small": 1,
        f"{INPUT_PX}zero_area": 1,
    }
    text = sample["thresh_mask"][0].numpy() > 0
    assert text[4:13, 4:21].any() and text[20:29, 24:].any()  # the kept and the clipped polygon
    assert not text[18:23, :8].any()  # nothing drawn for the one too small to learn from
    assert sample["polygons"] is polygons  # ground truth stays in original px, untouched


@pytest.mark.parametrize("exif_mode", ["raw", "rotated"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_round_trip_within_one_pixel(tmp_path: Path, orientation: int, exif_mode: str) -> None:
    """Raw block -> upright original px -> letterboxed input -> to_original lands on the block."""
    raw_block = np.array([[30, 40], [80, 40], [80, 60], [30, 60]], np.float32)  # inside the 96x64 image
    upright = apply_matrix(raw_block, orientation_matrix(orientation, 96, 64))
    stored = raw_block if exif_mode == "raw" else upright
    name = f"o{orientation}.jpg"
    write_split(tmp_path, "val", {name: [{"points": stored.tolist()}]}, create=False)
    _exif_jpeg(tmp_path / "images" / "val" / name, orientation)
    sample = _dataset(tmp_path, long_side=128, exif_mode=exif_mode)[0]
    geometry = sample["geometry"]
    assert (geometry.orig_width, geometry.orig_height) == ((64, 96) if orientation >= 5 else (96, 64))
    np.testing.assert_allclose(sample["polygons"][0], upright, atol=1e-3)
    centre_px = to_input([upright.mean(axis=0, keepdims=True)], geometry)[0][0]
    pixel = sample["image"].permute(1, 2, 0).numpy()[int(centre_px[1]), int(centre_px[0])]
    assert pixel[0] > 180 and pixel[1] < 90, f"block colour expected at the mapped centre, got {pixel}"
    back = to_original([_prob_centroid(sample)], geometry)[0][0]
    np.testing.assert_allclose(back, upright.mean(axis=0), atol=1.0)


def test_missing_image_skip_and_count_vs_fail(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    make_root(tmp_path)
    write_split(tmp_path, "val", {"val_0.png": block_words(), "ghost.png": block_words()}, create=False)
    with caplog.at_level(logging.WARNING, logger="ocr.data.scan"):
        dataset = _dataset(tmp_path, on_missing="skip")
    assert len(dataset) == 1 and dataset.report.missing == ["ghost.png"]
    warned = [r for r in caplog.records if "ghost.png" in r.getMessage()]
    assert [(r.name, r.levelno) for r in warned] == [("ocr.data.scan", logging.WARNING)]
    with pytest.raises(FileNotFoundError, match="ghost.png"):
        _dataset(tmp_path, on_missing="fail")


def test_corrupt_image_skip_and_count_vs_fail(tmp_path: Path) -> None:
    make_root(tmp_path)
    write_split(tmp_path, "val", {"val_0.png": block_words(), "bad.jpg": block_words()}, create=False)
    (tmp_path / "images" / "val" / "bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    dataset = _dataset(tmp_path, on_missing="skip")
    assert len(dataset) == 1 and dataset.report.unreadable == ["bad.jpg"]
    with pytest.raises(ImageReadError, match="bad.jpg"):
        _dataset(tmp_path, on_missing="fail")


def _truncated_jpeg(path: Path) -> None:
    """A JPEG cut in half: its header (and PIL's verify) still pass, the decoder refuses it."""
    block_image().save(path, quality=95)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _cut_in_last_scan(path: Path) -> None:
    """A progressive JPEG cut inside its last scan: every scan but the last decodes."""
    block_image().save(path, quality=95, progressive=True)
    data = path.read_bytes()
    last_scan = data.rindex(b"\xff\xda")
    path.write_bytes(data[: (last_scan + len(data)) // 2])


def _truncated_png(path: Path) -> None:
    block_image().save(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 3 // 4])


@pytest.mark.parametrize(
    ("name", "cut"),
    [("cut.jpg", _truncated_jpeg), ("cut.jpg", _cut_in_last_scan), ("cut.png", _truncated_png)],
)
def test_truncated_image_is_caught_by_the_scan_and_skipped(tmp_path: Path, name: str, cut: object) -> None:
    write_split(tmp_path, "val", {"good.png": block_words(), name: block_words()})
    cut(tmp_path / "images" / "val" / name)
    dataset = _dataset(tmp_path, on_missing="skip")
    assert len(dataset) == 1 and dataset.report.unreadable == [name]
    assert dataset[0]["image_id"] == "good.png"


@pytest.mark.parametrize(("cached", "min_long_side"), [(False, 1), (True, 64)])
def test_scan_decodes_at_the_smallest_scale_unless_the_cache_keeps_the_pixels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool, min_long_side: int
) -> None:
    """Without the decode cache the scan drops the pixels, so it decodes at 1/8 scale; one thread per core."""
    from ocr.data import images, scan

    write_split(tmp_path, "val", {f"val_{i}.png": block_words() for i in range(3)})
    seen, threads = [], []

    def read_image(path: Path, min_long_side: int | None = None) -> object:
        seen.append(min_long_side)
        return images.read_image(path, min_long_side)

    monkeypatch.setattr(scan, "read_image", read_image)

    class Pool(ThreadPoolExecutor):
        def __init__(self, max_workers: int) -> None:
            threads.append(max_workers)
            super().__init__(max_workers)

    monkeypatch.setattr(scan, "ThreadPoolExecutor", Pool)
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: set(range(12)), raising=False)
    dataset = _dataset(tmp_path, cache_dir=tmp_path / "cache" if cached else None)
    assert len(dataset) == 3 and seen == [min_long_side] * 3 and threads == [12]


def test_fail_names_every_unusable_image_at_once(tmp_path: Path) -> None:
    names = ["good.png", "ghost.png", "cut.jpg", "float.tif"]
    write_split(tmp_path, "val", {name: block_words() for name in names}, create=False)
    block_image().save(tmp_path / "images" / "val" / "good.png")
    _truncated_jpeg(tmp_path / "images" / "val" / "cut.jpg")
    Image.fromarray(np.zeros((8, 8), np.float32)).save(tmp_path / "images" / "val" / "float.tif")
    with pytest.raises(FileNotFoundError) as info:
        _dataset(tmp_path, on_missing="fail")
    message = str(info.value)
    assert (
        "1 missing: ghost.png" in message
        and "2 unreadable, corrupt or truncated: cut.jpg, float.tif" in message
    )
    assert "good.png" not in message


def test_scan_fills_the_decode_cache_so_loading_does_not_decode_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_split(tmp_path, "val", {f"val_{i}.png": block_words() for i in range(2)})
    dataset = _dataset(tmp_path, cache_dir=tmp_path / "cache")
    assert len(list((tmp_path / "cache").rglob("*.npy"))) == 2  # written by the scan itself

    def no_decode(*args: object, **kwargs: object) -> None:
        raise AssertionError("decoded again although the scan cached the image")

    monkeypatch.setattr("ocr.data.scan.read_image", no_decode)
    assert dataset[1]["image"].shape == (3, 64, 64)
    assert len(_dataset(tmp_path, cache_dir=tmp_path / "cache")) == 2  # a second scan reads headers only


def _scan_counting_saves(root: Path, cache: Path, start: Any, out: Path) -> None:
    """A DDP rank's scan of the split (in a forked process): how many cache entries it wrote."""
    from ocr.data import cache as cache_module

    saves = []
    save = cache_module.ImageCache.save

    def slow_save(self: Any, *args: Any, **kwargs: Any) -> None:
        time.sleep(0.2)  # both scans would probe every image before either wrote one
        saves.append(args[0])
        save(self, *args, **kwargs)

    cache_module.ImageCache.save = slow_save  # type: ignore[method-assign]
    start.wait()
    _dataset(root, cache_dir=cache)
    out.write_text(str(len(saves)))


def test_the_ranks_of_a_node_fill_the_decode_cache_once(tmp_path: Path) -> None:
    """Two processes scanning one split at once (the DDP ranks of a node): one decodes and writes every
    image, the other finds them cached; without the folder's lock both would write every entry."""
    write_split(tmp_path, "val", {f"val_{i}.png": block_words() for i in range(4)})
    context = multiprocessing.get_context("fork")
    start = context.Barrier(2)
    ranks = [
        context.Process(
            target=_scan_counting_saves, args=(tmp_path, tmp_path / "cache", start, tmp_path / f"saves{r}")
        )
        for r in (0, 1)
    ]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(120)
    assert [p.exitcode for p in ranks] == [0, 0]
    saves = sorted(int((tmp_path / f"saves{r}").read_text()) for r in (0, 1))
    assert saves == [0, 4]
    assert len(list((tmp_path / "cache").rglob("*.npy"))) == 4


def test_unannotated_files_and_wrong_recorded_sizes_are_counted_and_warned_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sizes = {f"val_{i}.png": {"img_w": 10, "img_h": 20} for i in range(2)}
    write_split(tmp_path, "val", {f"val_{i}.png": block_words() for i in range(3)}, image_keys=sizes)
    for extra in ("extra_0.jpg", "sub/extra_1.png"):
        (tmp_path / "images" / "val" / extra).parent.mkdir(exist_ok=True)
        block_image().save(tmp_path / "images" / "val" / extra)
    (tmp_path / "images" / "val" / "notes.txt").write_text("not an image")
    with caplog.at_level(logging.WARNING, logger="ocr.data.scan"):
        dataset = _dataset(tmp_path)
    assert len(dataset) == 3
    assert dataset.report.unannotated == ["extra_0.jpg", "sub/extra_1.png"]
    assert dataset.report.size_mismatch == ["val_0.png", "val_1.png"]
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "extra_0.jpg" in m]) == 1
    [size_warning] = [m for m in messages if "img_w/img_h" in m]
    assert "2 images" in size_warning and "val_0.png: 10x20 recorded, 160x120 decoded" in size_warning
    assert "decoded image's size is used" in size_warning
    np.testing.assert_allclose(dataset[0]["polygons"][0], BLOCK)  # the decoded size clips, not 10x20


def test_recorded_size_of_the_stored_frame_is_not_a_mismatch(tmp_path: Path) -> None:
    """img_w/img_h of the pre-EXIF frame (a raw-frame annotation file) agree with the file."""
    write_split(
        tmp_path,
        "val",
        {"o6.jpg": block_words()},
        create=False,
        image_keys={"o6.jpg": {"img_w": 96, "img_h": 64}},
    )
    _exif_jpeg(tmp_path / "images" / "val" / "o6.jpg", 6)
    assert _dataset(tmp_path).report.size_mismatch == []


def test_reduced_scale_decode_and_cache_keep_geometry(tmp_path: Path) -> None:
    """A 256 px JPEG for a 64 px input is DCT-decoded small; cached or not, geometry maps to full res."""
    big = np.full((192, 256, 3), 255, np.uint8)
    big[64:128, 48:208] = (255, 0, 0)
    block = np.array([[48, 64], [208, 64], [208, 128], [48, 128]], np.float32)
    write_split(tmp_path, "val", {"big.jpg": [{"points": block.tolist()}]}, create=False)
    Image.fromarray(big).save(tmp_path / "images" / "val" / "big.jpg", quality=95)
    samples = [_dataset(tmp_path, cache_dir=tmp_path / "cache")[0] for _ in range(2)]  # miss, then hit
    assert list((tmp_path / "cache").rglob("*.npy"))
    np.testing.assert_allclose(samples[0]["image"].numpy(), samples[1]["image"].numpy())
    for sample in samples:
        np.testing.assert_allclose(
            to_original([_prob_centroid(sample)], sample["geometry"])[0][0], block.mean(axis=0), atol=2.0
        )


def test_invalid_options_fail_loudly(tmp_path: Path) -> None:
    make_root(tmp_path)
    with pytest.raises(ValueError, match="on_missing_image"):
        _dataset(tmp_path, on_missing="ignore")
    bad_targets = {
        r"unknown: \['k'\], missing: \[\]": {**TARGETS, "k": 50},
        r"unknown: \[\], missing: \['thresh_max'\]": {k: v for k, v in TARGETS.items() if k != "thresh_max"},
    }
    for message, targets in bad_targets.items():
        with pytest.raises(ValueError, match=r"targets: expected exactly the keys .*" + message):
            ReceiptDataset(
                root=tmp_path,
                split="val",
                transform=eval_transform(),
                exif_mode="rotated",
                on_missing_image="skip",
                min_polygon_size=1.0,
                targets=targets,
                cache_dir=None,
                render_on="worker",
            )
    with pytest.raises(FileNotFoundError, match="nosuch.json"):
        _dataset(tmp_path, split="nosuch")


def test_image_folder_dataset(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    block_image().save(tmp_path / "b.png")
    block_image(80, 200).save(tmp_path / "sub" / "a.JPG")
    (tmp_path / "notes.txt").write_text("not an image")
    dataset = ImageFolderDataset(image_dir=tmp_path, transform=eval_transform())
    assert dataset.files == ["b.png", "sub/a.JPG"]
    sample = dataset[1]
    assert sample["image"].shape == (3, 64, 64) and sample["prob_map"].sum() == 0 and sample["polygons"] == []
    assert (sample["geometry"].orig_width, sample["geometry"].orig_height) == (80, 200)
    with pytest.raises(FileNotFoundError):
        ImageFolderDataset(image_dir=tmp_path / "missing", transform=eval_transform())


def test_collate_batch_contract(tmp_path: Path) -> None:
    dataset = _dataset(make_root(tmp_path))
    batch = collate_batch([dataset[0], dataset[1]])
    assert batch["images"].shape == (2, 3, 64, 64) and batch["prob_map"].shape == (2, 1, 64, 64)
    assert batch["image_id"] == ["val_0.png", "val_1.png"] and len(batch["geometry"]) == 2
    assert batch["sanitation"] == {"too_few_points": 2} and batch["ignore"] == [[False, True]] * 2
    other = ReceiptDataset(
        root=tmp_path,
        split="val",
        transform=eval_transform(32),
        exif_mode="rotated",
        on_missing_image="skip",
        min_polygon_size=1.0,
        targets=TARGETS,
        cache_dir=None,
        render_on="worker",
    )
    with pytest.raises(ValueError, match="val_0.png"):
        collate_batch([dataset[0], other[0]])
    with pytest.raises(ValueError, match="empty"):
        collate_batch([])
