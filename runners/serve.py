"""A local web app to try a checkpoint on any image, tune its post-processing live and browse its errors.

uv run runners/serve.py ckpt=outputs/train/<run>/checkpoints/best.ckpt [ckpt2=<other.ckpt or .onnx>]
    [data.root=../shared/datasets/sroie-compact split=test] [port=8000]
uv run runners/serve.py onnx_model=outputs/export/<run>/model.onnx

Prints the URL (127.0.0.1 only; another host= warns that the network reaches it). Each model runs with
its own evaluation transform and post-processing (the checkpoint's, or the export's sidecar); the page's
controls re-run only the post-processing on the cached probability map and show the predict/test command
lines of the current values. "load model" loads only the started models or files under model_dirs=[...]
(docs/reporting.md, "Security"). A port in use, or a first model that cannot be loaded, exits 1 with the
message.
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from ocr.machine.hardware import register_resolvers
from ocr.run.entry import entry, quiet_third_party

register_resolvers()
quiet_third_party()


@entry("serve")
def serve(cfg: DictConfig) -> None:
    """Load the models, bind the port, print the URL and serve until interrupted."""
    from ocr.serve.server import bind_port, build_app, import_web_stack, run_app

    import_web_stack()
    sock = bind_port(cfg.host, cfg.port)  # first: a port in use fails before minutes of loading
    host, port = sock.getsockname()[:2]
    data_choice = HydraConfig.get().runtime.choices.get("data", "receipts")
    app = build_app(cfg, Path(cfg.paths.output_dir) / "uploads", data_choice, (host, port))
    print(f"Serving on http://{host}:{port}/ (Ctrl+C stops)", flush=True)
    run_app(app, sock)


if __name__ == "__main__":
    serve.main()
