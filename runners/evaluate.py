"""Score a submission CSV or predictions JSON against an annotation file with CLEval.

    uv run runners/evaluate.py gt=data/generated/synthetic_basic_word_512/jsons/test.json \
        pred=outputs/predict/<run>/submission.csv [mode=upstream] [out_dir=...]

The last stdout line is ``{"precision": ..., "recall": ..., "hmean": ..., "num_images": ...}``; per-image
results go to ``cleval_per_image.csv`` in the run directory (or ``out_dir=``). Prediction names match GT
names exactly, or else after stripping folders (logged); files with no name in common are an error.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig

from ocr.machine.hardware import register_resolvers  # torch-free at import; hydra.run.dir uses ${first_set:}
from ocr.metrics.files import evaluate_files, worst_images, write_image_results
from ocr.run.entry import entry, quiet_third_party
from ocr.run.folder import writable_dir

register_resolvers()
quiet_third_party()
log = logging.getLogger(__name__)


@entry("evaluate", lightning=False)
def evaluate(cfg: DictConfig) -> dict[str, float]:
    """Score ``cfg.pred`` against ``cfg.gt``; returns the summary printed as JSON."""
    options = instantiate(cfg.metric)
    directory = Path(cfg.paths.output_dir)
    if cfg.out_dir is not None:
        directory = writable_dir(cfg.out_dir, "out_dir", create=True)
    names, result = evaluate_files(cfg.gt, cfg.pred, options, cfg.min_polygon_size)
    csv_path = write_image_results(directory / "cleval_per_image.csv", names, result.images)
    for name, image in worst_images(names, result.images, cfg.worst):
        log.info(
            "worst: %s hmean=%.4f precision=%.4f recall=%.4f (gt %d, det %d, split %d, merged %d)",
            name,
            image.hmean,
            image.precision,
            image.recall,
            image.num_gt,
            image.num_det,
            image.num_split,
            image.num_merged,
        )
    log.info("CLEval (%s mode) over %d images; per-image results: %s", options.mode, len(names), csv_path)
    summary = {
        "precision": result.precision,
        "recall": result.recall,
        "hmean": result.hmean,
        "num_images": len(names),
    }
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    evaluate.main()
