from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import numpy as np

from ocr.data import cache as cache_module
from ocr.data.cache import ImageCache, cache_fingerprint, code_version

CONFIG = {"long_side": 640, "pad": True, "sizes": [1, 2], "nested": {"b": 1, "a": 2}}


def _annotations(tmp_path: Path, text: str = '{"images": {}}') -> Path:
    path = tmp_path / "val.json"
    path.write_text(text)
    return path


def test_fingerprint_is_stable_and_key_order_free(tmp_path):
    path = _annotations(tmp_path)
    reordered = {"nested": {"a": 2, "b": 1}, "sizes": [1, 2], "pad": True, "long_side": 640}
    assert cache_fingerprint(path, CONFIG) == cache_fingerprint(path, reordered)
    assert len(cache_fingerprint(None, CONFIG)) == 64


def test_fingerprint_changes_with_annotations_config_and_code(tmp_path, monkeypatch):
    path = _annotations(tmp_path)
    base = cache_fingerprint(path, CONFIG)
    assert cache_fingerprint(None, CONFIG) != base
    assert cache_fingerprint(path, {**CONFIG, "long_side": 1024}) != base
    assert cache_fingerprint(path, {**CONFIG, "nested": {"b": 1, "a": 3}}) != base
    path.write_text('{"images": {"a.jpg": {"words": {}}}}')
    changed = cache_fingerprint(path, CONFIG)
    assert changed != base
    monkeypatch.setattr(cache_module, "code_version", lambda: "another version")
    assert cache_fingerprint(path, CONFIG) != changed


def test_code_version_hashes_the_data_package_sources(tmp_path, monkeypatch):
    fake = tmp_path / "data"
    fake.mkdir()
    (fake / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(cache_module, "_DATA_PACKAGE", fake)
    first = code_version()
    (fake / "a.py").write_text("x = 2\n")
    assert code_version() != first


def test_save_then_load_and_miss_returns_none(tmp_path):
    cache = ImageCache(tmp_path / "cache", "ab" * 32)
    assert cache.load("img/a.jpg") is None
    image = np.random.default_rng(0).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    cache.save("img/a.jpg", image)
    loaded = cache.load("img/a.jpg")
    np.testing.assert_array_equal(loaded, image)
    assert loaded.dtype == np.uint8
    assert cache.load("img/b.jpg") is None
    assert cache.directory == tmp_path / "cache" / ("ab" * 8)
    assert [p.suffix for p in cache.directory.iterdir()] == [".npy"]


def test_other_fingerprint_does_not_see_entries(tmp_path):
    ImageCache(tmp_path, "1" * 64).save("a", np.zeros((2, 2), np.uint8))
    assert ImageCache(tmp_path, "2" * 64).load("a") is None


def test_source_file_change_invalidates_the_entry(tmp_path):
    source = tmp_path / "a.jpg"
    source.write_bytes(b"one")
    cache = ImageCache(tmp_path / "c", "f" * 64)
    cache.save("a.jpg", np.ones((2, 2), np.uint8), source=source)
    assert cache.load("a.jpg", source=source) is not None
    source.write_bytes(b"other")
    os.utime(source, ns=(1, 1))
    assert cache.load("a.jpg", source=source) is None
    assert cache.load("a.jpg", source=tmp_path / "missing.jpg") is None


def test_corrupt_entry_is_a_miss_and_failed_write_does_not_raise(tmp_path, caplog):
    cache = ImageCache(tmp_path, "e" * 64)
    cache.save("a", np.zeros((4, 4), np.uint8))
    entry = cache.path("a")
    entry.write_bytes(entry.read_bytes()[:20])
    assert cache.load("a") is None
    blocker = tmp_path / "file"
    blocker.write_text("")
    ImageCache(blocker, "e" * 64).save(
        "a", np.zeros((2, 2), np.uint8)
    )  # parent is a file: logged, not raised
    assert "image cache: could not write 'a'" in caplog.text


def test_entries_that_would_eat_into_the_disk_reserve_are_skipped_and_counted(tmp_path, caplog):
    cache = ImageCache(tmp_path, "f" * 64, reserve_bytes=shutil.disk_usage(tmp_path).free + 2**40)
    for name in ("a", "b"):
        cache.save(name, np.zeros((4, 4), np.uint8))
    assert cache.skipped == 2 and cache.load("a") is None and not list(cache.directory.glob("*.npy"))
    assert caplog.text.count("under the") == 1 and "images from 'a' on are decoded each time" in caplog.text
    roomy = ImageCache(tmp_path, "f" * 64, reserve_bytes=0)
    roomy.save("a", np.ones((4, 4), np.uint8))
    assert roomy.skipped == 0 and roomy.load("a") is not None


def test_a_folder_that_cannot_be_locked_is_filled_without_the_lock(tmp_path, monkeypatch, caplog):
    """A file system without locks (some network mounts) must not stop a run: each write is atomic."""

    def no_locks(handle, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(cache_module.fcntl, "flock", no_locks)
    cache = ImageCache(tmp_path, "d" * 64)
    with cache.filling():
        cache.save("a", np.zeros((2, 2), np.uint8))
    assert cache.load("a") is not None
    assert "cannot lock" in caplog.text and "No locks available" in caplog.text
