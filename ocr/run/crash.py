"""Crash bundle: on any exception, write what is needed to understand and replay the failure.

``<run dir>/crash/`` gets ``batch.pt`` (the last batch as it was on the CPU: compact tensors and their
``BatchCoding``, see ``ocr.data.coding``), ``config.yaml``, ``environment.json``, ``traceback.txt``,
``state.json`` (step, epoch, exception, last good checkpoint) and ``rng.pt``; after an OOM ``memory.txt``
and a suggestion; after a CUDA fault the guard's ``fault.json``; after a divergence ``weights.pt``. Nothing
is copied back from the GPU, and after a CUDA fault the device is not queried at all. Each rank writes its
own folder (:func:`crash_dir`).
"""

from __future__ import annotations

import io
import logging
import traceback
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.seed import _collect_rng_states
from omegaconf import OmegaConf

from ocr.machine.distributed import rank_tag
from ocr.machine.environment import collect_environment
from ocr.models.loss.checks import LOGIT_NAMES, LossInputError, device_message
from ocr.run.faults import is_cuda_fault
from ocr.utils.errors import NonFiniteLossError
from ocr.utils.io import atomic_write_bytes, atomic_write_json, atomic_write_text

__all__ = [
    "WEIGHTS_FILE",
    "crash_dir",
    "failed_cpu_batch",
    "last_checkpoint_path",
    "save_divergence_weights",
    "write_crash_bundle",
]

log = logging.getLogger(__name__)

WEIGHTS_FILE = "weights.pt"


def crash_dir(run_dir: Path, rank: int, node_rank: int) -> Path:
    """``<run dir>/crash`` on global rank 0, ``<run dir>/crash-node<n>-rank<k>`` on the others: a fault on
    GPU 1 must not depend on rank 0 to be recorded, and ranks sharing the folder must not overwrite."""
    tag = rank_tag(rank, node_rank)
    return run_dir / (f"crash-{tag}" if tag else "crash")


def last_checkpoint_path(trainer: L.Trainer) -> str | None:
    """The most recent checkpoint saved by the trainer's checkpoint callback (last, else best)."""
    callback = trainer.checkpoint_callback
    for attr in ("last_model_path", "best_model_path"):
        path = getattr(callback, attr, "") if callback is not None else ""
        if path and Path(path).exists():
            return str(path)
    return None


def _rng_states(query_cuda: bool) -> dict[str, Any]:
    # CUDA only when initialised and not after a CUDA fault (reading it would fail or block).
    states = _collect_rng_states(include_cuda=False)
    try:
        if query_cuda and torch.cuda.is_available() and torch.cuda.is_initialized():
            states["cuda"] = torch.cuda.get_rng_state_all()
    except Exception as exc:
        states["cuda_error"] = f"{type(exc).__name__}: {exc}"
    return states


def _batch_shapes(batch: Any) -> dict[str, list[int]]:
    if not isinstance(batch, dict):
        return {}
    return {key: list(value.shape) for key, value in batch.items() if isinstance(value, torch.Tensor)}


