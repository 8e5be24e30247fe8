"""The web app: one HTML page (``page.html``) and a small JSON API over :class:`ServeState`.

Every request passes :class:`RequestGuard` first; every refused input answers 400 with
``{"error": message}`` naming the field or file, and the server goes on.
"""

from __future__ import annotations

import json
import logging
import math
import reprlib
from collections.abc import Callable
from importlib.resources import files
from typing import Any

import cv2
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response

from ocr.data.scan import load_source
from ocr.reporting.html import with_overlay_script
from ocr.serve.commands import reproduce_commands
from ocr.serve.guard import ModelFiles, RequestError, RequestGuard
from ocr.serve.images import UploadSpool
from ocr.serve.models import CONTROL_KEYS, ServedModel
from ocr.serve.split import SplitBrowser
from ocr.serve.state import ServeState
from ocr.utils.errors import CheckpointError, UsageError
from ocr.utils.visualize import encode_image

__all__ = ["VIEW_LONG_SIDE", "create_app"]

VIEW_LONG_SIDE = 1600  # px of the image the page shows; polygons stay in original px
JPEG_QUALITY = 85
MAX_JSON_BYTES = 64 * 2**10  # an API body holds a few short fields

log = logging.getLogger(__name__)


def _page(token: str) -> str:
    page = files("ocr.serve").joinpath("page.html").read_text(encoding="utf-8")
    return with_overlay_script(page.replace("__SERVE_TOKEN__", token))


def _models(state: ServeState) -> dict[str, Any]:
    return {
        s: {"name": m.name, "key": m.key, "postprocess": m.postprocess}
        for s, m in sorted(state.models.items())
    }


async def _json_fields(request: Request, fields: tuple[str, ...]) -> dict[str, Any]:
    """The JSON object of ``request``'s body (at most ``MAX_JSON_BYTES``), with no key outside ``fields``."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise RequestError(f"Content-Type: expected application/json, got {media or 'none'!r}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_JSON_BYTES:
            raise RequestError(f"body: expected a JSON object of at most {MAX_JSON_BYTES} bytes")
    try:
        data = json.loads(body)
    except ValueError:
        raise RequestError("body: expected a JSON object, got text that is not JSON") from None
    if not isinstance(data, dict):
        raise RequestError(f"body: expected a JSON object, got a {type(data).__name__}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise RequestError(f"{unknown[0]}: not a field of this request (expected {', '.join(fields)})")
    return data


def _text(body: dict[str, Any], name: str, default: str | None = None) -> str:
    """Field ``name`` of ``body``, a string (``default`` when absent)."""
    value = body.get(name, default)
    if not isinstance(value, str):
        raise RequestError(f"{name}: expected a string, got {reprlib.repr(value)}")
    return value


def _controls(body: dict[str, Any]) -> dict[str, float]:
    """The post-processing controls ``body`` sets, each a finite number (the post-processor checks ranges)."""
    controls = {}
    for name in CONTROL_KEYS:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise RequestError(f"{name}: expected a finite number, got {reprlib.repr(value)}")
        controls[name] = float(value)
    return controls


def create_app(
    state: ServeState,
    browser: SplitBrowser | None,
    loader: Callable[[str, str], ServedModel],
    data_choice: str,
    guard: RequestGuard,
    model_files: ModelFiles,
) -> FastAPI:
    """The app over ``state``; ``loader(key, path)`` loads a model once ``model_files`` allows its path;
    ``data_choice`` names the data config in the commands shown."""
    app = FastAPI(title="ocr serve", docs_url=None, redoc_url=None, openapi_url=None)
    page = _page(guard.token)

    @app.middleware("http")
    async def guarded(request: Request, call_next: Callable[[Request], Any]) -> Response:
        refused = guard.refusal(request.method, request.headers)
        if refused is None:
            response: Response = await call_next(request)
            return response
        status, message = refused
        log.warning("%s %s refused: %s", request.method, request.url.path, message)
        return JSONResponse({"error": message}, status_code=status)

    @app.exception_handler(UsageError)
    async def refused(request: Request, exc: UsageError) -> JSONResponse:
        log.warning("%s %s refused: %s", request.method, request.url.path, exc)
        return JSONResponse({"error": str(exc)}, status_code=400)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [f"{error['loc'][-1]}: {error['msg']}" for error in exc.errors()]
        return JSONResponse({"error": "; ".join(problems)}, status_code=400)

    @app.exception_handler(KeyError)
    async def not_found(request: Request, exc: KeyError) -> JSONResponse:
        return JSONResponse({"error": str(exc.args[0] if exc.args else exc)}, status_code=404)

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    @app.get("/api/info")
    def info() -> dict[str, Any]:
        return {
            "models": _models(state),
            "errors": state.errors,
            "split": browser.split if browser is not None else None,
            "controls": list(CONTROL_KEYS),
        }

    @app.post("/api/upload")
    async def upload(request: Request, name: str) -> dict[str, str]:
        declared = request.headers.get("content-length")
        size = int(declared) if declared is not None and declared.isdigit() else None
        with UploadSpool(state.upload_dir, name, size) as spool:
            async for chunk in request.stream():
                spool.write(chunk)
        return {"key": state.add_upload(spool)}

    @app.get("/api/split")
    def split() -> dict[str, Any]:
        if browser is None:
            raise KeyError("no split: start the app with data.root=<folder> to browse one")
        return browser.listing()

    @app.post("/api/detect")
    async def detect(request: Request) -> dict[str, Any]:
        body = await _json_fields(request, ("slot", "key", *CONTROL_KEYS))
        slot, key, controls = _text(body, "slot", "1"), _text(body, "key"), _controls(body)
        if key not in state.images:
            raise KeyError(f"no image {key!r}: upload it again (the server may have restarted)")
        card = state.detect(slot, key, controls)
        split_of = (data_choice, browser.root, browser.split) if state.images[key].truth and browser else None
        card["commands"] = reproduce_commands(
            state.model(slot), card["settings"], state.images[key].path, split_of
        )
        return card

    @app.get("/api/image/{key:path}")
    def image(key: str) -> Response:
        served = state.images[key]
        source = load_source(served.path, VIEW_LONG_SIDE)
        jpeg = encode_image(source.image, ".jpg", served.name, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        return Response(jpeg, media_type="image/jpeg")

    @app.get("/api/prob/{slot}/{key:path}")
    def probability(slot: str, key: str) -> Response:
        return Response(state.probability_png(slot, key), media_type="image/png")

    @app.post("/api/model")
    async def load_model(request: Request) -> dict[str, Any]:
        body = await _json_fields(request, ("slot", "path"))
        slot, requested = _text(body, "slot", ""), _text(body, "path", "").strip()
        if slot not in ("1", "2"):
            raise RequestError(f"slot: expected '1' or '2', got {slot!r}")
        if not requested:
            raise RequestError("path: expected the path of a .ckpt or .onnx file on the server, got nothing")
        path = model_files.resolve(requested)
        key = "onnx_model" if path.endswith(".onnx") else ("ckpt" if slot == "1" else "ckpt2")
        try:
            model = loader(key, path)  # raises a constructor's UsageError unwrapped
        except UsageError:
            raise
        except Exception as exc:
            raise CheckpointError(f"{key}={path}: could not be loaded ({type(exc).__name__}: {exc})") from exc
        state.set_model(slot, model)
        return {"models": _models(state)}

    return app
