"""What a CUDA fault is, and what we tell the user about it: the one recogniser and the explanation text.

A CUDA fault (device-side assert, illegal address, launch failure, ECC, cuDNN/cuBLAS execution failure,
NCCL failure) leaves the CUDA context dead: every later CUDA call fails or blocks. This module only
recognises and explains; ``ocr.utils.fault_exit`` ends the process. Standard library only: torch's error
types are recognised by name, so the runners can call it before torch is imported.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ASYNC_KINDS",
    "CudaFault",
    "FaultSite",
    "exception_chain",
    "explanation",
    "find_cuda_fault",
    "headline",
    "is_cuda_fault",
    "next_commands",
]

# (kind, message markers), first match wins; a message matching none of them is still a CUDA fault when
# its type is one of CUDA_ERROR_TYPES.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("device-side assert", ("device-side assert",)),
    ("illegal memory access", ("illegal memory access", "illegal address", "misaligned address")),
    ("illegal instruction", ("illegal instruction",)),
    ("kernel launch failure", ("unspecified launch failure", "launch failure", "launch timed out")),
    ("ECC error", ("ECC error",)),
    ("cuDNN failure", ("CUDNN_STATUS", "cuDNN error")),
    ("cuBLAS failure", ("CUBLAS_STATUS", "cuBLAS error")),
    ("NCCL failure", ("NCCL",)),
    ("CUDA error", ("CUDA error", "CUDA_ERROR", "CUDA driver error")),
)
# torch.AcceleratorError (torch >= 2.8 raises it for CUDA errors), torch.cuda.CudaError.
CUDA_ERROR_TYPES = frozenset({"AcceleratorError", "CudaError"})
NOT_A_FAULT_TYPES = frozenset({"OutOfMemoryError"})  # an OOM leaves the context usable
# Kernel faults CUDA reports at a later call, unless CUDA_LAUNCH_BLOCKING=1.
ASYNC_KINDS = frozenset(
    {
        "device-side assert",
        "illegal memory access",
        "illegal instruction",
        "kernel launch failure",
        "ECC error",
    }
)
DOCS = "docs/troubleshooting/CUDA_DEBUGGING.md, 'When a run hits a CUDA fault'"


@dataclass(frozen=True)
class CudaFault:
    """The first CUDA error of an exception chain, its kind and whether CUDA reported it asynchronously."""

    exception: BaseException
    kind: str
    asynchronous: bool

    @property
    def summary(self) -> str:
        """``<type>: <first line of the message>``."""
        kind = type(self.exception)
        lines = str(self.exception).strip().splitlines()
        return f"{kind.__module__}.{kind.__qualname__}: {lines[0] if lines else ''}".removeprefix("builtins.")


@dataclass(frozen=True)
class FaultSite:
    """Where the fault was seen: host-side facts only (nothing may be read from the device any more)."""

    stage: str | None  # train, validate, sanity_check, test, predict; None outside the Lightning loops
    global_step: int | None
    epoch: int | None
    batch_idx: int | None
    rank: int
    world_size: int
    image_ids: tuple[str, ...]

    def describe(self) -> str:
        """``training, global step 3, epoch 0, batch 3, rank 0`` (what is known)."""
        if self.stage is None:
            return "outside the training/evaluation loops" + (
                f", rank {self.rank}" if self.world_size > 1 else ""
            )
        parts = [STAGE_NAMES.get(self.stage, self.stage)]
        parts += [f"global step {self.global_step}"] if self.global_step is not None else []
        parts += [f"epoch {self.epoch}"] if self.epoch is not None else []
        parts += [f"batch {self.batch_idx}"] if self.batch_idx is not None else []
        parts += [f"rank {self.rank} of {self.world_size}"] if self.world_size > 1 else []
        return ", ".join(parts)


STAGE_NAMES = {
    "train": "training",
    "sanity_check": "the sanity validation before training",
    "validate": "validation",
    "test": "test",
    "predict": "prediction",
}


def exception_chain(exception: BaseException) -> Iterator[BaseException]:
    """``exception``, then what it was raised from or during, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = exception
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _kind(exception: BaseException) -> str | None:
    names = {cls.__name__ for cls in type(exception).__mro__}
    if names & NOT_A_FAULT_TYPES:
        return None
    text = f"{type(exception).__name__}: {exception}"
    for kind, markers in KINDS:
        if any(marker in text for marker in markers):
            return kind
    return "CUDA error" if names & CUDA_ERROR_TYPES else None