def _torch_save_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _memory_report(batch: Any) -> tuple[dict[str, Any], str]:
    """Allocator figures and a suggestion after an OOM (the allocator state is still readable then)."""
    figures: dict[str, Any] = {"batch_shapes": _batch_shapes(batch)}
    summary = ""
    try:
        figures.update(
            {
                "allocated_gib": torch.cuda.memory_allocated() / 2**30,
                "reserved_gib": torch.cuda.memory_reserved() / 2**30,
                "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
                "total_gib": torch.cuda.get_device_properties(0).total_memory / 2**30,
            }
        )
        summary = torch.cuda.memory_summary()
    except Exception as exc:
        figures["error"] = f"{type(exc).__name__}: {exc}"
    images = figures["batch_shapes"].get("images")
    batch_size = images[0] if images else None
    smaller = max(1, batch_size // 2) if batch_size else None
    figures["suggestion"] = (
        f"Out of memory with batch shape {images}: try data.batch_size={smaller}"
        f"{' (half of ' + str(batch_size) + ')' if batch_size else ''}, or find the largest batch that fits "
        "with `scripts/debug_cuda.sh oom-probe`; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "reduces fragmentation when reserved >> allocated."
    )
    return figures, summary


def failed_cpu_batch(trainer: L.Trainer, exception: BaseException) -> Any:
    """The batch a crash bundle saves: the one a ``NonFiniteLossError`` carries (its first bad step), else
    the last batch the datamodule moved to the device, as it was on the CPU (None: no such batch)."""
    batch = getattr(exception, "cpu_batch", None)
    if batch is None:
        batch = getattr(trainer.datamodule, "last_cpu_batch", None)  # type: ignore[attr-defined]
    return batch


def write_crash_bundle(
    run_dir: Path,
    trainer: L.Trainer,
    pl_module: L.LightningModule,
    exception: BaseException,
    environment: dict[str, Any] | None,
    *,
    batch: Any,
    batch_idx: int | None,
) -> Path:
    """Write the rank's crash folder for ``exception`` and return it; ``environment``: a report taken before
    the fault (None: collect one now), ``batch``: the CPU batch for ``batch.pt``, at ``batch_idx``."""
    crash = crash_dir(run_dir, trainer.global_rank, trainer.node_rank)
    cuda_fault = is_cuda_fault(exception)
    oom = isinstance(exception, torch.cuda.OutOfMemoryError)
    state: dict[str, Any] = {
        "exception_type": f"{type(exception).__module__}.{type(exception).__name__}",
        "exception_message": str(exception),
        "cuda_fault": cuda_fault,
        "out_of_memory": oom,
        "stage": str(trainer.state.stage.value) if trainer.state.stage else None,
        "global_step": trainer.global_step,
        "epoch": trainer.current_epoch,
        "batch_idx": batch_idx,
        "first_bad_step": getattr(exception, "step", None),
        "detected_at_step": getattr(exception, "checked_at", None),
        "last_checkpoint": last_checkpoint_path(trainer),
        "batch_file": "batch.pt" if batch is not None else None,
        "batch_shapes": _batch_shapes(batch),
        "image_ids": [str(i) for i in batch.get("image_id") or []] if isinstance(batch, dict) else [],
    }
    trace = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    atomic_write_text(crash / "traceback.txt", trace)
    if batch is not None:
        atomic_write_bytes(crash / "batch.pt", _torch_save_bytes(batch))
    saved, config = run_dir / "config.yaml", getattr(pl_module, "run_config", None)
    if saved.exists():
        atomic_write_text(crash / "config.yaml", saved.read_text())
    elif config:
        atomic_write_text(crash / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(config)))
    env = dict(environment) if environment is not None else collect_environment(query_cuda=not cuda_fault)
    atomic_write_json(crash / "environment.json", env)
    atomic_write_bytes(crash / "rng.pt", _torch_save_bytes(_rng_states(query_cuda=not cuda_fault)))
    if oom:
        figures, summary = _memory_report(batch)
        state["memory"] = figures
        atomic_write_text(crash / "memory.txt", summary or "memory_summary unavailable\n")
        log.error(figures["suggestion"])
    state["weights_file"] = save_divergence_weights(crash, pl_module, exception)
    atomic_write_json(crash / "state.json", state)
    return crash


def save_divergence_weights(
    crash: Path, pl_module: L.LightningModule, exception: BaseException
) -> str | None:
    """After a divergence (a non-finite loss or logits), write the network's weights as they are now to
    ``crash/weights.pt`` and return its name, else None (replay needs them: earlier weights run clean)."""
    divergence = isinstance(exception, NonFiniteLossError) or (
        isinstance(exception, LossInputError)
        and any(device_message(n) in str(exception) for n in LOGIT_NAMES)
    )
    net = getattr(pl_module, "net", None)
    if not divergence or not isinstance(net, torch.nn.Module):
        return None
    weights = {key: value.detach().cpu().clone() for key, value in net.state_dict().items()}
    atomic_write_bytes(crash / WEIGHTS_FILE, _torch_save_bytes(weights))
    return WEIGHTS_FILE
