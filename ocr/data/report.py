"""Data report: counts, sanitation by reason, size statistics and a few visual-check PNGs of a split.

Usage: ``uv run python -m ocr.data.report <root> [--split train] [--out DIR] [--num-images 4]``.
Each PNG shows the letterboxed input with the ground-truth polygons (green; don't-care red), the
probability map and the threshold map, polygons drawn on all three, so misaligned boxes or maps show.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from ocr.data.coding import decode_batch
from ocr.data.collate import collate_batch
from ocr.data.dataset import ReceiptDataset
from ocr.data.images import EXIF_MODES
from ocr.data.transforms import EvalTransform
from ocr.geometry import to_input
from ocr.types import Sample, TargetParams
from ocr.utils.io import atomic_write_bytes, atomic_write_json
from ocr.utils.visualize import colorize_map, draw_polygons

__all__ = ["compute_stats", "format_stats", "main", "render_sample", "write_report"]

log = logging.getLogger(__name__)

_IDENTITY_NORM = ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))


def _summary(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"min": 0.0, "median": 0.0, "max": 0.0}
    arr = np.asarray(values, np.float64)
    return {"min": float(arr.min()), "median": float(np.median(arr)), "max": float(arr.max())}


def compute_stats(dataset: ReceiptDataset, long_side: int) -> dict[str, Any]:
    """Counts and min/median/max sizes (original px; box short side also at the letterbox ``long_side``)."""
    widths, heights, box_w, box_h, box_short, box_short_input = [], [], [], [], [], []
    for entry in dataset.entries:
        widths.append(entry.orig_width)
        heights.append(entry.orig_height)
        scale = long_side / max(entry.orig_width, entry.orig_height)
        for polygon in entry.polygons:
            extent = polygon.max(axis=0) - polygon.min(axis=0)
            box_w.append(float(extent[0]))
            box_h.append(float(extent[1]))
            short = float(min(cv2.minAreaRect(polygon.astype(np.float32))[1]))
            box_short.append(short)
            box_short_input.append(short * scale)
    report = dataset.report
    return {
        "root": str(dataset.root),
        "split": dataset.split,
        "images": report.num_images,
        "words": report.num_words,
        "ignore": report.num_ignore,
        "missing": report.missing,
        "unreadable": report.unreadable,
        "unannotated": report.unannotated,
        "size_mismatch": report.size_mismatch,
        "ambiguous_exif": report.ambiguous,
        "sanitation": report.sanitation,
        "image_width": _summary(widths),
        "image_height": _summary(heights),
        "image_short_side": _summary([min(w, h) for w, h in zip(widths, heights, strict=True)]),
        "box_width": _summary(box_w),
        "box_height": _summary(box_h),
        "box_short_side": _summary(box_short),
        f"box_short_side_at_{long_side}": _summary(box_short_input),
    }


def format_stats(stats: dict[str, Any]) -> str:
    """Human-readable multi-line summary of :func:`compute_stats`."""
    lines = [
        f"{stats['root']} [{stats['split']}]",
        f"  images {stats['images']}  words {stats['words']}  ignore {stats['ignore']}  "
        f"missing {len(stats['missing'])}  unreadable {len(stats['unreadable'])}  "
        f"unannotated {len(stats['unannotated'])}  img_w/img_h mismatch {len(stats['size_mismatch'])}  "
        f"ambiguous EXIF {stats['ambiguous_exif']}",
        "  sanitation: " + (", ".join(f"{k}={v}" for k, v in sorted(stats["sanitation"].items())) or "none"),
    ]
    for key, value in stats.items():
        if isinstance(value, dict) and set(value) == {"min", "median", "max"}:
            lines.append(
                f"  {key:<24} min {value['min']:8.1f}  median {value['median']:8.1f}  max {value['max']:8.1f}"
            )
    return "\n".join(lines)


def render_sample(sample: Sample) -> npt.NDArray[np.uint8]:
    """(H, 3 * W, 3) uint8 RGB: input | prob_map | thresh_map, ground truth drawn on each."""
    image = np.ascontiguousarray(sample["image"].permute(1, 2, 0).numpy())
    decoded = decode_batch(collate_batch([sample]))
    prob = (decoded["prob_map"][0, 0].numpy() * 255).astype(np.uint8)
    thresh = (decoded["thresh_map"] * decoded["thresh_mask"])[0, 0].numpy()
    polygons_px = to_input(sample["polygons"], sample["geometry"])
    panels = [
        draw_polygons(panel, polygons_px, sample["ignore"], thickness=1)
        for panel in (image, np.repeat(prob[..., None], 3, axis=2), colorize_map(thresh))
    ]
    geometry = sample["geometry"]
    # Keep only the part of each panel that shows the image (drops letterbox padding).
    w, h = geometry.orig_width, geometry.orig_height
    corners = to_input([np.array([[0, 0], [w, 0], [0, h], [w, h]], np.float32)], geometry)[0]
    x0, y0 = np.clip(np.floor(corners.min(axis=0)).astype(int), 0, None)
    x1 = int(min(np.ceil(corners[:, 0].max()), geometry.input_width))
    y1 = int(min(np.ceil(corners[:, 1].max()), geometry.input_height))
    return np.hstack([panel[y0:y1, x0:x1] for panel in panels])


def write_report(
    root: str | Path, split: str, out_dir: str | Path, num_images: int, long_side: int, exif_mode: str
) -> dict[str, Any]:
    """Scan ``root``/``split``; write ``stats.json`` and ``num_images`` PNGs to ``out_dir``; return stats."""
    dataset = ReceiptDataset(
        root=root,
        split=split,
        transform=EvalTransform(
            long_side=long_side, mean=_IDENTITY_NORM[0], std=_IDENTITY_NORM[1], fill=0, pad_multiple=None
        ),
        exif_mode=exif_mode,
        on_missing_image="skip",
        min_polygon_size=1.0,
        targets=asdict(TargetParams()),
        cache_dir=None,
        render_on="worker",  # a CLI on the CPU: the maps drawn as a CPU training run draws them
    )
    stats = compute_stats(dataset, long_side)
    out = Path(out_dir)
    atomic_write_json(out / "stats.json", stats)
    picks = np.linspace(0, len(dataset) - 1, num=min(num_images, len(dataset))).round().astype(int)
    for index in dict.fromkeys(picks.tolist()):
        sample = dataset[index]
        ok, png = cv2.imencode(".png", cv2.cvtColor(render_sample(sample), cv2.COLOR_RGB2BGR))
        if not ok:
            raise RuntimeError(f"{sample['image_id']}: PNG encoding failed")
        path = atomic_write_bytes(out / f"{split}_{Path(sample['image_id']).stem}.png", png.tobytes())
        log.info("wrote %s", path)
    return stats


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(prog="python -m ocr.data.report", description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="dataset folder with images/<split>/ and jsons/<split>.json")
    parser.add_argument("--split", default="train")
    parser.add_argument(
        "--out", type=Path, default=None, help="output folder (default outputs/data_report/<split>)"
    )
    parser.add_argument("--num-images", type=int, default=4, help="PNGs to write")
    parser.add_argument("--long-side", type=int, default=1024, help="letterbox long side of the PNGs")
    parser.add_argument("--exif-mode", choices=EXIF_MODES, default="rotated")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = args.out if args.out is not None else Path("outputs") / "data_report" / args.split
    stats = write_report(args.root, args.split, out, args.num_images, args.long_side, args.exif_mode)
    sys.stdout.write(format_stats(stats) + f"\n  report: {out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
