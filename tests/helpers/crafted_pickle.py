"""Checkpoint files whose unpickling runs a shell command: what a weights-only load must refuse unrun."""

from __future__ import annotations

import os
import pickle
import shlex
from pathlib import Path
from typing import Any

import torch


class RunsCommand:
    """Unpickled, it runs ``touch <marker>`` (what a hostile checkpoint's ``__reduce__`` does)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return os.system, (shlex.join(["touch", str(self.marker)]),)


def crafted_checkpoint(path: Path, marker: Path, *, bare: bool = False) -> Path:
    """A checkpoint-shaped file at ``path`` that touches ``marker`` when unpickled: ``torch.save``'s zip
    archive, or (``bare``) a plain ``pickle.dump`` as in the issue's two-line exploit."""
    if bare:
        path.write_bytes(pickle.dumps(RunsCommand(marker)))
    else:
        torch.save({"state_dict": {}, "ocr_config": RunsCommand(marker)}, path)
    return path