def find_cuda_fault(exception: BaseException) -> CudaFault | None:
    """The first (innermost) CUDA error of ``exception``'s chain, or None when there is none.

    A teardown that fails on the dead context raises a second CUDA error whose ``__context__`` is the
    first: the first is the one that says what went wrong.
    """
    faults = [(error, kind) for error in exception_chain(exception) if (kind := _kind(error)) is not None]
    if not faults:
        return None
    error, kind = faults[-1]
    blocking = os.environ.get("CUDA_LAUNCH_BLOCKING") == "1"
    return CudaFault(exception=error, kind=kind, asynchronous=kind in ASYNC_KINDS and not blocking)


def is_cuda_fault(exception: BaseException) -> bool:
    """Whether ``exception`` (or one it was raised during) is a CUDA fault; an OOM is not one."""
    return find_cuda_fault(exception) is not None


def headline(fault: CudaFault, site: FaultSite, exit_code: int) -> str:
    """The first line we print: what faulted and where, and that the process ends now."""
    return (
        f"CUDA FAULT ({fault.kind}) in {site.describe()}: {fault.summary}. The CUDA context is dead: the "
        f"process ends with exit code {exit_code} without another CUDA call, after writing its report "
        "(host-side data only); the explanation follows at the end."
    )


def next_commands(trainer_fn: str | None, crash: Path | None, argv: Sequence[str]) -> list[str]:
    """What to run next: replay of the saved batch, then the run again with CUDA_LAUNCH_BLOCKING=1 (and
    memcheck for a training run).

    Args:
        trainer_fn: what the trainer was doing (``fit``, ``validate``, ``test``, ``predict``; None
            outside it).
        crash: the crash bundle folder (None: no bundle, nothing to replay).
        argv: the runner's command line (``sys.argv``); a training run's Hydra overrides, without
            ``hydra.*``, are passed on to ``scripts/debug_cuda.sh``.
    """
    commands = []
    # A predict batch has no targets: replay runs forward + loss + backward.
    if crash is not None and trainer_fn != "predict":
        commands.append(f"scripts/debug_cuda.sh replay {shlex.quote(str(crash))} --device cuda --blocking")
    if trainer_fn == "fit":  # debug_cuda.sh's short runs train with runners/train.py
        overrides = shlex.join(arg for arg in argv[1:] if not arg.startswith(("hydra.", "hydra/")))
        commands.append(f"scripts/debug_cuda.sh blocking {overrides}".rstrip())
        commands.append(f"scripts/debug_cuda.sh sanitizer memcheck {overrides}".rstrip())
    else:
        script = shlex.join(argv) if argv else "<the same command>"
        commands.append(f"CUDA_LAUNCH_BLOCKING=1 TORCH_USE_CUDA_DSA=1 python {script}")
    return commands


def explanation(
    fault: CudaFault,
    site: FaultSite,
    *,
    failure: Path,
    crash: Path | None,
    commands: Sequence[str],
    exit_code: int,
) -> str:
    """The block we print last: what faulted, where, which images, what to run next, the exit code."""
    ids = ", ".join(site.image_ids[:16]) + (" ..." if len(site.image_ids) > 16 else "")
    if fault.asynchronous:
        timing = (
            "CUDA reports a failed kernel at a later call that waits for the GPU, so the traceback above "
            "shows where the error was noticed, which can be after (and unrelated to) the operation that "
            "failed, and the batch in flight may not be the one whose kernel failed. With "
            "CUDA_LAUNCH_BLOCKING=1 every launch waits for its kernel and the traceback points at the "
            "failing operation (slow: for debugging only); the commands below set it."
        )
    else:
        timing = "The traceback above is where the failing call was made" + (
            " (CUDA_LAUNCH_BLOCKING=1 was set)." if os.environ.get("CUDA_LAUNCH_BLOCKING") == "1" else "."
        )
    lines = [
        f"CUDA FAULT: {fault.kind}, {fault.summary}",
        f"  where:   {site.describe()}",
        f"  images:  {ids or '(no batch on the host)'}",
        f"  timing:  {timing}",
        f"  report:  {failure}" + (f" and the crash bundle {crash}" if crash is not None else ""),
        "  next:    " + "\n           ".join(commands),
        f"  exit:    code {exit_code}, without Lightning's teardown or any other CUDA call ({DOCS})",
    ]
    return "\n".join(lines)
