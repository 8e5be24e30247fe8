"""The local web app of ``runners/serve.py``: a checkpoint on any image, its post-processing tuned live,
a split browsed worst first. A tool on top of the library: nothing in training imports it."""
