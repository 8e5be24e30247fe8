"""Preflight doctor: ``python -m ocr.doctor [--json] [--out DIR]``.

Prints a verdict table (ok / warn / fail with a one-line fix) and writes ``doctor.json`` and
``doctor.txt`` into ``--out``. Exit status: 0 when nothing failed, 1 when a check failed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from ocr.doctor.distributed import check_distributed
from ocr.machine.checks import (
    CheckResult,
    SquaresDataset,
    Status,
    fast_checks,
    format_table,
    rate_missing_gpu,
    run_checks,
    worst_status,
)
from ocr.machine.distributed import launch_info
from ocr.machine.environment import collect_environment, driver_version
from ocr.utils.io import atomic_write_json, atomic_write_text

__all__ = ["check_dataloader", "check_smoke_conv", "check_wandb_import", "main", "run_doctor"]

SMOKE_TIMEOUT_S = 300.0
WANDB_IMPORT_TIMEOUT_S = 60.0
WANDB_IMPORT_WARN_S = 10.0
DATALOADER_TIMEOUT_S = 60


def check_smoke_conv() -> CheckResult:
    """Conv forward+backward in fp32/bf16, cuDNN on/off, in a child process that may crash safely."""
    root, path = str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "ocr.doctor.smoke"],
            capture_output=True,
            text=True,
            timeout=SMOKE_TIMEOUT_S,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return CheckResult(
            "smoke_conv",
            "fail",
            f"smoke convolutions hung for {SMOKE_TIMEOUT_S:.0f} s",
            "run scripts/debug_cuda.sh blocking and check the driver (nvidia-smi)",
        )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = [line for line in lines if "started" not in line]
    done = {line["variant"] for line in results}
    died_in = [line["variant"] for line in lines if "started" in line and line["variant"] not in done]
    summary = ", ".join(
        f"{r['variant']}: {'ok' if r['ok'] else r.get('error') or 'rel_err ' + str(r.get('rel_err'))}"
        for r in results
    )
    if proc.returncode < 0 or died_in:
        where = died_in[0] if died_in else "start-up"
        return CheckResult(
            "smoke_conv",
            "fail",
            f"process died (exit {proc.returncode}) during {where}; {summary}",
            "illegal instruction => CPU/GPU arch mismatch: see the cpu/gpu rows and CUDA_DEBUGGING.md",
        )
    if proc.returncode != 0 or not results:
        tail = proc.stderr.strip().splitlines()[-1:] if proc.stderr.strip() else []
        return CheckResult(
            "smoke_conv",
            "fail",
            f"{summary or 'no result'} {' '.join(tail)}".strip(),
            "compare cudnn on/off rows: if only cuDNN fails, update the driver/torch or set "
            "torch.backends.cudnn.enabled=False",
        )
    return CheckResult("smoke_conv", "ok", summary)


def check_dataloader(num_workers: int = 2) -> CheckResult:
    """Start DataLoader workers and fetch one batch within a timeout."""
    import torch.utils.data

    start = time.perf_counter()
    loader: torch.utils.data.DataLoader[int] = torch.utils.data.DataLoader(
        SquaresDataset(),  # type: ignore[arg-type]  # any map-style object works; the stub wants a Dataset
        batch_size=4,
        num_workers=num_workers,
        timeout=DATALOADER_TIMEOUT_S,
    )
    try:
        batches = list(loader)
    except Exception as exc:
        return CheckResult(
            "dataloader",
            "fail",
            f"{num_workers} workers: {type(exc).__name__}: {exc}",
            "set data.num_workers=0 to confirm, then check /dev/shm and cv2.setNumThreads(0)",
        )
    elapsed = time.perf_counter() - start
    return CheckResult(
        "dataloader", "ok", f"{num_workers} workers started, {len(batches)} batches in {elapsed:.2f} s"
    )


def check_wandb_import() -> CheckResult:
    """Time ``import wandb`` in a child process (a hung import must not hang the doctor)."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "import wandb"],
            capture_output=True,
            text=True,
            timeout=WANDB_IMPORT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return CheckResult(
            "wandb_import",
            "fail",
            f"import wandb hung > {WANDB_IMPORT_TIMEOUT_S:.0f} s",
            "use logger=csv, or WANDB_MODE=offline; check proxies/network",
        )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        return CheckResult(
            "wandb_import",
            "warn",
            f"wandb not importable: {last}",
            "only needed for logger=wandb (the default logger is csv)",
        )
    status: Status = "warn" if elapsed > WANDB_IMPORT_WARN_S else "ok"
    return CheckResult(
        "wandb_import",
        status,
        f"import wandb took {elapsed:.1f} s (incl. interpreter start)",
        "slow import: use logger=csv or WANDB_MODE=offline" if status == "warn" else "",
    )


def run_doctor(
    output_dir: Path,
    fast: bool = False,
    num_nodes: int | None = None,
    devices: int | None = None,
    data_root: Path | None = None,
) -> list[CheckResult]:
    """Run the fast checks, the launch check (against the planned ``num_nodes``, ``devices`` per node and
    ``data_root`` when given) and, unless ``fast``, the slow ones."""
    launch = functools.partial(check_distributed, num_nodes=num_nodes, devices=devices, data_root=data_root)
    results = rate_missing_gpu(fast_checks(output_dir), driver_version()) + run_checks(
        [("distributed", launch)]
    )
    if not fast:
        results += run_checks(
            [
                ("smoke_conv", check_smoke_conv),
                ("dataloader", check_dataloader),
                ("wandb_import", check_wandb_import),
            ]
        )
    return results


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m ocr.doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("outputs"),
        help="folder for doctor.json/doctor.txt; its disk is the one checked (default: outputs)",
    )
    parser.add_argument(
        "--fast", action="store_true", help="only the checks that run at every training start"
    )
    parser.add_argument(
        "--num-nodes", type=int, help="the run's trainer.num_nodes, checked against the launcher"
    )
    parser.add_argument(
        "--devices",
        type=int,
        help="the run's trainer.devices (per node), checked against the launcher and GPUs",
    )
    parser.add_argument("--data-root", type=Path, help="the run's data.root, which every node must see")
    args = parser.parse_args(argv)
    results = run_doctor(
        args.out, fast=args.fast, num_nodes=args.num_nodes, devices=args.devices, data_root=args.data_root
    )
    report = {
        "verdict": worst_status(results),
        "checks": [r.to_dict() for r in results],
        "environment": collect_environment(),
        "distributed": asdict(launch_info()),  # the parsed fields and the launcher variables seen
    }
    table = format_table(results)
    atomic_write_json(args.out / "doctor.json", report)
    atomic_write_text(args.out / "doctor.txt", table + "\n")
    sys.stdout.write((json.dumps(report, indent=2, default=str) if args.json else table) + "\n")
    if not args.json:
        sys.stdout.write(f"report: {args.out / 'doctor.json'}\n")
    return 1 if report["verdict"] == "fail" else 0
