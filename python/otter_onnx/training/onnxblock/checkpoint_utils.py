"""save_checkpoint, as ONNX Runtime's onnxblock.save_checkpoint: parameters (a TrainingBlock's) into an ORT
checkpoint file, through libotter's checkpoint writer."""
import ctypes
import os

from ... import _lib
from ..api import _SaveOptions

_P = ctypes.c_void_p
_TRAINABLE, _FROZEN = 0, 1  # otter_param_kind


def _c():
    _lib.declare("otter_checkpoint_create", ctypes.c_int, [ctypes.POINTER(_P)])
    _lib.declare("otter_checkpoint_free", None, [_P])
    _lib.declare("otter_checkpoint_add_param", ctypes.c_int, [_P, ctypes.c_int, _lib.TP])
    _lib.declare("otter_checkpoint_set_nominal", ctypes.c_int, [_P, ctypes.c_bool])
    _lib.declare("otter_checkpoint_save", ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(_SaveOptions)])
    return _lib.lib()


def save_checkpoint(parameters, path_to_checkpoint, nominal_checkpoint=False):
    """Writes (trainable, frozen), two lists of onnx.TensorProto, as a checkpoint in their order (as ONNX
    Runtime's tool does); nominal_checkpoint keeps types and shapes only."""
    from onnx import numpy_helper

    trainable, frozen = parameters
    c = _c()
    state = _P()
    _lib.check(c.otter_checkpoint_create(ctypes.byref(state)), "save_checkpoint")
    try:
        for kind, tensors in ((_TRAINABLE, trainable), (_FROZEN, frozen)):
            for proto in tensors:
                t = _lib.tensor_from_array(numpy_helper.to_array(proto), proto.name)
                try:
                    _lib.check(c.otter_checkpoint_add_param(state, kind, t), f"save_checkpoint: '{proto.name}'")
                finally:
                    c.otter_tensor_free(t)
        if nominal_checkpoint:
            _lib.check(c.otter_checkpoint_set_nominal(state, True), "save_checkpoint")
        opts = _SaveOptions(version=0, keep_order=True)
        _lib.check(c.otter_checkpoint_save(state, os.fsencode(path_to_checkpoint), ctypes.byref(opts)),
                   "save_checkpoint")
    finally:
        c.otter_checkpoint_free(state)
