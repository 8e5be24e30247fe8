"""Training-step throughput of a model config: forward + DBLoss + backward + AdamW step, no data loading.

    uv run python scripts/benchmark_train_step.py                 # CPU: fp32 vs bf16, NCHW vs NHWC
    python3 scripts/benchmark_train_step.py --device cuda --batch 16 --size 640   # a GPU (PYTHONPATH=.)

Prints one Markdown row per variant: seconds per step and images per second (best of ``--steps``).
"""

from __future__ import annotations

import contextlib

import torch

from ocr.debug.oom_probe import random_batch
from ocr.lightning_modules.build import build_net_and_loss
from ocr.run.config import compose_config
from scripts.benchmark_results import benchmark_parser, command_line, markdown_row, timed, write_result


def time_steps(
    model_cfg: str, device: torch.device, batch: int, size: int, bf16: bool, channels_last: bool, steps: int
) -> float:
    """Best wall time of one optimizer step of ``steps`` (after a warm-up step)."""
    net, loss_fn = build_net_and_loss(compose_config("train", [f"model={model_cfg}"]))
    net = net.to(device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    data = random_batch(batch, size, str(device))
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
        data["images"] = data["images"].contiguous(memory_format=torch.channels_last)  # type: ignore[union-attr]
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    def step() -> None:
        with autocast:
            output = net(data["images"])
        loss_fn(output, data)["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()

    step()  # warm-up
    return min(timed(step)[1] for _ in range(steps))


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="dbnet_resnet18_fpn", help="a file name in configs/model/")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    device = torch.device(args.device)
    print(
        f"{args.model}, {args.batch} x {args.size} px, torch {torch.__version__}, device {device}, "
        f"threads {torch.get_num_threads()}"
    )
    print("| precision | memory format | s/step | img/s |\n| --- | --- | ---: | ---: |")
    rows = []
    for bf16 in (False, True):
        for channels_last in (False, True):
            seconds = time_steps(args.model, device, args.batch, args.size, bf16, channels_last, args.steps)
            precision = "bf16 autocast" if bf16 else "fp32"
            rows.append((precision, "channels_last" if channels_last else "NCHW", round(seconds, 3)))
            print(markdown_row([*rows[-1], f"{args.batch / seconds:.1f}"]), flush=True)
    if args.record:
        write_result(
            "train_step",
            "Training throughput",
            f"`scripts/benchmark_train_step.py`: one optimizer step of {args.model}, batch {args.batch} at "
            f"{args.size} px, model + loss only on random batches, {torch.get_num_threads()} threads, best "
            f"of {args.steps} steps after a warm-up.",
            command_line(__file__, None),
            ["precision", "memory format", "s/step"],
            rows,
            device=str(device),
            directory=args.record,
        )


if __name__ == "__main__":
    main()
