"""What a folder holds, byte for byte: for the tests that a command leaves the user's data as it was."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def tree_hashes(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (hidden ones too) by relative path: a file's SHA-256, a link's target,
    or ``folder``."""
    entries = {}
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root).as_posix()
        if path.is_symlink():
            entries[name] = f"link -> {os.readlink(path)}"
        elif path.is_file():
            entries[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            entries[name] = "folder"
    return entries
