"""Read a checkpoint file written by training, and say what a file that is not one is instead.

Test, predict, export, resume and ``model.init_from`` read through :func:`load_checkpoint`; nothing here
builds a module (``ocr.lightning_modules.restore`` does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ocr.utils.errors import CheckpointError, InputNotFoundError

__all__ = ["load_checkpoint", "load_checkpoint_file"]

# torch.save writes zip archives (since torch 1.6); how far into a refused file to look. A zip ends with
# its end-of-central-directory record (22 bytes plus a comment of at most 64 KiB): a cut file lacks it.
_ZIP_MAGIC = b"PK\x03\x04"
_ZIP_END = b"PK\x05\x06"
_ZIP_TAIL_BYTES = 22 + 2**16
_HEAD_BYTES = 256


def load_checkpoint(path: str | Path, key: str = "ckpt") -> dict[str, Any]:
    """Load a checkpoint written by ``runners/train.py`` on the CPU (what test, predict, resume and
    ``model.init_from`` start from). Errors name the path as the value of the config ``key``.

    Raises:
        InputNotFoundError: naming the path when it is not a file.
        CheckpointError: naming the path and what the file is instead of such a checkpoint: empty,
            a truncated checkpoint or another broken zip, a text file, other bytes, or an object without the
            weights and run config (a bare state dict, a Lightning checkpoint from elsewhere, ...).
    """
    checkpoint = load_checkpoint_file(path, key)
    problem = _not_a_run_checkpoint(checkpoint)
    if problem:
        raise CheckpointError(
            f"{key}={path}: expected a checkpoint written by runners/train.py, got {problem}"
        )
    return checkpoint


def load_checkpoint_file(path: str | Path, key: str = "ckpt", *, mmap: bool = False) -> Any:
    """``torch.load`` of ``path`` on the CPU (not weights-only: our checkpoints hold the run config and RNG
    states), with a file that cannot be loaded named as the value of ``key`` and said what it is.

    Raises:
        InputNotFoundError: the path is not a file.
        CheckpointError: the file is empty, truncated, a text file or other bytes.
    """
    path = Path(path)
    if not path.is_file():
        what = "a directory" if path.is_dir() else "no such file"
        raise InputNotFoundError(
            f"{key}={path}: expected a checkpoint file, got {what} "
            f"(pass {key}=<run dir>/checkpoints/<name>.ckpt)"
        )
    import torch  # imported once a file is read: the runners import this module before they need torch

    try:
        return torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    except Exception as exc:  # unpickling raises anything from EOFError to ValueError
        what = _unloadable(path)
        said = "" if what.startswith("a truncated") else f"; torch.load said: {exc}"
        raise CheckpointError(f"{key}={path}: {what}{said}") from None


def _unloadable(path: Path) -> str:
    """What a file that ``torch.load`` refused is, judged from its first (and for a zip, last) bytes."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(_HEAD_BYTES)
        f.seek(max(0, size - _ZIP_TAIL_BYTES))
        tail = f.read()
    if not head:
        return "an empty file (0 bytes), not a checkpoint"
    if head.startswith(_ZIP_MAGIC) and _ZIP_END not in tail:
        return (
            f"a truncated checkpoint: a zip archive of {size} bytes without its end record (the save "
            "or the copy was interrupted; resume or test from another checkpoint of the run)"
        )
    if head.startswith(_ZIP_MAGIC):
        return f"a corrupt zip archive ({size} bytes; checkpoints are zip archives)"
    # Binary data shows control bytes within a few hundred bytes; "ignore" copes with a cut UTF-8 tail.
    text = head.decode("utf-8", errors="ignore")
    if text and all(c.isprintable() or c.isspace() for c in text):
        return f"a text file, not a PyTorch checkpoint (it starts with {text[:40]!r})"
    return f"not a PyTorch checkpoint (it starts with the bytes {head[:16]!r})"


def _not_a_run_checkpoint(checkpoint: object) -> str | None:
    """None for a checkpoint with weights and run config; else what the loaded object is instead."""
    import torch

    if not isinstance(checkpoint, dict):
        return f"a pickled {type(checkpoint).__name__}, not a checkpoint dict"
    if "state_dict" in checkpoint and "ocr_config" in checkpoint:
        return None
    if checkpoint and all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        return (
            f"a bare state dict ({len(checkpoint)} tensors) without the run config the network is "
            "rebuilt from"
        )
    if "state_dict" in checkpoint:
        return "a checkpoint without the run config ('ocr_config'; not saved by this project's training)"
    return f"a dict without 'state_dict' and 'ocr_config' (keys: {sorted(map(str, checkpoint))[:10]})"
