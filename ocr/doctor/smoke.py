"""Smoke convolutions for the doctor, in a child process (``python -m ocr.doctor.smoke``): a cuDNN kernel
built for the wrong CPU or GPU can kill the process, so it prints one JSON line when a variant starts and
one when it ends; if the process dies, the last started variant is the culprit."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F

from ocr.machine.hardware import cuda_has_native_bf16

__all__ = ["main", "run_variant", "variants"]

# Convolutions through cuDNN use TF32 by default on Ampere+; compare against fp32 CPU loosely.
REL_TOL = {"fp32": 2e-2, "bf16": 1e-1}


def variants() -> list[tuple[str, str, bool]]:
    """``(device, dtype, cudnn)`` triples to try on this machine."""
    if not torch.cuda.is_available():
        return [("cpu", "fp32", False), ("cpu", "bf16", False)]
    dtypes = ["fp32"] + (["bf16"] if cuda_has_native_bf16() else [])
    return [("cuda", dtype, cudnn) for dtype in dtypes for cudnn in (True, False)]


def _conv_step(x: torch.Tensor, w: torch.Tensor, dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
        y = F.conv2d(
            F.relu(F.conv2d(x, w, padding=1)), w.transpose(0, 1).flip(-1, -2), padding=1
        )  # (2, 3, 64, 64)
    y.float().square().mean().backward()
    if w.grad is None:
        raise RuntimeError("smoke conv: expected a weight gradient after backward, got None")
    return y.detach().float(), w.grad.detach().float()


def run_variant(device: str, dtype: str, cudnn: bool) -> dict[str, Any]:
    """Forward + backward of two small convolutions; compares against fp32 on the CPU."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 64, 64, generator=gen)
    w = torch.randn(16, 3, 3, 3, generator=gen) * 0.2
    ref_y, ref_g = _conv_step(x, w, "fp32")
    torch.backends.cudnn.enabled = cudnn
    start = time.perf_counter()
    y, g = _conv_step(x.to(device), w.to(device), dtype)
    if device == "cuda":
        torch.cuda.synchronize()
    elapsed_ms = (time.perf_counter() - start) * 1e3
    y, g = y.cpu(), g.cpu()
    finite = bool(torch.isfinite(y).all() and torch.isfinite(g).all())
    err = max(
        float((y - ref_y).abs().max() / ref_y.abs().max()), float((g - ref_g).abs().max() / ref_g.abs().max())
    )
    return {
        "finite": finite,
        "rel_err": err,
        "ok": finite and err <= REL_TOL[dtype],
        "ms": round(elapsed_ms, 2),
    }


def main() -> int:
    """Run every variant, one JSON line per start and per result; exit 1 if any variant is wrong."""
    all_ok = True
    for device, dtype, cudnn in variants():
        name = f"{device} {dtype} cudnn={'on' if cudnn else 'off'}"
        sys.stdout.write(json.dumps({"variant": name, "started": True}) + "\n")
        sys.stdout.flush()
        try:
            result = run_variant(device, dtype, cudnn)
        except Exception as exc:
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        all_ok &= bool(result["ok"])
        sys.stdout.write(json.dumps({"variant": name, **result}) + "\n")
        sys.stdout.flush()
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
