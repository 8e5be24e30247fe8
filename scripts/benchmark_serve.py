"""Benchmark the web app's answer to a moved post-processing control (runners/serve.py), on real receipts.

    uv run python scripts/benchmark_serve.py [--root ../shared/datasets/sroie-compact] [--images 20]
        [--long-side 1024] [--ckpt <file.ckpt>] [--repeats 5]

Times ``POST /api/detect`` (post-processing, the CLEval card, the JSON) through FastAPI's TestClient with
each image's map cached, for three settings; without ``--ckpt`` the map is the GT's blurred DB target.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
import torch
from fastapi.testclient import TestClient
from hydra.utils import instantiate

from ocr.data.targets.db import make_db_targets
from ocr.data.transforms import EvalTransform
from ocr.geometry import letterbox_geometry, to_input
from ocr.run.config import compose_config
from ocr.serve.app import create_app
from ocr.serve.guard import TOKEN_HEADER, ModelFiles, RequestGuard
from ocr.serve.models import ServedModel, load_served_model
from ocr.serve.split import SplitBrowser
from ocr.serve.state import ServeState
from scripts.benchmark_results import benchmark_parser, command_line, markdown_table, write_result

SETTINGS = (
    {"thresh": 0.3, "box_thresh": 0.5, "unclip_ratio": 1.5},
    {"thresh": 0.2, "box_thresh": 0.6, "unclip_ratio": 1.8},
    {"thresh": 0.5, "box_thresh": 0.7, "unclip_ratio": 1.2},
)
IMAGENET = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "sroie-compact"


def truth_model(long_side: int, postprocess: dict[str, object]) -> ServedModel:
    """A model whose 'network' is replaced per image by :func:`truth_map`."""
    transform = EvalTransform(long_side=long_side, fill=0, pad_multiple=None, **IMAGENET)
    return ServedModel("ground-truth map", "ckpt", dict(postprocess), transform, lambda images: images)


def truth_map(state: ServeState, key: str, model: ServedModel) -> torch.Tensor:
    """(1, 1, H, W) probabilities: the image's shrunk GT text, blurred (what a trained DB map resembles)."""
    image = state.images[key]
    assert image.truth is not None
    height, width = model.transform.input_size(image.width, image.height)
    geometry, _ = letterbox_geometry(image.width, image.height, model.transform.long_side)
    polygons = to_input(image.truth.polygons, geometry)
    prob = make_db_targets(polygons, image.truth.ignore, height, width)["prob_map"]
    prob = cv2.GaussianBlur(prob, (5, 5), 1.5)
    return torch.from_numpy(np.clip(prob * 0.95 + 0.02, 0, 1))[None, None]


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--root", default=str(DEFAULT_ROOT))
    parser.add_argument("--split", default="test")
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--long-side", type=int, default=1024)
    parser.add_argument("--ckpt")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    cfg = compose_config("serve", [f"data.root={args.root}", f"split={args.split}"])
    postprocess = {k: v for k, v in compose_config("serve").postprocess.items() if not str(k).startswith("_")}
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = args.ckpt
        model = load_served_model(cfg, "ckpt", ckpt) if ckpt else truth_model(args.long_side, postprocess)
        state = ServeState({"1": model}, {}, Path(tmp), instantiate(cfg.metric))
        browser = SplitBrowser(state, cfg.data, args.split)  # registers the images; not started
        guard, served = RequestGuard("127.0.0.1", 8000), ModelFiles([], [])
        app = create_app(state, browser, lambda key, path: model, "receipts", guard, served)
        client = TestClient(app, base_url="http://127.0.0.1:8000", headers={TOKEN_HEADER: guard.token})
        keys = browser.keys[: args.images]
        polygons, times, cpu, post = ([[] for _ in SETTINGS] for _ in range(4))  # per setting
        for key in keys:
            if not args.ckpt:
                fixed = truth_map(state, key, model)
                model.network = lambda images, fixed=fixed: fixed
            first = client.post("/api/detect", json={"key": key, "slot": "1"}).json()
            assert "error" not in first, first
            for index, setting in enumerate(SETTINGS):
                for _ in range(args.repeats):
                    started, started_cpu = time.perf_counter(), time.process_time()
                    card = client.post("/api/detect", json={"key": key, "slot": "1", **setting}).json()
                    times[index].append(time.perf_counter() - started)
                    cpu[index].append(time.process_time() - started_cpu)
                    post[index].append(card["postprocess_ms"] / 1000)
                polygons[index].append(len(card["det"]))
        side = max(model.transform.input_size(state.images[k].width, state.images[k].height)[0] for k in keys)
        print(
            f"{len(keys)} images of {args.root} ({args.split}), input long side {side} px, map: "
            f"{'checkpoint ' + args.ckpt if args.ckpt else 'ground truth (blurred DB target)'}; "
            f"{args.repeats} answers per image and setting; torch threads {torch.get_num_threads()}"
        )
    columns = ["setting", "polygons per image", "answer, wall", "answer, CPU", "of it post-processing, wall"]
    rows = [
        [" / ".join(map(str, s.values())), round(statistics.mean(polygons[i])), _summary(times[i])]
        + [_summary(cpu[i]), _summary(post[i])]
        for i, s in enumerate(SETTINGS)
    ]
    print(markdown_table(columns, rows))
    source = f"the checkpoint's ({args.ckpt})" if args.ckpt else "each image's ground truth drawn as a DB map"
    if args.record:
        protocol = (
            "`scripts/benchmark_serve.py`: what a moved slider costs in the web app, `POST /api/detect` "
            "with the image's map cached (post-processing, the CLEval card, the JSON) through FastAPI's "
            f"TestClient, on the first {len(keys)} images of the {args.split} split at long side {side}, "
            f"{args.repeats} answers per image and setting; the map is {source}."
        )
        command = command_line(__file__, None)
        write_result(
            "serve", "Predict and deployment speed", protocol, command, columns, rows, directory=args.record
        )


def _summary(seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p90 = ms[int(0.9 * (len(ms) - 1))]
    return f"median {statistics.median(ms):.0f} / p90 {p90:.0f} / max {ms[-1]:.0f} ms"


if __name__ == "__main__":
    sys.exit(main())
