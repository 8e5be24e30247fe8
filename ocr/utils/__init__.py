"""Small shared helpers: atomic IO, errors, the run folder, the CUDA fault path, lazy wandb, runners."""
