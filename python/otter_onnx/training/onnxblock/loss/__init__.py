"""Loss blocks, as ONNX Runtime's onnxblock.loss."""
from .loss import BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss

__all__ = ["BCEWithLogitsLoss", "CrossEntropyLoss", "L1Loss", "MSELoss"]
