"""Validation, test and predict after the network: the maps made small on the device, then per-image
post-processing and CLEval matching in a worker pool, overlapped with the next batch's network pass, with
outcomes in batch order (``pipeline.EvalPipeline``)."""
