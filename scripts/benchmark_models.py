"""Network cost of model configs side by side: parameters, GFLOPs (multiply and add count two) and median
CPU latency at batch 1, PyTorch and ONNX Runtime, the models interleaved round by round.

    uv run python scripts/benchmark_models.py                                  # r18-FPN, DBNet++, PAN
    uv run python scripts/benchmark_models.py --models dbnet_resnet18_fpn dbnet_resnet18_pan \
        dbnet_resnet18_pan,model.decoder.channels=32 --size 640

Random weights, exported by ``export_onnx``; the input is a (1, 3, size, size) letterbox.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ocr.inference.onnx_export import ProbabilityMapNet, export_onnx
from ocr.inference.onnx_runtime import OnnxProbabilityMap
from ocr.lightning_modules.build import build_net_and_loss
from ocr.run.config import compose_config
from scripts.benchmark_results import benchmark_parser, command_line, markdown_table, timed, write_result

DEFAULT_MODELS = ("dbnet_resnet18_fpn", "dbnetpp_resnet18", "dbnet_resnet18_pan")


def build(spec: str, hardware: str) -> nn.Module:
    """The network of ``spec`` = ``<model config>[,<override>...]``, random weights, eval mode."""
    name, *overrides = spec.split(",")
    cfg = compose_config("train", [f"model={name}", f"hardware={hardware}", *overrides])
    return build_net_and_loss(cfg, weights_free=True)[0].eval()


def gflops(net: nn.Module, images: torch.Tensor) -> float:
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        net(images)
    return counter.get_total_flops() / 1e9


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help="configs, each [,<override>...]")
    parser.add_argument("--size", type=int, default=1024, help="input side (a long side letterboxed square)")
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds (each runs every model once)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads, PyTorch and ONNX Runtime")
    parser.add_argument("--hardware", default="cpu", help="hardware preset whose decoder width is built")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    images = torch.randn(1, 3, args.size, args.size)
    nets = {name: build(name, args.hardware) for name in args.models}
    cells: dict[str, list[str]] = {}  # parameters (M) of the network, its decoder and head; GFLOPs
    with tempfile.TemporaryDirectory() as tmp:
        sessions = {}
        for name, net in nets.items():
            model_path = export_onnx(net, Path(tmp) / f"model{len(sessions)}.onnx", sample_size=128)
            sessions[name] = OnnxProbabilityMap(model_path, threads=args.threads)
            parts = ((net, 2), (net.decoder, 3), (net.head, 3))
            cells[name] = [f"{sum(p.numel() for p in part.parameters()) / 1e6:.{n}f}" for part, n in parts]
            cells[name].append(f"{gflops(net, images):.1f}")
        wrappers = {name: ProbabilityMapNet(net).eval() for name, net in nets.items()}
        times: dict[str, dict[str, list[float]]] = {name: {"torch": [], "onnx": []} for name in nets}
        with torch.no_grad():
            for name in nets:  # warm-up
                wrappers[name](images)
                sessions[name](images)
            for _ in range(args.rounds):
                for name in nets:
                    times[name]["torch"].append(1e3 * timed(lambda n=name: wrappers[n](images))[1])
                    times[name]["onnx"].append(1e3 * timed(lambda n=name: sessions[n](images))[1])
    first = args.models[0]
    median = {name: {k: statistics.median(v) for k, v in t.items()} for name, t in times.items()}
    print(
        f"input 1x3x{args.size}x{args.size}, {args.threads} thread(s), {args.rounds} interleaved rounds, "
        f"hardware={args.hardware}; ratios to {first}\n"
    )
    columns = ["model", "params (M)", "decoder (M)", "head (M)", "GFLOPs", "PyTorch ms", "ratio"]
    columns += ["ONNX Runtime ms", "ratio"]
    table = []
    for name, m in median.items():
        torch_ms, onnx_ms = f"{m['torch']:.0f}", f"{m['onnx']:.0f}"
        ratios = [f"{m[backend] / median[first][backend]:.2f}" for backend in ("torch", "onnx")]
        table.append([name, *cells[name], torch_ms, ratios[0], onnx_ms, ratios[1]])
    print(markdown_table(columns, table))
    if args.record:
        protocol = (
            "`scripts/benchmark_models.py`: random weights at the `hardware=" + args.hardware + "` preset's "
            f"widths, batch 1, a 1x3x{args.size}x{args.size} input; GFLOPs over the whole forward "
            "(multiply-add = 2); PyTorch and ONNX Runtime (the export's graph) on "
            f"{args.threads} intra-op thread(s), median of {args.rounds} rounds, the models interleaved; "
            f"ratios to {first}."
        )
        command = command_line(__file__, None)
        question = "The variants: DBNet++, PAN, encoders"
        write_result("models", question, protocol, command, columns, table, directory=args.record)


if __name__ == "__main__":
    main()
