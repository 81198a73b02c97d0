"""Model formats besides PyTorch modules that uniorch takes in (ONNX)."""
