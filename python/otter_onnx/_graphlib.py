"""libotter's model-editing, checking, printing and running functions through ctypes, for otter_onnx.graph
and otter_onnx.training.onnxblock. Models cross the boundary as serialized ONNX bytes: every call loads
them into an otter_model, lets libotter do the work and serializes the result back."""
import ctypes
import ctypes.util
import os

import numpy as np


class OtterError(RuntimeError):
    """A libotter call failed; the message is otter_last_error()'s."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


MAX_RANK = 16  # OTTER_MAX_RANK
# otter_dtype numbers are ONNX's TensorProto.DataType numbers.
NUMPY_OF_DTYPE = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
                  9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}
DTYPE_OF_NUMPY = {np.dtype(t): d for d, t in NUMPY_OF_DTYPE.items()}


class _Tensor(ctypes.Structure):  # include/otter/tensor.h: otter_tensor
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("dims", ctypes.c_int64 * MAX_RANK), ("data", ctypes.c_void_p), ("owns_data", ctypes.c_bool),
                ("extra", ctypes.c_void_p)]


class _ModelHead(ctypes.Structure):  # include/otter/ir.h: otter_model, up to its graph
    _fields_ = [("has_ir_version", ctypes.c_bool), ("has_model_version", ctypes.c_bool),
                ("ir_version", ctypes.c_int64), ("model_version", ctypes.c_int64),
                ("producer_name", ctypes.c_char_p), ("producer_version", ctypes.c_char_p),
                ("domain", ctypes.c_char_p), ("doc_string", ctypes.c_char_p),
                ("n_opsets", ctypes.c_size_t), ("n_metadata", ctypes.c_size_t),
                ("opsets", ctypes.c_void_p), ("metadata", ctypes.c_void_p), ("graph", ctypes.c_void_p)]


class _CleanStats(ctypes.Structure):  # include/otter/edit.h
    _fields_ = [("nodes_removed", ctypes.c_size_t), ("initializers_deduplicated", ctypes.c_size_t),
                ("initializers_removed", ctypes.c_size_t), ("value_info_removed", ctypes.c_size_t)]


class _CheckOptions(ctypes.Structure):  # include/otter/check.h
    _fields_ = [("full_check", ctypes.c_bool), ("stop_at_first", ctypes.c_bool), ("report", ctypes.c_void_p),
                ("callback", ctypes.c_void_p), ("callback_user", ctypes.c_void_p)]


class _DotOptions(ctypes.Structure):  # include/otter/print.h
    _fields_ = [("hide_initializers", ctypes.c_bool), ("rankdir", ctypes.c_char_p)]


class _Wire(ctypes.Structure):  # include/otter/edit.h
    _fields_ = [("a_output", ctypes.c_char_p), ("b_input", ctypes.c_char_p)]


class _MergeOptions(ctypes.Structure):  # include/otter/edit.h
    _fields_ = [("prefix_a", ctypes.c_char_p), ("prefix_b", ctypes.c_char_p), ("keep_a_outputs", ctypes.c_bool),
                ("graph_name", ctypes.c_char_p)]


class _OpInfo(ctypes.Structure):  # include/otter/ops.h
    _fields_ = [("domain", ctypes.c_char_p), ("op_type", ctypes.c_char_p), ("since_versions", ctypes.c_int * 16),
                ("n_since_versions", ctypes.c_size_t), ("kernel", ctypes.c_bool),
                ("shape_inference", ctypes.c_bool), ("gradient", ctypes.c_bool), ("note", ctypes.c_char_p)]


_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_S = ctypes.c_char_p
_SIGNATURES = {
    "otter_last_error": ([], _S),
    "otter_free": ([_P], None),
    "otter_model_load_from_memory": ([_PP, _P, ctypes.c_size_t, _S], ctypes.c_int),
    "otter_model_save_to_memory": ([_P, _PP, ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "otter_model_free": ([_P], None),
    "otter_graph_clean": ([_P, ctypes.POINTER(_CleanStats)], ctypes.c_int),
    "otter_check_report_create": ([_PP], ctypes.c_int),
    "otter_check_report_free": ([_P], None),
    "otter_check_report_count": ([_P], ctypes.c_size_t),
    "otter_check_report_message": ([_P, ctypes.c_size_t], _S),
    "otter_model_check": ([_P, ctypes.POINTER(_CheckOptions)], ctypes.c_int),
    "otter_graph_to_dot": ([_P, ctypes.POINTER(_DotOptions), _PP], ctypes.c_int),
    "otter_model_merge": ([_PP, _P, _P, ctypes.POINTER(_Wire), ctypes.c_size_t, ctypes.POINTER(_MergeOptions)],
                          ctypes.c_int),
    "otter_dtype_list": ([ctypes.POINTER(ctypes.c_size_t)], ctypes.POINTER(ctypes.c_int)),
    "otter_ops_count": ([], ctypes.c_size_t),
    "otter_ops_get": ([ctypes.c_size_t, ctypes.POINTER(_OpInfo)], ctypes.c_int),
    "otter_session_create_from_memory": ([_PP, _P, ctypes.c_size_t, _P], ctypes.c_int),
    "otter_session_free": ([_P], None),
    "otter_session_output_count": ([_P], ctypes.c_size_t),
    "otter_session_output_name": ([_P, ctypes.c_size_t], _S),
    "otter_session_run": ([_P, ctypes.c_size_t, ctypes.POINTER(_S), ctypes.POINTER(ctypes.POINTER(_Tensor)),
                           ctypes.c_size_t, ctypes.POINTER(_S), ctypes.POINTER(ctypes.POINTER(_Tensor))],
                          ctypes.c_int),
    "otter_tensor_from_data": ([ctypes.POINTER(ctypes.POINTER(_Tensor)), _S, ctypes.c_int, ctypes.c_int,
                                ctypes.POINTER(ctypes.c_int64), _P], ctypes.c_int),
    "otter_tensor_nbytes": ([ctypes.POINTER(_Tensor)], ctypes.c_size_t),
    "otter_tensor_free": ([ctypes.POINTER(_Tensor)], None),
}


def _library_path():
    """OTTER_LIB, else libotter.so of the build tree this package sits in, else the installed one."""
    if os.environ.get("OTTER_LIB"):
        return os.environ["OTTER_LIB"]
    here = os.path.dirname(os.path.abspath(__file__))
    for build in ("build/release", "build"):
        candidate = os.path.join(here, "..", "..", build, "libotter.so")
        if os.path.exists(candidate):
            return candidate
    found = ctypes.util.find_library("otter")
    if not found:
        raise OSError("libotter not found: build it, install it, or set OTTER_LIB to libotter.so's path")
    return found


_lib = None


def lib():
    """libotter, loaded on first use, with the signatures this module calls."""
    global _lib
    if _lib is None:
        loaded = ctypes.CDLL(_library_path())
        for name, (args, res) in _SIGNATURES.items():
            fn = getattr(loaded, name)
            fn.argtypes, fn.restype = args, res
        _lib = loaded
    return _lib


def check_status(status, what):
    """Raises OtterError with otter's message when status is not OTTER_OK."""
    if status != 0:
        message = lib().otter_last_error().decode(errors="replace")
        raise OtterError(status, f"{what}: {message}" if message else what)


