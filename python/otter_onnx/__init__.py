"""otter-onnx: ONNX Runtime's training Python API and sclblonnx over libotter."""
