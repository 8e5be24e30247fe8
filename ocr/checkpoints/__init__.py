"""Checkpoints: written, read, upgraded, started from (``model.init_from``) and resumed; how a run starts."""
