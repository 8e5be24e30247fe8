"""Scoring: CLEval in ``ocr.metrics.cleval`` and prediction files against annotations in ``files``."""
