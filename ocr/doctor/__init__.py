"""The doctor: environment report, preflight checks and smoke convolutions (``python -m ocr.doctor``)."""
