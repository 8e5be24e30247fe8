"""CLEval, the project's own implementation (pure numpy + shapely), and its torchmetrics wrapper."""
