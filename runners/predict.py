"""Predict a folder of images: submission CSV (one row per image), predictions JSON, optional overlays.

uv run runners/predict.py ckpt=outputs/train/<run>/checkpoints/last.ckpt image_dir=path/to/images
"""

from __future__ import annotations

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from ocr.utils.hardware import register_resolvers
from ocr.utils.runner import quiet_third_party, run_dir, save_config, task_wrapper

register_resolvers()
quiet_third_party()


@task_wrapper
def predict(cfg: DictConfig) -> dict[str, str]:
    """Run the checkpoint over ``image_dir``; returns the paths written."""
    from ocr.lightning_modules.loading import restore_for_inference
    from ocr.lightning_modules.prediction_io import save_overlays, save_predictions

    directory = run_dir(cfg)
    save_config(cfg, directory)
    module, trainer = restore_for_inference(cfg, metric=None)
    # No synthetic generation when predicting; root is read first, as it may interpolate data.synthetic.
    datamodule = instantiate(cfg.data, root=cfg.data.root, predict_image_dir=cfg.image_dir, synthetic=None)
    predictions = [p for batch in trainer.predict(module, datamodule=datamodule) for p in batch]
    paths = save_predictions(predictions, directory)
    if cfg.overlays:
        paths["overlays"] = str(
            save_overlays(predictions, cfg.image_dir, directory / "overlays", cfg.max_overlays)
        )
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    print(f"Run directory: {directory}")
    return paths


@hydra.main(config_path="../configs", config_name="predict", version_base="1.3")
def main(cfg: DictConfig) -> None:
    predict(cfg)


if __name__ == "__main__":
    main()
