"""What the web app holds between requests: its models, its images and their probability maps.

The network runs once per (model, image); the map is kept (least recently used first out), so changing
the post-processing controls re-runs only :meth:`DBPostProcessor.image` on it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ocr.data.scan import load_source
from ocr.metrics.cleval.options import CLEvalOptions
from ocr.models.postprocess import DBPostProcessor
from ocr.reporting.collect import report_record
from ocr.reporting.html import image_card
from ocr.serve.images import ServedImage, UploadError, UploadSpool, store_upload
from ocr.serve.models import CONTROL_KEYS, ServedModel
from ocr.types import Geometry
from ocr.utils.visualize import colorize_map, encode_image

__all__ = ["CACHED_MAPS", "ServeState"]

CACHED_MAPS = 24  # (model, image) probability maps kept; a 1024 px map is 4 MiB

log = logging.getLogger(__name__)


class ServeState:
    """Models by slot (``"1"``, ``"2"``), ``errors`` of the slots that failed to load, images by key,
    cached maps; ``options`` score images with labels."""

    def __init__(
        self,
        models: Mapping[str, ServedModel],
        errors: Mapping[str, str],
        upload_dir: Path,
        options: CLEvalOptions,
    ) -> None:
        self.models = dict(models)
        self.errors = dict(errors)
        self.upload_dir = upload_dir
        self.options = options
        self.images: dict[str, ServedImage] = {}
        self._maps: OrderedDict[tuple[str, str], tuple[npt.NDArray[np.float32], Geometry]] = OrderedDict()
        self._network_lock = threading.Lock()  # one forward pass at a time: the CPU has few cores
        self._maps_lock = threading.Lock()  # requests and the split's scoring thread share the cache

    def add_upload(self, spool: UploadSpool) -> str:
        """Store a received upload (see :func:`store_upload`); returns its key."""
        key, image = store_upload(spool, self.upload_dir)
        self.images[key] = image
        log.info("Upload %s (%d x %d px) stored as %s", image.name, image.width, image.height, image.path)
        return key

    def set_model(self, slot: str, model: ServedModel) -> None:
        """Serve ``model`` in ``slot`` from now on (its cached maps dropped)."""
        self.models[slot] = model
        self.errors.pop(slot, None)
        with self._maps_lock:
            for cached in [k for k in self._maps if k[0] == slot]:
                del self._maps[cached]

    def model(self, slot: str) -> ServedModel:
        """The model in ``slot`` (KeyError says why when there is none)."""
        if slot not in self.models:
            raise KeyError(self.errors.get(slot, f"no model in slot {slot!r}"))
        return self.models[slot]

    def probability_map(self, slot: str, key: str) -> tuple[npt.NDArray[np.float32], Geometry, float]:
        """The (H, W) probability map of image ``key`` under model ``slot`` (cached), its geometry, and the
        seconds the network took (0 when cached)."""
        with self._maps_lock:
            cached = self._maps.get((slot, key))
            if cached is not None:
                self._maps.move_to_end((slot, key))
                return (*cached, 0.0)
        model, image = self.model(slot), self.images[key]
        try:
            source = load_source(image.path, model.transform.source_long_side)
        except OSError as exc:  # ImageReadError: a file whose header was fine but whose data is not
            raise UploadError(f"{image.name}: {str(exc).removeprefix(f'{image.path}: ')}") from None
        with self._network_lock:
            started = time.perf_counter()
            prob_map, geometry = model.probability_map(source)
            seconds = time.perf_counter() - started
        with self._maps_lock:
            self._maps[(slot, key)] = (prob_map, geometry)
            while len(self._maps) > CACHED_MAPS:
                self._maps.popitem(last=False)
        return prob_map, geometry, seconds

    def detect(self, slot: str, key: str, controls: Mapping[str, float]) -> dict[str, Any]:
        """Post-process image ``key``'s map under model ``slot`` with its settings and ``controls``: the
        report's card (polygons in original px, scores, CLEval when labelled) and timings."""
        prob_map, geometry, network_seconds = self.probability_map(slot, key)
        model, image = self.models[slot], self.images[key]
        settings = {**model.postprocess, **{k: float(controls[k]) for k in CONTROL_KEYS if k in controls}}
        started = time.perf_counter()
        polygons, scores = postprocess(prob_map, geometry, settings)
        seconds = time.perf_counter() - started
        record = report_record(image.name, polygons, scores, image.truth)
        card, _ = image_card(0, record, self.options if image.truth is not None else None)
        card |= {
            "size": [geometry.orig_width, geometry.orig_height],
            "settings": settings,
            "network_ms": round(network_seconds * 1000, 1),
            "postprocess_ms": round(seconds * 1000, 1),
        }
        return card

    def probability_png(self, slot: str, key: str) -> bytes:
        """The probability map over the image's own area (the letterbox padding cut off) as a PNG."""
        prob_map, geometry, _ = self.probability_map(slot, key)
        scale = geometry.matrix[0, 0]  # original px per input px
        height = min(prob_map.shape[0], int(np.ceil(geometry.orig_height / scale)))
        width = min(prob_map.shape[1], int(np.ceil(geometry.orig_width / scale)))
        heat = colorize_map(prob_map[:height, :width])
        return encode_image(heat, ".png", f"{self.images[key].name}: probability map")


def postprocess(
    prob_map: npt.NDArray[np.float32], geometry: Geometry, settings: Mapping[str, Any]
) -> tuple[list[npt.NDArray[np.float32]], list[float]]:
    """The polygons (original px) and scores that ``runners/predict.py`` finds with ``settings``
    (``postprocess.*``) in a (H, W) probability map."""
    processor = DBPostProcessor(**{k: v for k, v in settings.items() if not k.startswith("_")})
    return processor.image(prob_map, prob_map > processor.thresh, geometry)