class Model:
    """An otter_model loaded from ONNX bytes; frees it when closed (use with `with`)."""

    def __init__(self, data, handle=None):
        self.handle = handle
        if handle is None:
            ptr = ctypes.c_void_p()
            check_status(lib().otter_model_load_from_memory(ctypes.byref(ptr), data, len(data), None),
                         "loading the model")
            self.handle = ptr

    def graph(self):
        return ctypes.cast(self.handle, ctypes.POINTER(_ModelHead)).contents.graph

    def to_bytes(self):
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        check_status(lib().otter_model_save_to_memory(self.handle, ctypes.byref(data), ctypes.byref(size)),
                     "serializing the model")
        try:
            return ctypes.string_at(data, size.value)
        finally:
            lib().otter_free(data)

    def close(self):
        if self.handle:
            lib().otter_model_free(self.handle)
            self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def clean(data):
    """otter_graph_clean on the model's graph; returns (new bytes, stats as a dict)."""
    with Model(data) as m:
        stats = _CleanStats()
        check_status(lib().otter_graph_clean(m.graph(), ctypes.byref(stats)), "cleaning the graph")
        return m.to_bytes(), {name: getattr(stats, name) for name, _ in _CleanStats._fields_}


def check(data, full_check=True):
    """Every problem otter_model_check finds (an empty list for a valid model)."""
    with Model(data) as m:
        report = ctypes.c_void_p()
        check_status(lib().otter_check_report_create(ctypes.byref(report)), "creating a check report")
        try:
            opts = _CheckOptions(full_check=full_check, report=report)
            status = lib().otter_model_check(m.handle, ctypes.byref(opts))
            if status not in (0, 1):  # 1: OTTER_ERR_INVALID, the model has problems
                check_status(status, "checking the model")
            count = lib().otter_check_report_count(report)
            return [lib().otter_check_report_message(report, i).decode(errors="replace") for i in range(count)]
        finally:
            lib().otter_check_report_free(report)


