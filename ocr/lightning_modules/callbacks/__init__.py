"""Training callbacks: checkpoints, run status, crash triage."""
