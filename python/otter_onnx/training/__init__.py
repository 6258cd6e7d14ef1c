"""ONNX Runtime's onnxruntime.training API over libotter: artifacts, api, onnxblock."""
