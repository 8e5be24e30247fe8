"""Score a checkpoint with CLEval on a labelled split; writes metrics.json and report.html to the run dir.

uv run runners/test.py ckpt=outputs/train/<run>/checkpoints/last.ckpt [split=val|test]
(pass the dataset the run was trained on, e.g. data=receipts data.root=...; the evaluation transform and
the post-processing come from the checkpoint unless given on the command line)
A post-processing sweep runs the network once per image (prob cache) and ends with a table:
uv run runners/test.py -m ckpt=... split=val postprocess.thresh=0.2,0.3 postprocess.box_thresh=0.5,0.6
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig

from ocr.machine.hardware import register_resolvers
from ocr.run.entry import entry, format_metrics, quiet_third_party, save_config
from ocr.utils.errors import ConfigValueError

register_resolvers()
quiet_third_party()
log = logging.getLogger(__name__)


@entry("test")
def evaluate(cfg: DictConfig) -> dict[str, float]:
    """Test (``split=test``) or validate (``split=val``) the checkpoint; returns the metrics."""
    from ocr.lightning_modules.prob_cache import open_prob_cache
    from ocr.lightning_modules.restore import checkpoint_settings, restore_for_inference
    from ocr.reporting.analysis import analyse_records, write_analysis
    from ocr.reporting.collect import attach_report_collector
    from ocr.reporting.html import write_report
    from ocr.utils.io import atomic_write_json

    if cfg.split not in ("val", "test"):
        raise ConfigValueError(f"split: expected 'val' or 'test', got {cfg.split!r}")
    checkpoint = checkpoint_settings(cfg, targets=True)
    directory = Path(cfg.paths.output_dir)
    save_config(cfg, directory)
    module, trainer = restore_for_inference(cfg, checkpoint)
    module.prob_cache = open_prob_cache(cfg, directory)
    collector = (
        attach_report_collector(module.pipeline, cfg.report.prob_long_side) if cfg.report.enabled else None
    )
    datamodule = instantiate(cfg.data)
    run = trainer.test if cfg.split == "test" else trainer.validate
    results = run(module, datamodule=datamodule)[0]
    writing_started = time.perf_counter()
    metrics = {k: float(v) for k, v in results.items()}
    if module.prob_cache is not None:
        log.info(module.prob_cache.summary())
    atomic_write_json(
        directory / "metrics.json", {"ckpt": str(cfg.ckpt), "split": cfg.split, "metrics": metrics}
    )
    title = f"CLEval on split '{cfg.split}' ({cfg.metric.mode} mode)"
    records = collector.records() if collector is not None else None
    if records is not None:
        image_dir = datamodule.datasets[cfg.split].image_dir
        options = module.test_metric.options
        analysis = analyse_records(records, options, list(cfg.report.height_buckets), cfg.report.worst)
        print(f"errors: {write_analysis(directory, analysis)}")
        page = write_report(directory, records, image_dir, options, f"{title}: {cfg.ckpt}", analysis)
        print(f"report: {page}")
    writing = time.perf_counter() - writing_started
    print(format_metrics(metrics, title))
    print(module.pipeline.times.summary(cfg.split, module.pipeline.workers, writing))
    print(f"Run directory: {directory}")
    return metrics


if __name__ == "__main__":
    evaluate.main()
