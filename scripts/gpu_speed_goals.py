"""The two GPU speed goals, measured in one command: predict at batch 16 and long side 1024 (>= 300 img/s)
and a validation of 50 images (<= 1 s), on an H100/H200.

    python3 scripts/gpu_speed_goals.py --data-root /path/to/sroie-compact [--ckpt best.ckpt] \
        --json outputs/gpu_speed_goals.json
    uv run python scripts/gpu_speed_goals.py --device cpu --data-root ../shared/datasets/sroie-compact \
        --batch 2 --long-side 128 --images 4 --val-images 4 --passes 1          # a dry run on the CPU

Predict is scripts/benchmark_predict.py's PyTorch row; validation is runners/test.py's module and trainer
on ``split=val``, timed ``--passes`` times after a warm-up. Without ``--ckpt``: a random r18-FPN.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # plain python3: the project's package without an install

PREDICT_GOAL = 300.0  # img/s at batch 16, long side 1024
VALIDATION_GOAL = 1.0  # s for 50 images


def validation_seconds(args: argparse.Namespace, ckpt: Path, work: Path) -> list[float]:
    """Seconds of each timed ``trainer.validate`` over the first ``--val-images`` val images."""
    from hydra.utils import instantiate

    from ocr.lightning_modules.restore import checkpoint_settings, restore_for_inference
    from ocr.run.config import compose_config

    overrides = [
        *(f"ckpt={ckpt}", "split=val", "hardware=cpu" if args.device == "cpu" else "hardware=auto"),
        *("data=receipts", f"data.root={args.data_root}", f"data.eval_transform.long_side={args.long_side}"),
        *(f"data.eval_batch_size={args.batch}", "report.enabled=false"),
        f"trainer.limit_val_batches={-(-args.val_images // args.batch)}",
    ]
    cfg = compose_config("test", overrides, work / "validate")
    module, trainer = restore_for_inference(cfg, checkpoint_settings(cfg, targets=True))
    datamodule = instantiate(cfg.data)
    seconds = []
    for index in range(args.passes + 1):
        start = time.perf_counter()
        trainer.validate(module, datamodule=datamodule, verbose=False)
        if index > 0:
            seconds.append(time.perf_counter() - start)
        print(module.pipeline.times.summary("val", module.pipeline.workers), flush=True)
    return seconds


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-root", type=Path, required=True, help="sroie-compact: images/, jsons/")
    parser.add_argument("--ckpt", type=Path, help="checkpoint; default: random r18-FPN")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--long-side", type=int, default=1024)
    parser.add_argument("--images", type=int, default=100, help="test images predicted per pass")
    parser.add_argument("--val-images", type=int, default=50)
    parser.add_argument("--passes", type=int, default=3, help="timed passes after one warm-up")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from scripts import benchmark_predict as bench

    with tempfile.TemporaryDirectory(prefix="gpu_speed_goals_") as tmp:
        work = Path(tmp)
        hardware = "hardware=cpu" if args.device == "cpu" else "hardware=auto"
        ckpt = args.ckpt or bench.random_checkpoint(work / "random.ckpt", [hardware])
        predict_json = work / "predict.json"
        options = {"device": args.device, "ckpt": ckpt, "backends": "torch", "json": predict_json}
        options |= {"images": args.data_root / "images" / "test", "num-images": args.images}
        options |= {"long-side": args.long_side, "batches": args.batch, "passes": args.passes}
        bench.main([arg for key, value in options.items() for arg in (f"--{key}", str(value))])
        (row,) = json.loads(predict_json.read_text())["rows"]
        seconds = validation_seconds(args, ckpt, work)
    rate, val = statistics.median(row["img_per_s"]), statistics.median(seconds)
    predict = {"batch": args.batch, "long_side": args.long_side, "images": row["images"]}
    predict |= {"img_per_s": row["img_per_s"], "network_share": row["network_share"]}
    result = {
        "device": args.device,
        "ckpt": str(args.ckpt) if args.ckpt else "random r18-FPN",
        "predict": predict | {"goal": PREDICT_GOAL, "met": rate >= PREDICT_GOAL},
        "validation": {"images": args.val_images, "seconds": seconds, "goal": VALIDATION_GOAL},
    }
    result["validation"]["met"] = val <= VALIDATION_GOAL
    print(
        f"predict batch {args.batch}, long side {args.long_side}: median {rate:.1f} img/s "
        f"(goal >= {PREDICT_GOAL:g}: {'met' if result['predict']['met'] else 'missed'})\n"
        f"validation of {args.val_images} images: median {val:.3f} s "
        f"(goal <= {VALIDATION_GOAL:g} s: {'met' if result['validation']['met'] else 'missed'})"
    )
    if args.json is not None:
        from ocr.utils.io import atomic_write_json

        atomic_write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
