"""Optimizer models, as ONNX Runtime's onnxblock.optim."""
from .optim import SGD, AdamW, ClipGradNorm

__all__ = ["SGD", "AdamW", "ClipGradNorm"]
