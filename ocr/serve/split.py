"""Browse a labelled split: every image scored with CLEval by each served model, in a background thread,
and listed worst first (by the first model's hmean), as ``report.html`` ranks its cards.

The split is read by the data module as ``runners/test.py`` reads it (scan, sanitation, EXIF rule);
each image is then run through the app's own path (:meth:`ServeState.detect`), with each model's stored
post-processing.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from ocr.evaluation.host_work import GroundTruth
from ocr.serve.images import ServedImage
from ocr.serve.state import ServeState

__all__ = ["SplitBrowser"]

log = logging.getLogger(__name__)


class SplitBrowser:
    """The images of split ``split`` of ``data_cfg.root``, registered in ``state`` as ``<split>/<file>``."""

    def __init__(self, state: ServeState, data_cfg: DictConfig, split: str) -> None:
        datamodule = instantiate(data_cfg, root=data_cfg.root, test_split=split, synthetic=None)
        datamodule.setup("test")
        dataset = datamodule.datasets["test"]
        self.state = state
        self.split = split
        self.root = str(data_cfg.root)
        self.keys: list[str] = []
        for entry in dataset.entries:
            key = f"{split}/{entry.file_name}"
            truth = GroundTruth(entry.polygons, entry.ignore, entry.texts)
            path = dataset.image_dir / entry.file_name
            state.images[key] = ServedImage(path, entry.file_name, entry.orig_width, entry.orig_height, truth)
            self.keys.append(key)
        self.rows: dict[str, dict[str, Any]] = {}
        self.failed: dict[str, str] = {}
        self._thread = threading.Thread(target=self._score_all, name="split-scoring", daemon=True)

    def start(self) -> None:
        """Score the split in the background; :meth:`listing` shows what is done so far."""
        self._thread.start()

    def _score_all(self) -> None:
        for key in self.keys:
            row: dict[str, Any] = {"key": key, "name": self.state.images[key].name}
            try:
                for slot in sorted(self.state.models):
                    card = self.state.detect(slot, key, {})
                    row[slot] = {name: card[name] for name in ("hmean", "precision", "recall", "counts")}
            except (OSError, ValueError, KeyError) as exc:
                log.error("split %s: %s could not be scored: %s", self.split, key, exc)
                self.failed[key] = str(exc)
                continue
            self.rows[key] = row
        log.info("split %s: %d images scored, %d failed", self.split, len(self.rows), len(self.failed))

    def listing(self) -> dict[str, Any]:
        """The rows scored so far, worst first by the first model's hmean (then by name)."""
        rows = sorted(self.rows.values(), key=lambda r: (r["1"]["hmean"], r["name"]) if "1" in r else (0, ""))
        return {
            "split": self.split,
            "root": self.root,
            "total": len(self.keys),
            "scored": len(self.rows),
            "failed": self.failed,
            "rows": rows,
        }
