"""The machine a run trains on: its facts, the checks whether it can train, the choices it decides."""
