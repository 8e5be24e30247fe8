"""Largest training batch size that fits: ``python -m ocr.debug.oom_probe [options] [overrides...]``.

Runs full training steps of the configured model and loss (Hydra overrides as for ``runners/train.py``;
the run's precision, channels_last, cudnn.benchmark and compile flags) on random batches of the crop
size, doubling the batch until CUDA runs out of memory, then bisecting. Other CUDA errors of very large
batches count as "does not fit"; one that leaves the context unusable stops the search with what was
found. On the CPU it only checks that the step runs, up to ``--max``.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ContextLostError", "failure_reason", "find_largest_batch", "main", "random_batch"]

HEADROOM = 0.85  # validation, fragmentation and other processes need some memory too


def random_batch(batch_size: int, size: int, device: str) -> dict[str, Any]:
    """A batch with the training tensors' shapes and value ranges (see ``ocr.types.Batch``)."""
    import torch

    shape = (batch_size, 1, size, size)
    return {
        "images": torch.randn(batch_size, 3, size, size, device=device),
        "prob_map": (torch.rand(shape, device=device) > 0.9).float(),
        "prob_mask": torch.ones(shape, device=device),
        "thresh_map": 0.3 + 0.4 * torch.rand(shape, device=device),
        "thresh_mask": (torch.rand(shape, device=device) > 0.8).float(),
        "image_id": [f"probe_{i}" for i in range(batch_size)],
    }


class ContextLostError(RuntimeError):
    """A failed probe left the CUDA context unusable; ``fitted`` holds the sizes that trained."""

    def __init__(self, batch_size: int, reason: str, fitted: list[int]) -> None:
        self.batch_size = batch_size
        self.fitted = fitted
        super().__init__(f"batch {batch_size}: {reason}; the CUDA context is unusable afterwards")


def failure_reason(exc: BaseException, device: str) -> str | None:
    """Why a probe step failed when that means "does not fit" (OOM, or any CUDA error); else None."""
    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return "out of memory"
    if device == "cuda" and isinstance(exc, RuntimeError):
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return None


def _context_usable() -> bool:
    import torch

    try:
        torch.cuda.synchronize()
        return bool(torch.ones(1, device="cuda").sum().item() == 1)
    except Exception:
        return False


def find_largest_batch(fits: Callable[[int], bool], low: int, high: int) -> tuple[int | None, int | None]:
    """Largest ``b`` in ``[low, high]`` with ``fits(b)`` (assumed monotone), and the smallest that failed."""
    ok, bad, size = None, None, low
    while size <= high:
        if not fits(size):
            bad = size
            break
        ok, size = size, size * 2
    if ok is None or bad is None:
        return ok, bad
    while bad - ok > 1:
        middle = (ok + bad) // 2
        ok, bad = (middle, bad) if fits(middle) else (ok, middle)
    return ok, bad


def _make_step(cfg: Any, device: str, size: int) -> Callable[[int], bool]:
    import torch
    from hydra.utils import instantiate

    from ocr.debug.run_flags import run_flags
    from ocr.lightning_modules.build import build_net_and_loss
    from ocr.machine.hardware import autocast_dtype

    # Weights do not change memory: no hub download or weights file for a probe.
    net, loss_fn = build_net_and_loss(cfg, weights_free=True)
    net, loss_fn = net.to(device).train(), loss_fn.to(device)
    flags = run_flags(cfg)  # memory format, cuDNN workspace and compiled graphs change the peak
    forward = flags.apply(net, device)
    optimizer = instantiate(cfg.optimizer)(params=net.parameters())  # same optimizer state as training
    dtype = autocast_dtype(str(cfg.trainer.precision))
    use_autocast = device == "cuda" and dtype is not None
    fitted: list[int] = []
    sys.stdout.write(f"mirroring the run's {flags.describe()}\n")

    def fits(batch_size: int) -> bool:
        reason = None
        batch: dict[str, Any] | None  # dropped after the step, so that its memory can be freed
        try:
            batch = random_batch(batch_size, size, device)
            batch["images"] = flags.images(batch["images"])
            with torch.autocast(device, dtype=dtype or torch.float32, enabled=use_autocast):
                output = forward(batch["images"])
            loss_fn(output, batch)["loss"].backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if device == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:
            reason = failure_reason(exc, device)
            if reason is None:
                raise
        batch = output = None
        if reason is not None and device == "cuda" and not _context_usable():
            raise ContextLostError(batch_size, reason, fitted)
        optimizer.zero_grad(set_to_none=True)
        gc.collect()
        if device == "cuda":
            peak = torch.cuda.max_memory_allocated() / 2**30
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        if reason is None:
            fitted.append(batch_size)
        sys.stdout.write(
            f"batch {batch_size:4d}: {'fits' if reason is None else 'DOES NOT FIT (' + reason + ')'}"
            + (f" (peak {peak:.2f} GiB)" if device == "cuda" else "")
            + "\n"
        )
        sys.stdout.flush()
        return reason is None

    return fits


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: 0 when some batch size fits, 1 when not even ``--min`` does."""
    parser = argparse.ArgumentParser(
        prog="python -m ocr.debug.oom_probe",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--min", type=int, default=1, dest="low")
    parser.add_argument("--max", type=int, default=512, dest="high")
    parser.add_argument(
        "--image-size", type=int, help="square input side (default: data.train_transform.crop_size)"
    )
    parser.add_argument("--out", type=Path, default=Path("outputs/debug"), help="folder for oom_probe.json")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model=dbnet_resnet50_fpn")
    args = parser.parse_args(argv)
    import torch
    from omegaconf import OmegaConf

    from ocr.run.config import compose_config
    from ocr.utils.io import atomic_write_json

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.stderr.write("oom-probe: no CUDA GPU visible; use --device cpu to only check that a step runs\n")
        return 2
    cfg = compose_config("train", args.overrides)
    size = args.image_size or int(OmegaConf.select(cfg, "data.train_transform.crop_size", default=640))
    sys.stdout.write(
        f"model {cfg.model.encoder.name if 'encoder' in cfg.model else cfg.model._target_}, "
        f"input {size}x{size}, precision {cfg.trainer.precision}, device {args.device}\n"
    )
    try:
        ok, bad = find_largest_batch(_make_step(cfg, args.device, size), args.low, args.high)
        stopped = None
    except ContextLostError as exc:
        ok, bad, stopped = max(exc.fitted, default=None), exc.batch_size, str(exc)
        sys.stdout.write(f"search stopped: {stopped}; rerun with --max {exc.batch_size - 1} to refine\n")
    suggestion = max(1, int(ok * HEADROOM)) if ok else None
    report = {
        "device": args.device,
        "image_size": size,
        "precision": str(cfg.trainer.precision),
        "overrides": args.overrides,
        "largest_fitting_batch": ok,
        "first_failing_batch": bad,
        "searched": [args.low, args.high],
        "suggested_batch_size": suggestion,
        "search_stopped": stopped,
    }
    path = atomic_write_json(args.out / "oom_probe.json", report)
    if ok is None:
        sys.stdout.write(
            f"not even batch {args.low} fits: try a smaller --image-size or model\nreport: {path}\n"
        )
        return 1
    sys.stdout.write(
        f"largest batch that trains: {ok}{'' if bad else ' (search limit reached)'}; suggested "
        f"data.batch_size={suggestion} (about {HEADROOM:.0%} of it, for headroom)\nreport: {path}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
