"""The model the blocks build into: onnxblock.base(model) and onnxblock.empty_base(), as ONNX Runtime's."""
import copy
from contextlib import contextmanager

import onnx


class ModelAccessor:
    """Holds the onnx.ModelProto the blocks edit while a base context is open."""

    def __init__(self, model):
        self._model = model

    @property
    def model(self):
        return self._model


_GLOBAL_ACCESSOR = None


def current_model():
    """The model of the open base context (RuntimeError outside one)."""
    if _GLOBAL_ACCESSOR is None:
        raise RuntimeError("no base model: build blocks inside `with onnxblock.base(model):` or "
                           "`with onnxblock.empty_base():`")
    return _GLOBAL_ACCESSOR.model


@contextmanager
def _open(model):
    global _GLOBAL_ACCESSOR
    if _GLOBAL_ACCESSOR is not None:
        raise RuntimeError("a base model is already open: onnxblock contexts do not nest")
    _GLOBAL_ACCESSOR = ModelAccessor(model)
    try:
        yield _GLOBAL_ACCESSOR
    finally:
        _GLOBAL_ACCESSOR = None


def base(model):
    """Context in which blocks build on a copy of model (accessor.model is the edited copy)."""
    if model is None:
        raise RuntimeError("the base model is None: use onnxblock.empty_base() to build from scratch")
    return _open(copy.deepcopy(model))


def empty_base(opset_version=None):
    """Context in which blocks build a new model (default domain at opset_version, onnx's latest by default)."""
    model = onnx.ModelProto(ir_version=onnx.IR_VERSION, producer_name="otter_onnx")
    model.graph.name = "graph"
    model.opset_import.extend([onnx.helper.make_opsetid("com.microsoft", 1),
                               onnx.helper.make_opsetid("", opset_version or onnx.defs.onnx_opset_version())])
    return _open(model)


def custom_op_library(path):
    """ONNX Runtime loads custom operator libraries here; otter has no custom operators."""
    raise NotImplementedError(f"custom_op_library({path!r}): otter does not load custom operator libraries")