def to_dot(data, rankdir=None):
    """otter_graph_to_dot of the model's graph."""
    with Model(data) as m:
        out = ctypes.c_void_p()
        opts = _DotOptions(hide_initializers=False, rankdir=rankdir.encode() if rankdir else None)
        check_status(lib().otter_graph_to_dot(m.graph(), ctypes.byref(opts), ctypes.byref(out)), "drawing the graph")
        try:
            return ctypes.string_at(out).decode()
        finally:
            lib().otter_free(out)


def merge(data_a, data_b, wires, keep_a_outputs, graph_name=None):
    """otter_model_merge: A followed by B, each (a_output, b_input) wire connecting them."""
    arr = (_Wire * max(len(wires), 1))(*[_Wire(a.encode(), b.encode()) for a, b in wires])
    opts = _MergeOptions(keep_a_outputs=keep_a_outputs, graph_name=graph_name.encode() if graph_name else None)
    with Model(data_a) as a, Model(data_b) as b:
        out = ctypes.c_void_p()
        check_status(lib().otter_model_merge(ctypes.byref(out), a.handle, b.handle, arr, len(wires),
                                             ctypes.byref(opts)), "merging the graphs")
        with Model(None, out) as merged:
            return merged.to_bytes()


def dtypes():
    """The element types otter knows (ONNX's TensorProto.DataType numbers), in otter_dtype_list's order."""
    count = ctypes.c_size_t()
    types = lib().otter_dtype_list(ctypes.byref(count))
    return [types[i] for i in range(count.value)]


def operators():
    """(domain, op_type, since_versions, has kernel) of every operator in otter's registry."""
    result = []
    for i in range(lib().otter_ops_count()):
        info = _OpInfo()
        check_status(lib().otter_ops_get(i, ctypes.byref(info)), "reading the operator registry")
        result.append((info.domain.decode(), info.op_type.decode(),
                       list(info.since_versions[:info.n_since_versions]), info.kernel))
    return result


def _tensor_from_array(name, array):
    array = np.ascontiguousarray(array)
    if array.dtype not in DTYPE_OF_NUMPY:
        raise TypeError(f"input '{name}': numpy dtype {array.dtype} has no otter element type")
    if array.ndim > MAX_RANK:
        raise ValueError(f"input '{name}': rank {array.ndim} is above otter's {MAX_RANK}")
    dims = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
    out = ctypes.POINTER(_Tensor)()
    check_status(lib().otter_tensor_from_data(ctypes.byref(out), name.encode(), DTYPE_OF_NUMPY[array.dtype],
                                              array.ndim, dims, array.ctypes.data), f"input '{name}'")
    return out


def _array_from_tensor(tensor):
    t = tensor.contents
    if t.dtype not in NUMPY_OF_DTYPE:
        raise TypeError(f"output '{t.name.decode() if t.name else ''}': element type {t.dtype} has no numpy dtype")
    shape = tuple(t.dims[:t.rank])
    nbytes = lib().otter_tensor_nbytes(tensor)
    raw = ctypes.string_at(t.data, nbytes) if nbytes else b""
    return np.frombuffer(raw, dtype=NUMPY_OF_DTYPE[t.dtype]).reshape(shape).copy()


def run(data, feeds, output_names=None):
    """Runs the model once on feeds ({name: numpy array}); returns the outputs (all when output_names is
    None) as numpy arrays, in order."""
    session = ctypes.c_void_p()
    check_status(lib().otter_session_create_from_memory(ctypes.byref(session), data, len(data), None),
                 "creating the session")
    inputs = []
    try:
        if output_names is None:
            output_names = [lib().otter_session_output_name(session, i).decode()
                            for i in range(lib().otter_session_output_count(session))]
        inputs = [_tensor_from_array(name, value) for name, value in feeds.items()]
        in_names = (ctypes.c_char_p * max(len(inputs), 1))(*[n.encode() for n in feeds])
        in_arr = (ctypes.POINTER(_Tensor) * max(len(inputs), 1))(*inputs)
        out_names = (ctypes.c_char_p * max(len(output_names), 1))(*[n.encode() for n in output_names])
        outputs = (ctypes.POINTER(_Tensor) * max(len(output_names), 1))()
        status = lib().otter_session_run(session, len(inputs), in_names, in_arr, len(output_names), out_names,
                                         outputs)
        try:
            check_status(status, "running the model")
            return [_array_from_tensor(outputs[i]) for i in range(len(output_names))]
        finally:
            for i in range(len(output_names)):
                if outputs[i]:
                    lib().otter_tensor_free(outputs[i])
    finally:
        for t in inputs:
            lib().otter_tensor_free(t)
        lib().otter_session_free(session)


