"""Small shared helpers: atomic IO, hardware detection, lazy wandb, runner plumbing."""
