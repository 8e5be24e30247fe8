"""Replay a crash bundle: ``python -m ocr.debug.replay <bundle dir> [--device cpu|cuda] [--blocking]
[--sanitizer TOOL]``.

Rebuilds the network and loss from the bundle's ``config.yaml``, runs forward + loss + backward on the
saved CPU batch and says whether the failure reproduces, and from which weights (``--weights``; by
default the first there is of: the weights the bundle kept at a non-finite loss, the last good
checkpoint it names, fresh ones from the config's seed). A fault injected by config
(``debug=inject``) at the bundle's step is applied again, as the run did.

Exit status (``git bisect run`` compatible): 0 = the step ran clean (not reproduced), 1 = the failure
reproduced (exception, or non-finite loss/gradients), 2 = the bundle could not be replayed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ocr.utils.errors import CheckpointError

__all__ = ["Bundle", "ReplayResult", "find_bundle", "load_bundle", "main", "replay_step"]

EXIT_CLEAN, EXIT_REPRODUCED, EXIT_UNUSABLE = 0, 1, 2


@dataclass
class Bundle:
    """The parts of a crash bundle replay needs."""

    path: Path
    config: Any  # DictConfig
    state: dict[str, Any]
    batch: dict[str, Any]


@dataclass(frozen=True)
class ReplayResult:
    """``reproduced`` is True for an exception or a non-finite loss/gradient; ``detail`` says which."""

    reproduced: bool
    detail: str


def find_bundle(path: Path) -> Path:
    """``path`` itself when it holds ``state.json``, else ``path/crash`` (FileNotFoundError: neither)."""
    for candidate in (path, path / "crash"):
        if (candidate / "state.json").is_file():
            return candidate
    raise FileNotFoundError(f"no crash bundle (state.json) in {path} or {path / 'crash'}")


def load_bundle(path: Path) -> Bundle:
    """Load config, state and the CPU batch (weights-only: a batch.pt of other types is refused)."""
    from omegaconf import OmegaConf

    from ocr.checkpoints.reading import load_checkpoint_file

    path = find_bundle(path)
    state = json.loads((path / "state.json").read_text())
    if not (path / "config.yaml").is_file() or not (path / "batch.pt").is_file():
        raise FileNotFoundError(
            f"{path}: replay needs config.yaml and batch.pt (the crash happened before a batch?)"
        )
    batch = load_checkpoint_file(path / "batch.pt", "bundle")
    return Bundle(path=path, config=OmegaConf.load(path / "config.yaml"), state=state, batch=batch)


WEIGHT_SOURCES = ("auto", "bundle", "checkpoint", "fresh")


def _weights_source(bundle: Bundle, wanted: str) -> tuple[str, Path | None]:
    """(source, file) of the weights to replay with: ``bundle`` (``weights.pt``, the network at a
    divergence), ``checkpoint`` (the last good one) or ``fresh``; ``auto`` takes the first available
    (FileNotFoundError: the source asked for is not there)."""
    saved = bundle.state.get("weights_file")
    files = {
        "bundle": bundle.path / saved if saved else None,
        "checkpoint": Path(bundle.state["last_checkpoint"]) if bundle.state.get("last_checkpoint") else None,
    }
    for source in ("bundle", "checkpoint") if wanted == "auto" else (wanted,):
        path = files.get(source)
        if source == "fresh" or (path is not None and path.is_file()):
            return source, path
        if wanted != "auto":
            raise FileNotFoundError(
                f"--weights {wanted}: the bundle has no such weights ({path or 'none named'})"
            )
    return "fresh", None


def _build(bundle: Bundle, device: str, wanted: str) -> tuple[Any, Any, str]:
    import torch

    from ocr.checkpoints.init_from import network_weights
    from ocr.checkpoints.reading import load_checkpoint_file
    from ocr.lightning_modules.build import build_net_and_loss

    cfg = bundle.config
    seed = cfg.get("seed")
    if seed is not None:
        torch.manual_seed(int(seed))
    source, path = _weights_source(bundle, wanted)
    net, loss = build_net_and_loss(cfg, weights_free=path is not None)
    if path is None:
        return net.to(device).train(), loss.to(device), f"fresh weights (seed {seed})"
    state = load_checkpoint_file(path, source)
    net.load_state_dict(network_weights(state["state_dict"] if source == "checkpoint" else state))
    if source == "checkpoint":
        described = f"the last checkpoint {path}"
    else:
        bad = sum(not torch.isfinite(t).all() for t in net.state_dict().values() if t.is_floating_point())
        described = (
            f"the weights the run had at the failure (step {bundle.state.get('global_step')}, {path.name}; "
            f"{bad} tensors non-finite)"
        )
    return net.to(device).train(), loss.to(device), described


def _to_device(batch: dict[str, Any], device: str) -> dict[str, Any]:
    """The bundle's CPU batch on ``device``, decoded as the module decodes it when it is compact (bundles
    written before batches were compact, and hand-made ones, hold the decoded float32 tensors)."""
    import torch

    from ocr.data.coding import decode_batch

    moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    if "coding" not in moved:
        return moved
    return decode_batch(moved)  # type: ignore[arg-type,return-value]


def replay_step(bundle: Bundle, device: str, weights: str = "auto") -> ReplayResult:
    """Forward + loss + backward of the bundle's batch on ``device``, from the ``weights`` source
    (:data:`WEIGHT_SOURCES`)."""
    import torch

    from ocr.debug.inject import apply_fault, injection, poison_loss
    from ocr.debug.run_flags import run_flags
    from ocr.machine.hardware import autocast_dtype

    net, loss_fn, source = _build(bundle, device, weights)
    flags = run_flags(bundle.config)
    forward = flags.apply(net, device)
    sys.stdout.write(f"model: {source}; device: {device}; {flags.describe()}\n")
    batch = _to_device(bundle.batch, device)
    batch["images"] = flags.images(batch["images"])
    dtype = autocast_dtype(str(bundle.config.trainer.get("precision", "32-true")))
    use_autocast = device == "cuda" and dtype is not None
    kind, step = injection(bundle.config)  # a fault the config injects at the failed step is applied again
    failed_at = bundle.state.get("first_bad_step")
    fault = kind if step == (bundle.state.get("global_step") if failed_at is None else failed_at) else None
    try:
        if fault is not None:
            sys.stdout.write(f"config injects {fault!r} at the failed step: applying it again\n")
            if fault in ("exception", "bad_index"):
                apply_fault(fault, batch, int(bundle.state["global_step"]))
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=use_autocast):
            output = forward(batch["images"])
        losses = loss_fn(output, batch)
        if fault == "nan_loss":
            losses = poison_loss(losses)
        losses["loss"].backward()
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:
        return ReplayResult(True, f"exception {type(exc).__name__}: {exc}")
    terms = {k: float(v.detach().float().cpu()) for k, v in losses.items()}
    bad_terms = [k for k, v in terms.items() if not torch.isfinite(torch.tensor(v))]
    bad_grads = [
        n for n, p in net.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()
    ]
    if bad_terms or bad_grads:
        return ReplayResult(
            True,
            f"non-finite loss terms {bad_terms}, non-finite grads in {len(bad_grads)} "
            f"tensors (first: {bad_grads[:3]})",
        )
    return ReplayResult(False, f"loss terms finite: {json.dumps(terms)}")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m ocr.debug.replay",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("bundle", type=Path, help="crash bundle folder (<run dir>/crash) or the run dir")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--weights",
        choices=WEIGHT_SOURCES,
        default="auto",
        help="bundle: the network at a non-finite loss; checkpoint: the last good one; fresh: from the seed; "
        "auto (default): the first of these the bundle has",
    )
    parser.add_argument(
        "--blocking",
        action="store_true",
        help="CUDA_LAUNCH_BLOCKING=1 TORCH_USE_CUDA_DSA=1: errors point at the failing kernel",
    )
    parser.add_argument(
        "--sanitizer",
        choices=("memcheck", "racecheck", "initcheck", "synccheck"),
        help="re-run this replay under compute-sanitizer with this tool (implies --device cuda)",
    )
    return parser.parse_args(argv)


def _run_under_sanitizer(args: argparse.Namespace) -> int:
    from ocr.debug.sanitizer import run_sanitizer

    try:
        bundle = find_bundle(args.bundle)
    except FileNotFoundError as exc:
        sys.stderr.write(f"replay: {exc}\n")
        return EXIT_UNUSABLE
    command = [sys.executable, "-m", "ocr.debug.replay", str(bundle), "--device", "cuda"]
    command += ["--blocking"] if args.blocking else []
    command += ["--weights", args.weights]
    report = bundle / f"replay-sanitizer-{args.sanitizer}.txt"
    return run_sanitizer(args.sanitizer, command, report)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status documented in the module docstring."""
    args = _parse(argv)
    if args.sanitizer:
        return _run_under_sanitizer(args)
    if args.blocking:
        # Read when the CUDA context is created, which has not happened yet in this process.
        os.environ.update({"CUDA_LAUNCH_BLOCKING": "1", "TORCH_USE_CUDA_DSA": "1"})
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.stderr.write("replay: --device cuda requested but no CUDA GPU is visible; use --device cpu\n")
        return EXIT_UNUSABLE
    try:
        bundle = load_bundle(args.bundle)
    except (FileNotFoundError, json.JSONDecodeError, CheckpointError) as exc:
        sys.stderr.write(f"replay: {exc}\n")
        return EXIT_UNUSABLE
    state = bundle.state
    sys.stdout.write(
        f"bundle: {bundle.path}\noriginal failure at step {state.get('global_step')}: "
        f"{state.get('exception_type')}: {state.get('exception_message')}\n"
    )
    try:
        result = replay_step(bundle, args.device, args.weights)
    except (FileNotFoundError, CheckpointError) as exc:
        sys.stderr.write(f"replay: {exc}\n")
        return EXIT_UNUSABLE
    verdict = "REPRODUCED" if result.reproduced else "NOT REPRODUCED"
    sys.stdout.write(f"{verdict}: {result.detail}\n")
    if not result.reproduced and state.get("first_bad_step") not in (None, state.get("detected_at_step")):
        sys.stdout.write(
            "hint: the first bad step was earlier than the saved batch; rerun the training with "
            "callbacks.guard.check_every_n_steps=1 to capture it\n"
        )
    return EXIT_REPRODUCED if result.reproduced else EXIT_CLEAN


if __name__ == "__main__":
    sys.exit(main())
