"""DBNet network parts, post-processing and losses (see docs/architecture.md)."""
