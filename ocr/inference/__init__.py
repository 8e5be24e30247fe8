"""Inference outside training: ONNX export with a parity check, and prediction with ONNX Runtime."""
