"""The peer detector for scripts/benchmark_predict.py: rapidocr's text detection, run by the PEER's Python.

    /path/to/peer-venv/bin/python scripts/peer_rapidocr.py <file with one image path per line>

Imports nothing of the project. Detection only, rapidocr's defaults; a warm-up, then per stdin line
``pass`` (every image once; one JSON line ``{"seconds", "images", "polygons": {name: [[x, y, ...]]}}``)
or ``quit``.
"""

from __future__ import annotations

import json
import sys
import time
from importlib import metadata
from pathlib import Path


def detect(engine: object, path: str) -> list[list[float]]:
    """The engine's text boxes of the image at ``path``, each flattened to ``[x1, y1, x2, y2, ...]``."""
    result = engine(path, use_det=True, use_cls=False, use_rec=False)  # type: ignore[operator]
    boxes = getattr(result, "boxes", None)
    if boxes is None:
        return []
    return [[float(v) for point in box for v in point] for box in boxes]


def main() -> None:
    from rapidocr import RapidOCR  # the peer's environment

    paths = [line for line in Path(sys.argv[1]).read_text().splitlines() if line]
    engine = RapidOCR()
    detect(engine, paths[0])  # warm-up: the session is made on the first call
    try:
        version = metadata.version("rapidocr")
    except metadata.PackageNotFoundError:
        version = "unknown"
    print(json.dumps({"ready": True, "rapidocr": version, "python": sys.version.split()[0]}), flush=True)
    for command in sys.stdin:
        if command.strip() == "quit":
            return
        if command.strip() != "pass":
            print(json.dumps({"error": f"unknown command {command.strip()!r}"}), flush=True)
            continue
        polygons = {}
        start = time.perf_counter()
        for path in paths:
            polygons[Path(path).name] = detect(engine, path)
        seconds = time.perf_counter() - start
        print(json.dumps({"seconds": seconds, "images": len(paths), "polygons": polygons}), flush=True)


if __name__ == "__main__":
    main()
