"""Data pipeline: annotation I/O, image decode, sanitation, transforms, targets, datasets."""
