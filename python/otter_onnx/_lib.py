"""The one place that loads libotter: library lookup, the ctypes mirrors of otter's public structs, otter_status as
Python exceptions, numpy <-> otter_tensor and model bytes <-> onnx.ModelProto.

Everything else in otter_onnx calls the C API through `lib()` and `check()`; no other module declares a struct.
"""
import ctypes
import ctypes.util
import os
import threading

import numpy as np

# ---- errors ---------------------------------------------------------------------------------------------------


class OtterError(Exception):
    """Base of every error libotter reports; the message is otter_last_error() (it names the file, node or tensor
    at fault). `status` is the otter_status number."""

    status = None


class InvalidModelError(OtterError, ValueError):
    """OTTER_ERR_INVALID: a malformed or inconsistent model, tensor or file."""


class InvalidArgumentError(OtterError, ValueError):
    """OTTER_ERR_ARGUMENT: a bad argument."""


class OtterIOError(OtterError, OSError):
    """OTTER_ERR_IO: a file could not be read or written."""


class OtterMemoryError(OtterError, MemoryError):
    """OTTER_ERR_NOMEM: an allocation failed (or a memory budget was exceeded)."""


class NotSupportedError(OtterError, NotImplementedError):
    """OTTER_ERR_UNSUPPORTED: valid input that otter does not implement."""


class NotFoundError(OtterError, FileNotFoundError, KeyError):
    """OTTER_ERR_NOT_FOUND: a named node, tensor or file does not exist."""

    def __str__(self):  # KeyError would quote the message
        return Exception.__str__(self)


OK, ERR_INVALID, ERR_IO, ERR_NOMEM, ERR_UNSUPPORTED, ERR_ARGUMENT, ERR_NOT_FOUND = range(7)
_ERROR_OF_STATUS = {
    ERR_INVALID: InvalidModelError,
    ERR_IO: OtterIOError,
    ERR_NOMEM: OtterMemoryError,
    ERR_UNSUPPORTED: NotSupportedError,
    ERR_ARGUMENT: InvalidArgumentError,
    ERR_NOT_FOUND: NotFoundError,
}


def error(status, context=None):
    """The exception for an otter_status, carrying otter_last_error() (prefixed by context when given)."""
    msg = lib().otter_last_error().decode("utf-8", errors="replace")
    if not msg:
        msg = lib().otter_status_name(status).decode()
    if context:
        msg = f"{context}: {msg}"
    e = _ERROR_OF_STATUS.get(status, OtterError)(msg)
    e.status = status
    return e


def check(status, context=None):
    """Raises the matching OtterError unless status is OTTER_OK."""
    if status != OK:
        raise error(status, context)


# ---- the library ----------------------------------------------------------------------------------------------

_SONAMES = ("libotter.so.0", "libotter.so", "libotter.dylib", "otter.dll")


def _candidates():
    """Where libotter is looked for, in order: $OTTER_LIB (a file), the package's own folder, a build tree named by
    $OTTER_BINARY_DIR, then the loader's search path (the installed libotter.so.0)."""
    env = os.environ.get("OTTER_LIB")
    if env:
        yield env
        return  # an explicit choice: don't silently fall back to another library
    here = os.path.dirname(os.path.abspath(__file__))
    for folder in (here, os.environ.get("OTTER_BINARY_DIR")):
        if folder:
            for name in _SONAMES:
                path = os.path.join(folder, name)
                if os.path.exists(path):
                    yield path
    found = ctypes.util.find_library("otter")
    if found:
        yield found
    yield from _SONAMES  # dlopen's own search: LD_LIBRARY_PATH, ld.so.cache


class Tensor(ctypes.Structure):  # include/otter/tensor.h: otter_tensor
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("dims", ctypes.c_int64 * 16), ("data", ctypes.c_void_p), ("owns_data", ctypes.c_bool),
                ("extra", ctypes.c_void_p)]


