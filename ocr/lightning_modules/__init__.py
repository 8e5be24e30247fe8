"""LightningModule and callbacks."""