class _ArtifactsOptions(ctypes.Structure):  # include/otter/artifacts.h: otter_artifacts_options
    _fields_ = [("n_requires_grad", ctypes.c_size_t), ("requires_grad", ctypes.POINTER(_S)),
                ("n_frozen", ctypes.c_size_t), ("frozen", ctypes.POINTER(_S)),
                ("loss", ctypes.c_int), ("reduction", ctypes.c_int),
                ("ce_weight", ctypes.c_void_p), ("n_ce_weight", ctypes.c_size_t),
                ("has_ignore_index", ctypes.c_bool), ("ignore_index", ctypes.c_int64),
                ("pos_weight", ctypes.c_void_p), ("n_pos_weight", ctypes.c_size_t),
                ("custom_loss", ctypes.c_void_p), ("custom_loss_user", ctypes.c_void_p),
                ("n_loss_inputs", ctypes.c_size_t), ("loss_inputs", ctypes.POINTER(_S)),
                ("n_additional_outputs", ctypes.c_size_t), ("additional_outputs", ctypes.POINTER(_S)),
                ("optimizer", ctypes.c_int), ("adamw_set", ctypes.c_bool),
                ("beta1", ctypes.c_float), ("beta2", ctypes.c_float), ("epsilon", ctypes.c_float),
                ("weight_decay", ctypes.c_float), ("correct_bias", ctypes.c_int64), ("adam_mode", ctypes.c_int64),
                ("bn_unbiased_running_var", ctypes.c_bool), ("prefix", _S), ("nominal_checkpoint", ctypes.c_bool)]


class _Artifacts(ctypes.Structure):  # include/otter/artifacts.h: otter_artifacts
    _fields_ = [("training", ctypes.c_void_p), ("eval", ctypes.c_void_p), ("optimizer", ctypes.c_void_p),
                ("checkpoint", ctypes.c_void_p), ("nominal", ctypes.c_void_p),
                ("n_trainable", ctypes.c_size_t), ("n_frozen", ctypes.c_size_t),
                ("trainable", ctypes.POINTER(_S)), ("frozen", ctypes.POINTER(_S)),
                ("n_bn_frozen", ctypes.c_size_t), ("generation", ctypes.c_char * 33)]


OPTIMIZERS = {"AdamW": 0, "SGD": 1, None: 2}  # otter_optimizer_kind
_SIGNATURES.update({
    "otter_artifacts_build": ([ctypes.POINTER(_Artifacts), _P, ctypes.POINTER(_ArtifactsOptions)], ctypes.c_int),
    "otter_artifacts_write": ([ctypes.POINTER(_Artifacts), _S, ctypes.POINTER(_ArtifactsOptions)], ctypes.c_int),
    "otter_artifacts_free": ([ctypes.POINTER(_Artifacts)], None),
})


def _strings(names):
    return (_S * max(len(names), 1))(*[n.encode() for n in names])


def training_models(data, requires_grad, frozen, optimizer=None, directory=None, prefix=""):
    """otter_artifacts_build on a model whose first output is the loss (loss kind none): returns the
    training and eval models as bytes and, with directory, writes the four artifacts there."""
    requires_grad, frozen = list(requires_grad), list(frozen)
    keep = (_strings(requires_grad), _strings(frozen))  # alive until the call returns
    opts = _ArtifactsOptions(n_requires_grad=len(requires_grad), requires_grad=keep[0], n_frozen=len(frozen),
                             frozen=keep[1], loss=0, optimizer=OPTIMIZERS[optimizer],
                             prefix=prefix.encode() if prefix else None)
    made = _Artifacts()
    with Model(data) as m:
        check_status(lib().otter_artifacts_build(ctypes.byref(made), m.handle, ctypes.byref(opts)),
                     "building the training model")
    try:
        if directory is not None:
            check_status(lib().otter_artifacts_write(ctypes.byref(made), directory.encode(), ctypes.byref(opts)),
                         f"writing the artifacts to {directory}")
        return Model(None, made.training).to_bytes(), Model(None, made.eval).to_bytes()
    finally:
        lib().otter_artifacts_free(ctypes.byref(made))
