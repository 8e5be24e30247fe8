"""Small helpers for the wording of log lines."""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str) -> str:
    """``"1 epoch"``, ``"2 epochs"``: the count and the noun, in the plural unless the count is 1."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
