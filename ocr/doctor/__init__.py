"""The doctor (``python -m ocr.doctor``): the machine's checks and environment report, smoke convolutions."""
