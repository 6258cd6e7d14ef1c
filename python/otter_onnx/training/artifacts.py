"""onnxruntime.training.artifacts over otter_artifacts_build/_write (include/otter/artifacts.h)."""
import ctypes
import os
from enum import Enum

from .. import _lib as L


class LossType(Enum):
    MSELoss = 1
    CrossEntropyLoss = 2
    BCEWithLogitsLoss = 3
    L1Loss = 4


class OptimType(Enum):
    AdamW = 1
    SGD = 2


_LOSS_KIND = {None: 0, LossType.MSELoss: 1, LossType.CrossEntropyLoss: 2, LossType.BCEWithLogitsLoss: 3,
              LossType.L1Loss: 4}
_OPTIM_KIND = {OptimType.AdamW: 0, OptimType.SGD: 1, None: 2}

_NAMES = ctypes.POINTER(ctypes.c_char_p)


class _Options(ctypes.Structure):  # otter_artifacts_options
    _fields_ = [("n_requires_grad", ctypes.c_size_t), ("requires_grad", _NAMES),
                ("n_frozen", ctypes.c_size_t), ("frozen", _NAMES),
                ("loss", ctypes.c_int), ("reduction", ctypes.c_int),
                ("ce_weight", ctypes.POINTER(ctypes.c_float)), ("n_ce_weight", ctypes.c_size_t),
                ("has_ignore_index", ctypes.c_bool), ("ignore_index", ctypes.c_int64),
                ("pos_weight", ctypes.POINTER(ctypes.c_float)), ("n_pos_weight", ctypes.c_size_t),
                ("custom_loss", ctypes.c_void_p), ("custom_loss_user", ctypes.c_void_p),
                ("n_loss_inputs", ctypes.c_size_t), ("loss_inputs", _NAMES),
                ("n_additional_outputs", ctypes.c_size_t), ("additional_outputs", _NAMES),
                ("optimizer", ctypes.c_int), ("adamw_set", ctypes.c_bool),
                ("beta1", ctypes.c_float), ("beta2", ctypes.c_float), ("epsilon", ctypes.c_float),
                ("weight_decay", ctypes.c_float), ("correct_bias", ctypes.c_int64), ("adam_mode", ctypes.c_int64),
                ("bn_unbiased_running_var", ctypes.c_bool), ("prefix", ctypes.c_char_p),
                ("nominal_checkpoint", ctypes.c_bool)]


class _Artifacts(ctypes.Structure):  # otter_artifacts
    _fields_ = [("training", ctypes.c_void_p), ("eval", ctypes.c_void_p), ("optimizer", ctypes.c_void_p),
                ("checkpoint", ctypes.c_void_p), ("nominal", ctypes.c_void_p),
                ("n_trainable", ctypes.c_size_t), ("n_frozen", ctypes.c_size_t),
                ("trainable", _NAMES), ("frozen", _NAMES), ("n_bn_frozen", ctypes.c_size_t),
                ("generation", ctypes.c_char * 33)]


def _signatures():
    L.declare("otter_artifacts_adamw_defaults", None, [ctypes.POINTER(_Options)])
    L.declare("otter_artifacts_build", ctypes.c_int, [ctypes.POINTER(_Artifacts), ctypes.c_void_p,
                                                      ctypes.POINTER(_Options)])
    L.declare("otter_artifacts_write", ctypes.c_int, [ctypes.POINTER(_Artifacts), ctypes.c_char_p,
                                                      ctypes.POINTER(_Options)])
    L.declare("otter_artifacts_free", None, [ctypes.POINTER(_Artifacts)])


def _set_names(opts, count_field, field, names, keep):
    if names:
        arr = L.names_array(list(names))
        keep.append(arr)
        setattr(opts, count_field, len(names))
        setattr(opts, field, ctypes.cast(arr, _NAMES))


