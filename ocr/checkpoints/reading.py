"""Read a checkpoint file written by training, and say what a file that is not one is instead.

Test, predict, export, resume and ``model.init_from`` read through :func:`load_checkpoint`; nothing here
builds a module (``ocr.lightning_modules.restore`` does). Every load is weights-only: a file that holds
other pickled objects than tensors and :func:`allow_checkpoint_types`'s is refused, never unpickled
(unpickling an object can run any code its author chose).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ocr.utils.errors import CheckpointError, InputNotFoundError

__all__ = ["allow_checkpoint_types", "load_checkpoint", "load_checkpoint_file"]

# torch.save writes zip archives (since torch 1.6); how far into a refused file to look. A zip ends with
# its end-of-central-directory record (22 bytes plus a comment of at most 64 KiB): a cut file lacks it.
_ZIP_MAGIC = b"PK\x03\x04"
_ZIP_END = b"PK\x05\x06"
_ZIP_TAIL_BYTES = 22 + 2**16
_HEAD_BYTES = 256
_PICKLE_PROTOCOL_2_PLUS = b"\x80"  # what a pickle.dump of protocol 2 or later starts with
# The numpy dtypes a checkpoint or crash bundle holds arrays of (Lightning's numpy RNG state is uint32).
_NUMPY_DTYPES = ("bool", "uint8", "uint32", "int32", "int64", "float32", "float64")


@functools.cache
def allow_checkpoint_types() -> None:
    """Let ``torch.load(weights_only=True)`` (ours and Lightning's) build the numpy arrays (RNG state,
    polygons) and ``ocr.types`` records that checkpoints and crash bundles hold besides tensors."""
    import numpy as np
    import torch
    from numpy._core.multiarray import _reconstruct

    from ocr import types

    torch.serialization.add_safe_globals(
        [
            _reconstruct,
            np.ndarray,
            np.dtype,
            *(type(np.dtype(name)) for name in _NUMPY_DTYPES),
            types.Geometry,
            types.TargetParams,
            types.BatchCoding,
            types.CropWarp,
            types.RegionWarps,
            types.TargetPolygons,
        ]
    )


def load_checkpoint(path: str | Path, key: str = "ckpt") -> dict[str, Any]:
    """Load a checkpoint written by ``runners/train.py`` on the CPU; errors name the path as the value of
    the config ``key`` (CheckpointError also for an object without the weights and run config)."""
    checkpoint = load_checkpoint_file(path, key)
    problem = _not_a_run_checkpoint(checkpoint)
    if problem:
        raise CheckpointError(
            f"{key}={path}: expected a checkpoint written by runners/train.py, got {problem}"
        )
    return checkpoint


def load_checkpoint_file(path: str | Path, key: str = "ckpt", *, mmap: bool = False) -> Any:
    """``torch.load(weights_only=True)`` of ``path`` on the CPU. InputNotFoundError: not a file;
    CheckpointError: what the file is instead (empty, truncated, text, a bare pickle, unsafe types)."""
    path = Path(path)
    if not path.is_file():
        what = "a directory" if path.is_dir() else "no such file"
        raise InputNotFoundError(
            f"{key}={path}: expected a checkpoint file, got {what} "
            f"(pass {key}=<run dir>/checkpoints/<name>.ckpt)"
        )
    with path.open("rb") as f:
        head = f.read(len(_ZIP_MAGIC))
    if head != _ZIP_MAGIC:  # torch.save writes zip archives; any other file is never unpickled
        raise CheckpointError(f"{key}={path}: {_unloadable(path)}")
    import pickle

    import torch  # imported once a file is read: the runners import this module before they need torch

    allow_checkpoint_types()
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError:
        try:  # the pickled globals a weights-only load refuses, read from the opcodes without running any
            unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except Exception:  # a zip without a readable data.pkl: _unloadable says what it is
            unsafe = []
        if not unsafe:
            raise CheckpointError(f"{key}={path}: {_unloadable(path)}") from None
        raise CheckpointError(
            f"{key}={path}: refused, not loaded: it holds pickled objects of types that no checkpoint of "
            f"this project holds ({', '.join(sorted(unsafe)[:5])}), and unpickling them could run code"
        ) from None
    except Exception as exc:  # a broken archive raises anything from EOFError to RuntimeError
        what = _unloadable(path)
        said = "" if what.startswith("a truncated") else f"; torch.load said: {str(exc).splitlines()[0]}"
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
    if head.startswith(_PICKLE_PROTOCOL_2_PLUS):
        return (
            f"a bare pickle ({size} bytes), not a checkpoint (torch.save writes zip archives); not "
            "loaded: unpickling it could run code"
        )
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
