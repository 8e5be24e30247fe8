"""The device path (``data.render_on=device``) against the worker path, its CPU reference, at full size.

Builds the train split of ``data=receipts`` twice from ``configs/train.yaml`` (worker and device path,
the same augmentation draws from the same seed), collates the same samples into batches, decodes both
with ``ocr.data.coding.decode_batch`` on ``--device`` and compares what the network and the loss read:

- sroie-compact train (real scanned receipts, axis-aligned line boxes, rotated by the augmentation);
- the same with every box corner moved by up to ``--jitter`` px (general quadrilaterals);
- synthetic receipts (``ocr.data.synthetic``, style ``receipt``: dense rows, photographed pages whose
  boxes a homography moved), generated into ``--synthetic-root`` on first use.

    uv run python scripts/compare_device_stage.py                   # 64 samples of each, batch 16
    uv run python scripts/compare_device_stage.py --samples 160 --device cuda

Per set it prints the crop difference in grey levels without and with the photometric augmentation (the
same parameters on both paths; a hue rotation makes a small difference in a near-grey pixel a larger
one), the share of pixels where each {0, 1} map differs, with the largest distance from such a pixel to
the border that map draws (:func:`border_distance`), and the largest threshold map difference (the
worker's maps are uint8-coded: up to 7.8e-4). tests/data/test_device_*.py state the tolerances.

Why a distance to the exact border and not to the worker's pixels: along a thin text line whose sides
meet at a shallow angle (a line cut by the crop's edge), a border moved by half a pixel moves the tip of
the shrunk shape by tens of pixels along the line, all of them next to the border.

Trailing arguments are Hydra overrides of ``configs/train.yaml``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate

from ocr.data.coding import decode_batch
from ocr.data.collate import collate_batch
from ocr.data.synthetic.generate import generate_dataset
from ocr.machine.hardware import register_resolvers
from ocr.types import TargetPolygons

REPO = Path(__file__).resolve().parents[1]
SROIE = REPO.parent / "shared" / "datasets" / "sroie-compact"
MASKS = ("prob_map", "prob_mask", "thresh_mask")


def datasets(root: Path, overrides: Sequence[str]) -> dict[str, Any]:
    """The train dataset of ``data=receipts`` at ``root`` on each path."""
    built = {}
    for render_on in ("worker", "device"):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
            cfg = compose(
                config_name="train",
                overrides=["data=receipts", f"data.root={root}", f"data.render_on={render_on}", *overrides],
            )
        datamodule = instantiate(cfg.data)
        datamodule.setup("fit")
        built[render_on] = datamodule.datasets["train"]
    return built


def jittered(dataset: Any, max_px: float, seed: int) -> None:
    """Move every corner of every polygon of ``dataset`` (in place) by up to ``max_px`` in x and y."""
    rng = np.random.default_rng(seed)
    dataset.entries = [
        dataclasses.replace(
            entry,
            polygons=[(p + rng.uniform(-max_px, max_px, p.shape)).astype(np.float32) for p in entry.polygons],
        )
        for entry in dataset.entries
    ]


def compare(pair: dict[str, Any], samples: int, batch_size: int, seed: int, device: torch.device) -> dict:
    """Differences between the decoded batches of both paths over ``samples`` samples."""
    order = np.resize(np.random.default_rng(seed).permutation(len(pair["worker"])), samples)
    stats: dict[str, list[float]] = defaultdict(list)
    for dataset in pair.values():
        dataset.transform.set_random_seed(seed)
    for start in range(0, samples, batch_size):
        picked = [int(i) for i in order[start : start + batch_size]]
        compact = {side: collate_batch([pair[side][i] for i in picked]) for side in ("worker", "device")}
        worker, device_path = (decode_batch(_moved(compact[s], device)) for s in compact)
        for name, plain in (("grey", False), ("warp", True)):  # with, and without, photometric augmentation
            if plain:
                worker, device_path = (
                    decode_batch(_moved(dict(compact[s], photometric=None), device)) for s in compact
                )
            std = torch.tensor(compact["worker"]["coding"].std, device=device).view(1, 3, 1, 1)
            grey = ((worker["images"] - device_path["images"]) * std * 255).abs()  # back to grey levels
            stats[name].append(float(grey.mean()))
            stats[f"{name}_max"].append(float(grey.max()))
        stats["thresh"].append(float((worker["thresh_map"] - device_path["thresh_map"]).abs().max()))
        stats["pixels"].append(float(worker["prob_map"].numel()))
        polygons = compact["device"]["target_polygons"]
        assert polygons is not None, "the device path's batch carries its polygons"
        for key in MASKS:
            want, got = worker[key].cpu().numpy()[:, 0], device_path[key].cpu().numpy()[:, 0]
            stats[key].append(float((want != got).sum()))
            stats[f"{key}_ones"].append(float(want.sum()))
            differ = want != got
            stats[f"{key}_border"].append(
                max(border_distance(key, differ[i], polygons, i) for i in range(len(differ)))
            )
    return stats


def _moved(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def border_distance(key: str, differ: np.ndarray, polygons: TargetPolygons, index: int) -> float:
    """Largest distance (px) from a pixel where sample ``index``'s ``key`` maps differ (``differ``, (H, W)
    bool) to the border that map draws, measured by OpenCV on the sample's polygons: the inward offset by
    the DB offset ``D`` of the drawn polygons for ``prob_map``, the masked polygons for ``prob_mask``, the
    outward offset by ``D`` of the drawn polygons for ``thresh_mask``. 0 where the maps agree.

    The fills (``prob_map``, ``prob_mask``) use the truncated coordinates, as both paths do.
    """
    ys, xs = np.nonzero(differ)
    if not len(xs):
        return 0.0
    role, side = {"prob_map": (1, 1.0), "prob_mask": (2, 0.0), "thresh_mask": (1, -1.0)}[key]
    points = polygons.points[index].numpy()
    if key != "thresh_mask":
        points = np.trunc(points)
    pixels = list(zip(xs.astype(float).tolist(), ys.astype(float).tolist(), strict=True))
    nearest = np.full(len(pixels), np.inf)
    for n in np.flatnonzero(polygons.roles[index].numpy() == role).tolist():
        contour = points[n].reshape(-1, 1, 2)
        inside = np.array([cv2.pointPolygonTest(contour, pixel, True) for pixel in pixels])
        nearest = np.minimum(nearest, np.abs(inside - side * float(polygons.offsets[index, n])))
    return float(nearest.max())


def report(name: str, stats: dict[str, list[float]], samples: int) -> str:
    """One Markdown table row."""
    pixels = sum(stats["pixels"])
    cells = [
        name,
        str(samples),
        f"{np.mean(stats['warp']):.3f} / {max(stats['warp_max']):.1f}",
        f"{np.mean(stats['grey']):.3f} / {max(stats['grey_max']):.1f}",
        f"{max(stats['thresh']):.1e}",
    ]
    for key in MASKS:
        differ, ones = sum(stats[key]), max(sum(stats[f"{key}_ones"]), 1.0)
        share = f"{differ / pixels:.3%} ({differ / ones:.2%} of its ones)"
        cells.append(f"{share}, <= {max(stats[f'{key}_border']):.2f} px off its border")
    return "| " + " | ".join(cells) + " |"


def main(argv: Sequence[str] | None = None) -> str:
    """Compare the paths on the three sets; print (and return) a Markdown table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sroie", type=Path, default=SROIE)
    parser.add_argument(
        "--synthetic-root", type=Path, default=REPO / "outputs" / "compare_synthetic_receipts"
    )
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--jitter", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides, e.g. data.train_transform.crop_size=320"
    )
    args = parser.parse_args(argv)
    register_resolvers()
    device = torch.device(args.device)
    generate_dataset(
        args.synthetic_root, 24, 0, 0, args.seed, long_side=1024, style="receipt", granularity="line"
    )
    rows = [
        "| set | samples | crop diff, grey levels: mean / max | with photometric | thresh_map max diff | "
        + " | ".join(f"{key} differs" for key in MASKS)
        + " |",
        "| --- | ---: | --- | --- | --- | " + " | ".join("---" for _ in MASKS) + " |",
    ]
    sroie = datasets(args.sroie, args.overrides)
    sets = [("sroie-compact train", sroie), (f"sroie-compact, corners jittered {args.jitter:g} px", sroie)]
    sets.append(("synthetic receipts", datasets(args.synthetic_root, args.overrides)))
    for index, (name, pair) in enumerate(sets):
        if index == 1:
            for dataset in pair.values():
                jittered(dataset, args.jitter, args.seed)
        stats = compare(pair, args.samples, args.batch_size, args.seed, device)
        rows.append(report(name, stats, args.samples))
    text = "\n".join(rows)
    print(
        f"device {device}, torch {torch.__version__}, overrides {' '.join(args.overrides) or 'none'}\n{text}"
    )
    return text


if __name__ == "__main__":
    main()
