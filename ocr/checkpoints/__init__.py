"""Checkpoints: written, read, started from (``model.init_from``) and resumed; how a run starts."""
