"""The web app: one HTML page (``page.html``) and a small JSON API over :class:`ServeState`.

Every refused input (an upload that is no usable image, a checkpoint of another model, a control out of
range) answers 400 with ``{"error": message}``, the page shows the message, and the server goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.resources import files
from typing import Any

import cv2
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from ocr.data.scan import load_source
from ocr.reporting.html import with_overlay_script
from ocr.serve.commands import reproduce_commands
from ocr.serve.models import CONTROL_KEYS, ServedModel
from ocr.serve.split import SplitBrowser
from ocr.serve.state import ServeState
from ocr.utils.errors import CheckpointError, UsageError, find_usage_error

__all__ = ["VIEW_LONG_SIDE", "create_app"]

VIEW_LONG_SIDE = 1600  # px of the image the page shows; polygons stay in original px
JPEG_QUALITY = 85

log = logging.getLogger(__name__)


def _page() -> str:
    return with_overlay_script(files("ocr.serve").joinpath("page.html").read_text(encoding="utf-8"))


def _model_info(model: ServedModel) -> dict[str, Any]:
    return {"name": model.name, "key": model.key, "postprocess": model.postprocess}


def create_app(
    state: ServeState,
    browser: SplitBrowser | None,
    loader: Callable[[str, str], ServedModel],
    data_choice: str,
) -> FastAPI:
    """The app over ``state``; ``browser`` lists a split when given; ``loader(key, path)`` loads a model
    the page asks for (``key``: ``ckpt`` or ``onnx_model``); ``data_choice`` names the data config in the
    commands shown."""
    app = FastAPI(title="ocr serve", docs_url=None, redoc_url=None)
    page = _page()

    @app.exception_handler(UsageError)
    async def refused(request: Request, exc: UsageError) -> JSONResponse:
        log.warning("%s %s refused: %s", request.method, request.url.path, exc)
        return JSONResponse({"error": str(exc)}, status_code=400)

    @app.exception_handler(KeyError)
    async def not_found(request: Request, exc: KeyError) -> JSONResponse:
        return JSONResponse({"error": str(exc.args[0] if exc.args else exc)}, status_code=404)

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        return page

    @app.get("/api/info")
    def info() -> dict[str, Any]:
        return {
            "models": {slot: _model_info(m) for slot, m in sorted(state.models.items())},
            "errors": state.errors,
            "split": browser.split if browser is not None else None,
            "controls": list(CONTROL_KEYS),
        }

    @app.post("/api/upload")
    async def upload(request: Request, name: str) -> dict[str, str]:
        return {"key": state.add_upload(await request.body(), name)}

    @app.get("/api/split")
    def split() -> dict[str, Any]:
        if browser is None:
            raise KeyError("no split: start the app with data.root=<folder> to browse one")
        return browser.listing()

    @app.post("/api/detect")
    def detect(body: dict[str, Any]) -> dict[str, Any]:
        slot, key = str(body.get("slot", "1")), str(body.get("key", ""))
        if key not in state.images:
            raise KeyError(f"no image {key!r}: upload it again (the server may have restarted)")
        card = state.detect(slot, key, {k: body[k] for k in CONTROL_KEYS if body.get(k) is not None})
        split_of = (data_choice, browser.root, browser.split) if state.images[key].truth and browser else None
        card["commands"] = reproduce_commands(
            state.model(slot), card["settings"], state.images[key].path, split_of
        )
        return card

    @app.get("/api/image/{key:path}")
    def image(key: str) -> Response:
        served = state.images[key]
        source = load_source(served.path, VIEW_LONG_SIDE)
        ok, jpeg = cv2.imencode(
            ".jpg", cv2.cvtColor(source.image, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY]
        )
        if not ok:
            raise ValueError(f"{served.name}: OpenCV could not encode it as JPEG")
        return Response(jpeg.tobytes(), media_type="image/jpeg")

    @app.get("/api/prob/{slot}/{key:path}")
    def probability(slot: str, key: str) -> Response:
        return Response(state.probability_png(slot, key), media_type="image/png")

    @app.post("/api/model")
    def load_model(body: dict[str, Any]) -> dict[str, Any]:
        slot, path = str(body.get("slot", "")), str(body.get("path", "")).strip()
        if slot not in ("1", "2"):
            raise RequestError(f"slot: expected '1' or '2', got {slot!r}")
        if not path:
            raise RequestError("path: expected the path of a .ckpt or .onnx file on the server, got nothing")
        key = "onnx_model" if path.endswith(".onnx") else ("ckpt" if slot == "1" else "ckpt2")
        try:
            model = loader(key, path)
        except Exception as exc:  # Hydra's instantiate wraps a constructor's error
            usage = find_usage_error(exc)
            if usage is None:
                raise CheckpointError(
                    f"{key}={path}: could not be loaded ({type(exc).__name__}: {exc})"
                ) from exc
            raise usage from None
        state.set_model(slot, model)
        return {"models": {s: _model_info(m) for s, m in sorted(state.models.items())}}

    return app


class RequestError(UsageError, ValueError):
    """A request the API refuses (answered 400 with the message)."""
