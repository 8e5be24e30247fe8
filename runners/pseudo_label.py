"""Pseudo-label unlabelled images with a teacher checkpoint, as a dataset training can read.

uv run runners/pseudo_label.py ckpt=<teacher .ckpt> image_dir=<unlabelled images> [output=<dataset>]
    [pseudo.text_score=0.7] [pseudo.ignore_score=0.4] [split=train] [images=link|copy|none] [overwrite=false]

Predicts as ``runners/predict.py`` does, keeping every candidate (no ``box_thresh``): a score from
``pseudo.text_score`` up is text, from ``pseudo.ignore_score`` up don't-care, lower is dropped. Writes
``<output>/jsons/<split>.json``, ``<output>/images/<split>/`` and ``<output>/pseudo_labels.json``; an
existing dataset is replaced only with ``overwrite=true`` (its annotations kept as ``.bak``). Train on it
with ``data.extra_train_roots=[<output>]``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ocr.machine.hardware import register_resolvers
from ocr.run.entry import entry, load_runner, quiet_third_party, save_config

register_resolvers()
quiet_third_party()
log = logging.getLogger(__name__)


def keep_every_candidate(cfg: DictConfig) -> None:
    """``postprocess.box_thresh=0`` and its other score floors 0: the post-processor returns every candidate
    with its score, so the pseudo thresholds alone decide and the dropped detections can be counted."""
    if cfg.postprocess.box_thresh != 0:
        log.info(
            "postprocess.box_thresh=0 (was %s): pseudo.ignore_score=%s decides which detections are kept",
            cfg.postprocess.box_thresh,
            cfg.pseudo.ignore_score,
        )
    cfg.postprocess.box_thresh = 0.0
    cfg.postprocess.relative_box_thresh = 0.0
    cfg.postprocess.small_box_thresh = 0.0


@entry("pseudo_label")
def pseudo_label(cfg: DictConfig) -> dict[str, Any]:
    """Predict ``image_dir`` and write the pseudo-labelled dataset; returns the summary (empty on ranks
    other than 0)."""
    from ocr.data.pseudo_labels import (
        PseudoThresholds,
        back_up,
        decoded_sizes,
        pseudo_records,
        refuse_unsafe_output,
    )

    directory = Path(cfg.paths.output_dir)
    out = Path(cfg.output) if cfg.output is not None else directory
    refuse_unsafe_output(out, cfg.image_dir, cfg.ckpt, cfg.overwrite)  # before Lightning is even imported
    from ocr.data.annotations import save_annotations
    from ocr.data.layout import place_images
    from ocr.lightning_modules.prediction_io import gather_predictions
    from ocr.utils.io import atomic_write_json

    thresholds = PseudoThresholds(float(cfg.pseudo.text_score), float(cfg.pseudo.ignore_score))
    datamodule, module, trainer = load_runner("predict").prepare(cfg, keep_every_candidate)
    save_config(cfg, directory)
    trainer.predict(module, datamodule=datamodule, return_predictions=False)
    predictions = gather_predictions(module.pipeline.predictions)
    if predictions is None:
        return {}
    dataset = datamodule.datasets["predict"]
    sizes = decoded_sizes(dataset.image_dir, dataset.files, dataset.source_long_side)
    records, counts = pseudo_records(predictions, sizes, thresholds)
    backup = back_up(out / "jsons" / f"{cfg.split}.json")  # only with overwrite=true: else refused above
    annotations = save_annotations(out / "jsons" / f"{cfg.split}.json", records)
    place_images(list(records), cfg.image_dir, out / "images" / cfg.split, cfg.images)
    summary = {
        "ckpt": str(cfg.ckpt),
        "image_dir": str(cfg.image_dir),
        "annotations": str(annotations),
        "backup": str(backup) if backup is not None else None,
        "images_layout": cfg.images,
        "thresholds": {
            "text_score": thresholds.text_score,
            "ignore_score": thresholds.ignore_score,
            "postprocess.thresh": float(cfg.postprocess.thresh),
        },
        "counts": counts.as_dict(),
    }
    atomic_write_json(out / "pseudo_labels.json", summary)
    log.info(
        "Pseudo-labels (text_score=%s, ignore_score=%s): %d images (%d unreadable, left out; %d without "
        "text), %d text boxes, %d don't-care boxes, %d dropped -> %s",
        thresholds.text_score,
        thresholds.ignore_score,
        counts.images,
        counts.unreadable,
        counts.images_without_text,
        counts.text,
        counts.ignored,
        counts.dropped,
        annotations,
    )
    if cfg.images != "none":
        print(f"Dataset: {out} (train beside the labelled set: data.extra_train_roots=[{out}])")
    print(f"Run directory: {directory}")
    return summary


if __name__ == "__main__":
    pseudo_label.main()
