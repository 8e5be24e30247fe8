"""Start the web app from the ``serve`` config: load the models, read the split, bind the port, serve."""

from __future__ import annotations

import errno
import logging
import socket
from functools import partial
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ocr.serve.guard import ModelFiles, RequestGuard, is_loopback
from ocr.serve.models import ServedModel, load_served_model
from ocr.serve.state import ServeState
from ocr.utils.errors import ConfigValueError, UsageError, find_usage_error

__all__ = ["bind_port", "build_app", "import_web_stack", "run_app"]

log = logging.getLogger(__name__)


def import_web_stack() -> None:
    """Check that FastAPI and uvicorn are installed (else say how to install them)."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "runners/serve.py needs FastAPI and uvicorn, which are not installed in this environment: "
            "install the optional dependency group with `uv sync --group serve`"
        ) from None


def bind_port(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (``port=0``: a free one); ConfigValueError when it cannot bind."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigValueError(
                f"port={port}: {host}:{port} is already in use (another server, or this app started "
                "earlier?): stop it, or choose another port with port=<n> (port=0 picks a free one)"
            ) from None
        raise ConfigValueError(f"host={host} port={port}: cannot listen there ({exc.strerror})") from None
    sock.listen(128)
    sock.set_inheritable(True)
    address = sock.getsockname()[0]
    if not is_loopback(address):
        log.warning(
            "host=%s: the app is open to every machine that reaches %s:%d, without a login: anyone there "
            "can upload images, see them and the split's, and load the models under model_dirs "
            "(host=127.0.0.1 keeps it to this machine)",
            host,
            address,
            sock.getsockname()[1],
        )
    return sock


def _slots(cfg: DictConfig) -> list[tuple[str, str, str]]:
    """(slot, key, path) of the models the config names: ``ckpt`` or ``onnx_model`` first, ``ckpt2``."""
    if cfg.ckpt is not None and cfg.onnx_model is not None:
        raise ConfigValueError(
            f"ckpt={cfg.ckpt} and onnx_model={cfg.onnx_model}: expected one first model; "
            "show the export beside the checkpoint with ckpt2=<file.onnx>"
        )
    if cfg.ckpt is None and cfg.onnx_model is None:
        raise ConfigValueError("ckpt: expected ckpt=<file.ckpt> (or onnx_model=<file.onnx>), got null")
    slots = (
        [("1", "ckpt", str(cfg.ckpt))] if cfg.ckpt is not None else [("1", "onnx_model", str(cfg.onnx_model))]
    )
    if cfg.ckpt2 is not None:
        slots.append(("2", "onnx_model" if str(cfg.ckpt2).endswith(".onnx") else "ckpt2", str(cfg.ckpt2)))
    return slots


def _load(cfg: DictConfig, key: str, path: str) -> ServedModel:
    try:
        return load_served_model(cfg, key, path)
    except Exception as exc:  # Hydra's instantiate wraps a constructor's error
        usage = find_usage_error(exc)
        if usage is None:
            raise
        raise usage from None


def build_app(cfg: DictConfig, upload_dir: Path, data_choice: str, address: tuple[str, int]) -> Any:
    """The FastAPI app of ``cfg`` served at ``address`` (IP, port): the first model must load; a second
    one that does not is reported in the console and the page, and the first is served alone."""
    import_web_stack()
    from ocr.serve.app import create_app
    from ocr.serve.split import SplitBrowser

    slots = _slots(cfg)
    model_files = ModelFiles([path for _, _, path in slots], [str(folder) for folder in cfg.model_dirs])
    models, errors = {}, {}
    for slot, key, path in slots:
        try:
            models[slot] = _load(cfg, key, path)
        except UsageError as exc:
            if slot == "1":
                raise
            log.error("%s; serving model 1 alone", exc)
            errors[slot] = str(exc)
    state = ServeState(models, errors, upload_dir, instantiate(cfg.metric))
    browser = None
    if not OmegaConf.is_missing(cfg.data, "root") and cfg.data.root is not None:
        browser = SplitBrowser(state, cfg.data, cfg.split)
        browser.start()
    guard = RequestGuard(*address)
    return create_app(state, browser, partial(_load, cfg), data_choice, guard, model_files)


def run_app(app: Any, sock: socket.socket) -> None:
    """Serve ``app`` on the bound ``sock`` until interrupted."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[sock])