_FLOAT_TYPES = (1, 10, 11, 16)  # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _default_parameters(model, frozen_params):
    """(requires_grad, frozen_params) as otter_artifacts_build chooses them when requires_grad is not given: every
    float initializer not frozen is trained, BatchNormalization running statistics are frozen."""
    frozen = list(frozen_params or [])
    running = [n.input[i] for n in model.graph.node if n.op_type == "BatchNormalization" and n.domain in ("", "ai.onnx")
               for i in (3, 4) if i < len(n.input) and n.input[i]]
    frozen += [name for name in running if name not in frozen]
    trained = [t.name for t in model.graph.initializer if t.data_type in _FLOAT_TYPES and t.name not in frozen]
    return trained, frozen


def generate_artifacts(model, requires_grad=None, frozen_params=None, loss=None, optimizer=None,
                       artifact_directory=None, prefix="", ort_format=False, custom_op_library=None,
                       additional_output_names=None, nominal_checkpoint=False, loss_input_names=None):
    """Writes training_model.onnx, eval_model.onnx, optimizer_model.onnx (when optimizer is given) and checkpoint
    into artifact_directory (default: the current folder), names after prefix, as ONNX Runtime 1.19's tool does.

    model: an onnx.ModelProto, model bytes or a path. loss: a LossType, an onnxblock Block (stacked on the model's
    outputs by onnxblock.loss_model), or None (the model's first output is the loss). requires_grad None: every float
    initializer of the forward model not in frozen_params, BatchNormalization running statistics frozen (ONNX
    Runtime would train none)."""
    if ort_format:
        raise L.NotSupportedError("generate_artifacts: ort_format=True is not supported: otter reads and writes "
                                  "ONNX models only (leave ort_format False)")
    if custom_op_library is not None:
        raise L.NotSupportedError(f"generate_artifacts: custom_op_library {custom_op_library!r} is not supported: "
                                  "otter can't load ONNX Runtime custom operator libraries")
    if optimizer is not None and not isinstance(optimizer, OptimType):
        raise L.InvalidArgumentError(f"generate_artifacts: unknown optimizer {optimizer!r}; expected an OptimType")
    if loss is not None and not isinstance(loss, LossType):
        if not callable(loss):
            raise L.InvalidArgumentError(f"generate_artifacts: unknown loss {type(loss).__name__}; expected a "
                                         "LossType or an onnxblock Block")
        from .onnxblock import loss_model
        if isinstance(model, (str, os.PathLike)):
            import onnx
            model = onnx.load(model)
        if requires_grad is None:  # the forward model's weights, not the constants the loss block adds
            requires_grad, frozen_params = _default_parameters(model, frozen_params)
        model = loss_model(model, loss, loss_input_names)
        loss, loss_input_names = None, None
    _signatures()
    lib = L.lib()
    opts, keep = _Options(), []
    lib.otter_artifacts_adamw_defaults(ctypes.byref(opts))
    _set_names(opts, "n_requires_grad", "requires_grad", requires_grad, keep)
    _set_names(opts, "n_frozen", "frozen", frozen_params, keep)
    _set_names(opts, "n_loss_inputs", "loss_inputs", loss_input_names, keep)
    _set_names(opts, "n_additional_outputs", "additional_outputs", additional_output_names, keep)
    opts.loss = _LOSS_KIND[loss]
    opts.optimizer = _OPTIM_KIND[optimizer]
    opts.prefix = prefix.encode() if prefix else None
    opts.nominal_checkpoint = bool(nominal_checkpoint)
    directory = os.fspath(artifact_directory) if artifact_directory is not None else os.getcwd()
    handle = L.load_model(model)
    art = _Artifacts()
    try:
        L.check(lib.otter_artifacts_build(ctypes.byref(art), handle, ctypes.byref(opts)), "generate_artifacts")
        try:
            L.check(lib.otter_artifacts_write(ctypes.byref(art), os.fsencode(directory), ctypes.byref(opts)),
                    "generate_artifacts")
        finally:
            lib.otter_artifacts_free(ctypes.byref(art))
    finally:
        lib.otter_model_free(handle)