class Bytes(ctypes.Structure):  # otter_bytes
    _fields_ = [("data", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Dim(ctypes.Structure):  # include/otter/ir.h: otter_dim
    _fields_ = [("value", ctypes.c_int64), ("param", ctypes.c_char_p), ("denotation", ctypes.c_char_p)]


class Type(ctypes.Structure):  # otter_type
    pass


Type._fields_ = [("kind", ctypes.c_int), ("elem_type", ctypes.c_int), ("has_elem_type", ctypes.c_bool),
                 ("rank", ctypes.c_int), ("dims", ctypes.POINTER(Dim)), ("elem", ctypes.POINTER(Type)),
                 ("denotation", ctypes.c_char_p), ("extra", ctypes.c_void_p)]


class SessionOptions(ctypes.Structure):  # include/otter/runtime.h: otter_session_options
    _fields_ = [("n_threads", ctypes.c_int), ("opt_level", ctypes.c_int), ("opt_level_set", ctypes.c_bool),
                ("no_fold_initializers", ctypes.c_bool), ("profile", ctypes.c_bool),
                ("max_memory_bytes", ctypes.c_size_t)]


class TrainingOptions(ctypes.Structure):  # include/otter/training.h: otter_training_options
    _fields_ = [("n_threads", ctypes.c_int), ("seed_set", ctypes.c_bool), ("seed", ctypes.c_uint64),
                ("max_memory_bytes", ctypes.c_size_t), ("profile", ctypes.c_bool)]


MAX_RANK = 16  # OTTER_MAX_RANK
TYPE_TENSOR, TYPE_SEQUENCE, TYPE_OPTIONAL = 1, 2, 4  # otter_type_kind

TP = ctypes.POINTER(Tensor)
_P = ctypes.c_void_p  # opaque handles
_S = ctypes.c_char_p
_I = ctypes.c_int
_SZ = ctypes.c_size_t
_NAMES = ctypes.POINTER(ctypes.c_char_p)

# name: (restype, argtypes). Functions returning otter_status have restype int.
_SIGNATURES = {
    "otter_status_name": (_S, [_I]),
    "otter_last_error": (_S, []),
    "otter_clear_error": (None, []),
    "otter_free": (None, [_P]),
    "otter_dtype_name": (_S, [_I]),
    "otter_tensor_from_data": (_I, [ctypes.POINTER(TP), _S, _I, _I, ctypes.POINTER(ctypes.c_int64), _P]),
    "otter_tensor_free": (None, [TP]),
    "otter_model_load": (_I, [ctypes.POINTER(_P), _S]),
    "otter_model_load_from_memory": (_I, [ctypes.POINTER(_P), _P, _SZ, _S]),
    "otter_model_save": (_I, [_P, _S, _P]),
    "otter_model_save_to_memory": (_I, [_P, ctypes.POINTER(_P), ctypes.POINTER(_SZ)]),
    "otter_model_free": (None, [_P]),
    "otter_session_create_from_file": (_I, [ctypes.POINTER(_P), _S, ctypes.POINTER(SessionOptions)]),
    "otter_session_create_from_memory": (_I, [ctypes.POINTER(_P), _P, _SZ, ctypes.POINTER(SessionOptions)]),
    "otter_session_free": (None, [_P]),
    "otter_session_input_count": (_SZ, [_P]),
    "otter_session_output_count": (_SZ, [_P]),
    "otter_session_input_name": (_S, [_P, _SZ]),
    "otter_session_output_name": (_S, [_P, _SZ]),
    "otter_session_input_type": (ctypes.POINTER(Type), [_P, _SZ]),
    "otter_session_output_type": (ctypes.POINTER(Type), [_P, _SZ]),
    "otter_session_run": (_I, [_P, _SZ, _NAMES, ctypes.POINTER(TP), _SZ, _NAMES, ctypes.POINTER(TP)]),
}

_lock = threading.Lock()
_lib = None
_lib_path = None


def _declare(handle):
    for name, (restype, argtypes) in _SIGNATURES.items():
        f = getattr(handle, name)
        f.restype, f.argtypes = restype, argtypes


def lib():
    """libotter as a ctypes.CDLL with the signatures of the functions otter_onnx calls set (loaded once)."""
    global _lib, _lib_path
    if _lib is None:
        with _lock:
            if _lib is None:
                tried = []
                for path in _candidates():
                    try:
                        handle = ctypes.CDLL(path)
                    except OSError as e:
                        tried.append(f"{path} ({e})")
                        continue
                    _declare(handle)
                    _lib, _lib_path = handle, path
                    break
                else:
                    raise ImportError("otter_onnx: libotter not found; set OTTER_LIB to libotter.so's path, or "
                                      "install otter (cmake --install) so the loader finds libotter.so.0. Tried: " +
                                      "; ".join(tried))
    return _lib


def declare(name, restype, argtypes):
    """Sets the signature of another libotter function (for the modules that call more of the C API); returns it."""
    f = getattr(lib(), name)
    f.restype, f.argtypes = restype, argtypes
    return f


def binder(signatures):
    """For a module that calls more of the C API: a function returning lib() with `signatures`
    ({name: (restype, argtypes)}) declared on its first call."""
    declared = []

    def get():
        if not declared:
            for name, (restype, argtypes) in signatures.items():
                declare(name, restype, argtypes)
            declared.append(True)
        return lib()
    return get


def lib_path():
    """The path libotter was loaded from."""
    lib()
    return _lib_path


# ---- dtypes and tensors ---------------------------------------------------------------------------------------

# otter_dtype (ONNX's TensorProto.DataType) -> numpy dtype of one element as otter holds it in memory. bfloat16 and
# the narrow float formats have no numpy type: they come out as their bits (uint16, uint8) unless ml_dtypes is
# installed; the 4- and 2-bit integers are unpacked, one per int8/uint8 (see include/otter/tensor.h).
_NUMPY_OF_DTYPE = {
    1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64, 8: np.object_,
    9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64, 14: np.complex64,
    15: np.complex128, 16: np.uint16, 17: np.uint8, 18: np.uint8, 19: np.uint8, 20: np.uint8, 21: np.uint8,
    22: np.int8, 23: np.uint8, 24: np.uint8, 25: np.uint8, 26: np.int8,
}
DT_STRING = 8
_ML_DTYPES = {16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2",
              20: "float8_e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4_e2m1fn", 24: "float8_e8m0fnu"}
try:
    import ml_dtypes

    for _dt, _name in _ML_DTYPES.items():
        if hasattr(ml_dtypes, _name):
            _NUMPY_OF_DTYPE[_dt] = getattr(ml_dtypes, _name)
except ImportError:
    pass

# numpy -> otter_dtype for arrays handed in: the plain numpy types, then ml_dtypes' where installed (without it
# bfloat16 and the narrow types are bits in uint16/uint8, which must keep meaning uint16/uint8).
_DTYPE_OF_NUMPY = {np.dtype(_NUMPY_OF_DTYPE[dt]): dt for dt in (1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15)}
for _dt in _ML_DTYPES:
    _DTYPE_OF_NUMPY.setdefault(np.dtype(_NUMPY_OF_DTYPE[_dt]), _dt)


def numpy_dtype(dtype):
    """The numpy dtype of otter_dtype number dtype."""
    try:
        return np.dtype(_NUMPY_OF_DTYPE[dtype])
    except KeyError:
        raise NotSupportedError(f"otter_onnx: element type {dtype} has no numpy equivalent") from None


def otter_dtype(np_dtype):
    """The otter_dtype number of a numpy dtype (str/bytes/object arrays: STRING)."""
    d = np.dtype(np_dtype)
    if d.kind in "OSU":
        return DT_STRING
    try:
        return _DTYPE_OF_NUMPY[d]
    except KeyError:
        raise InvalidArgumentError(f"otter_onnx: numpy dtype {d} has no otter element type") from None


def tensor_from_array(arr, name=None, dtype=None):
    """A new otter_tensor (a TP the caller frees with lib().otter_tensor_free) holding a copy of arr; dtype (an
    otter_dtype number) overrides the one taken from arr's numpy type, e.g. for bfloat16 given as uint16 bits."""
    arr = np.asarray(arr)
    dt = otter_dtype(arr.dtype) if dtype is None else dtype
    if arr.ndim > MAX_RANK:
        raise InvalidArgumentError(f"otter_onnx: rank {arr.ndim} is above otter's maximum {MAX_RANK}")
    dims = (ctypes.c_int64 * max(arr.ndim, 1))(*arr.shape)
    keep = None
    if dt == DT_STRING:
        items = [x if isinstance(x, bytes) else str(x).encode("utf-8") for x in arr.reshape(-1)]
        keep = [ctypes.create_string_buffer(x, len(x) + 1) for x in items]
        cells = (Bytes * max(len(items), 1))(*[Bytes(ctypes.cast(b, ctypes.c_void_p), len(x))
                                               for b, x in zip(keep, items)])
        data = ctypes.cast(cells, ctypes.c_void_p)
    else:
        want = numpy_dtype(dt)
        if arr.dtype.itemsize != want.itemsize:
            raise InvalidArgumentError(f"otter_onnx: numpy dtype {arr.dtype} can't hold otter element type "
                                       f"{lib().otter_dtype_name(dt).decode()}")
        arr = np.ascontiguousarray(arr).reshape(arr.shape)  # ascontiguousarray makes 0-d arrays 1-d
        data = arr.ctypes.data_as(ctypes.c_void_p) if arr.size else None
    t = TP()
    check(lib().otter_tensor_from_data(ctypes.byref(t), name.encode() if name else None, dt, arr.ndim, dims, data),
          f"tensor {name}" if name else None)
    del keep
    return t


def tensor_shape(t):
    """The dims of an otter_tensor (a TP or a Tensor) as a tuple."""
    c = t.contents if isinstance(t, TP) else t
    return tuple(c.dims[i] for i in range(c.rank))


def array_from_tensor(t):
    """A numpy copy of an otter_tensor (a TP or a Tensor); strings come out as an object array of bytes."""
    c = t.contents if isinstance(t, TP) else t
    shape = tensor_shape(c)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    dt = numpy_dtype(c.dtype)
    if c.dtype == DT_STRING:
        out = np.empty(n, dtype=object)
        if n:
            cells = (Bytes * n).from_address(c.data)
            for i in range(n):
                out[i] = ctypes.string_at(cells[i].data, cells[i].len) if cells[i].len else b""
        return out.reshape(shape)
    if n == 0 or not c.data:
        return np.zeros(shape, dt)
    buf = (ctypes.c_char * (n * dt.itemsize)).from_address(c.data)
    return np.frombuffer(buf, dtype=dt).reshape(shape).copy()


class TensorList:
    """otter_tensor pointers made from numpy arrays, freed together: `with TensorList(arrays) as ts: f(ts.array)`."""

    def __init__(self, arrays=(), names=None):
        self.ptrs = []
        try:
            for i, a in enumerate(arrays):
                self.ptrs.append(tensor_from_array(a, names[i] if names else None))
        except BaseException:
            self.free()
            raise
        self.array = (TP * max(len(self.ptrs), 1))(*self.ptrs)

    def free(self):
        for p in self.ptrs:
            lib().otter_tensor_free(p)
        self.ptrs = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()


def outputs_to_arrays(outs, n):
    """numpy copies of the n tensors of an output array (TP * n) the library filled; frees them."""
    try:
        return [array_from_tensor(outs[i]) for i in range(n)]
    finally:
        for i in range(n):
            if outs[i]:
                lib().otter_tensor_free(outs[i])


def names_array(names):
    """A (c_char_p * n) of the names (None: NULL)."""
    if names is None:
        return None
    return (ctypes.c_char_p * max(len(names), 1))(*[n.encode() for n in names])


def type_shape(tp):
    """ORT NodeArg's shape of an otter_type pointer: a list of ints, symbol names, or None for unknown dims; None
    when the rank is unknown."""
    if not tp or tp.contents.kind != TYPE_TENSOR or tp.contents.rank < 0:
        return None
    t = tp.contents
    dims = []
    for i in range(t.rank):
        d = t.dims[i]
        dims.append(d.value if d.value >= 0 else (d.param.decode() if d.param else None))
    return dims


_ORT_TYPE_NAME = {1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
                  9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64", 14: "complex64",
                  15: "complex128", 16: "bfloat16"}


def type_name(tp):
    """ORT NodeArg's type string: "tensor(float)", "seq(tensor(int64))", "optional(tensor(float))"."""
    if not tp:
        return None
    t = tp.contents
    if t.kind == TYPE_TENSOR:
        elem = _ORT_TYPE_NAME.get(t.elem_type) or lib().otter_dtype_name(t.elem_type).decode()
        return f"tensor({elem})"
    if t.kind == TYPE_SEQUENCE:
        return f"seq({type_name(t.elem)})"
    if t.kind == TYPE_OPTIONAL:
        return f"optional({type_name(t.elem)})"
    return None


# ---- models ---------------------------------------------------------------------------------------------------

try:
    import onnx
except ImportError:  # without python3-onnx, models are bytes
    onnx = None


def model_bytes(model):
    """Serialized ONNX bytes of a model given as an onnx.ModelProto, bytes, or an object with to_model_bytes() or
    ModelProto-producing to_model_proto() (an onnxblock's)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if onnx is not None and isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    if hasattr(model, "to_model_bytes"):
        return model.to_model_bytes()
    if hasattr(model, "to_model_proto"):
        return model.to_model_proto().SerializeToString()
    if hasattr(model, "SerializeToString"):
        return model.SerializeToString()
    raise InvalidArgumentError(f"otter_onnx: expected an onnx.ModelProto or bytes, got {type(model).__name__}")


def model_from_bytes(data):
    """onnx.ModelProto when python3-onnx is installed, else the bytes."""
    if onnx is None:
        return bytes(data)
    m = onnx.ModelProto()
    m.ParseFromString(bytes(data))
    return m


def load_model(model):
    """An otter_model handle (free with otter_model_free) from a path, bytes or a ModelProto."""
    h = ctypes.c_void_p()
    if isinstance(model, (str, os.PathLike)):
        check(lib().otter_model_load(ctypes.byref(h), os.fsencode(model)))
    else:
        data = model_bytes(model)
        check(lib().otter_model_load_from_memory(ctypes.byref(h), data, len(data), None))
    return h


def save_model_to_bytes(handle):
    """The serialized bytes of an otter_model handle."""
    p, n = ctypes.c_void_p(), ctypes.c_size_t()
    check(lib().otter_model_save_to_memory(handle, ctypes.byref(p), ctypes.byref(n)))
    try:
        return ctypes.string_at(p.value, n.value)
    finally:
        lib().otter_free(p)
