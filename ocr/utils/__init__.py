"""Small shared helpers: atomic IO, logging, hardware detection, lazy wandb."""
