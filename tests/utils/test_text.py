"""plural: "(1 epoch)", not "(1 epochs)"."""

from __future__ import annotations

from ocr.utils.text import plural


def test_plural_counts() -> None:
    assert [plural(n, "epoch") for n in (0, 1, 2)] == ["0 epochs", "1 epoch", "2 epochs"]
