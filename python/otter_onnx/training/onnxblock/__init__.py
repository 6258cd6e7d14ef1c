"""ONNX Runtime's onnxblock over libotter: `import otter_onnx.training.onnxblock as onnxblock` in place of
`import onnxruntime.training.onnxblock as onnxblock`."""
from . import blocks, loss, optim
from .blocks import Block
from .checkpoint_utils import save_checkpoint
from .model_accessor import base, custom_op_library, empty_base
from .onnxblock import ForwardBlock, TrainingBlock, loss_model

__all__ = ["Block", "ForwardBlock", "TrainingBlock", "base", "blocks", "custom_op_library", "empty_base",
           "loss", "loss_model", "optim", "save_checkpoint"]
