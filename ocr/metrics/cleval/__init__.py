"""CLEval: ``options`` (the scoring record), ``evaluate`` (per image and dataset), its geometry and matching
modules, the competition scorer's rules (``competition``) and the torchmetrics wrapper (``metric``)."""
