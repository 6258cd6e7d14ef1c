"""libotter's editing, checking, printing, merging and running functions for otter_onnx.graph and
otter_onnx.training.onnxblock, over _lib (which loads libotter and converts tensors and models). Models cross
as serialized ONNX bytes: each call loads them into an otter_model, lets libotter do the work and serializes
the result back. The structs mirrored here are those of include/otter/edit.h, check.h, print.h and ops.h."""
import ctypes

from . import _lib

_P, _S, _SZ, _I = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int


class _ModelHead(ctypes.Structure):  # include/otter/ir.h: otter_model, up to its graph
    _fields_ = [("has_ir_version", ctypes.c_bool), ("has_model_version", ctypes.c_bool),
                ("ir_version", ctypes.c_int64), ("model_version", ctypes.c_int64),
                ("producer_name", _S), ("producer_version", _S), ("domain", _S), ("doc_string", _S),
                ("n_opsets", _SZ), ("n_metadata", _SZ), ("opsets", _P), ("metadata", _P), ("graph", _P)]


class _CleanStats(ctypes.Structure):  # include/otter/edit.h
    _fields_ = [("nodes_removed", _SZ), ("initializers_deduplicated", _SZ), ("initializers_removed", _SZ),
                ("value_info_removed", _SZ)]


class _CheckOptions(ctypes.Structure):  # include/otter/check.h
    _fields_ = [("full_check", ctypes.c_bool), ("stop_at_first", ctypes.c_bool), ("report", _P),
                ("callback", _P), ("callback_user", _P)]


class _DotOptions(ctypes.Structure):  # include/otter/print.h
    _fields_ = [("hide_initializers", ctypes.c_bool), ("rankdir", _S)]


class _Wire(ctypes.Structure):  # include/otter/edit.h
    _fields_ = [("a_output", _S), ("b_input", _S)]


class _MergeOptions(ctypes.Structure):  # include/otter/edit.h
    _fields_ = [("prefix_a", _S), ("prefix_b", _S), ("keep_a_outputs", ctypes.c_bool), ("graph_name", _S)]


class _OpInfo(ctypes.Structure):  # include/otter/ops.h
    _fields_ = [("domain", _S), ("op_type", _S), ("since_versions", _I * 16), ("n_since_versions", _SZ),
                ("kernel", ctypes.c_bool), ("shape_inference", ctypes.c_bool), ("gradient", ctypes.c_bool),
                ("note", _S)]


_SIGNATURES = {
    "otter_graph_clean": (_I, [_P, ctypes.POINTER(_CleanStats)]),
    "otter_check_report_create": (_I, [ctypes.POINTER(_P)]),
    "otter_check_report_free": (None, [_P]),
    "otter_check_report_count": (_SZ, [_P]),
    "otter_check_report_message": (_S, [_P, _SZ]),
    "otter_model_check": (_I, [_P, ctypes.POINTER(_CheckOptions)]),
    "otter_graph_to_dot": (_I, [_P, ctypes.POINTER(_DotOptions), ctypes.POINTER(_P)]),
    "otter_model_merge": (_I, [ctypes.POINTER(_P), _P, _P, ctypes.POINTER(_Wire), _SZ,
                               ctypes.POINTER(_MergeOptions)]),
    "otter_dtype_list": (ctypes.POINTER(_I), [ctypes.POINTER(_SZ)]),
    "otter_ops_count": (_SZ, []),
    "otter_ops_get": (_I, [_SZ, ctypes.POINTER(_OpInfo)]),
}
_c = _lib.binder(_SIGNATURES)  # libotter, with this module's signatures declared on first use


class _Model:
    """An otter_model handle from ONNX bytes (or a handle already made), freed on leaving `with`."""

    def __init__(self, data=None, handle=None):
        self.handle = handle if handle is not None else _lib.load_model(data)

    def graph(self):
        return ctypes.cast(self.handle, ctypes.POINTER(_ModelHead)).contents.graph

    def to_bytes(self):
        return _lib.save_model_to_bytes(self.handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _c().otter_model_free(self.handle)


def clean(data):
    """otter_graph_clean on the model's graph; returns (new bytes, stats as a dict)."""
    with _Model(data) as m:
        stats = _CleanStats()
        _lib.check(_c().otter_graph_clean(m.graph(), ctypes.byref(stats)), "cleaning the graph")
        return m.to_bytes(), {name: getattr(stats, name) for name, _ in _CleanStats._fields_}


def check(data, full_check=True):
    """Every problem otter_model_check finds, with shape inference when full_check (empty: a valid model)."""
    with _Model(data) as m:
        report = _P()
        _lib.check(_c().otter_check_report_create(ctypes.byref(report)), "creating a check report")
        try:
            opts = _CheckOptions(full_check=full_check, report=report)
            status = _c().otter_model_check(m.handle, ctypes.byref(opts))
            if status not in (_lib.OK, _lib.ERR_INVALID):  # INVALID: the model has problems, listed in the report
                _lib.check(status, "checking the model")
            return [_c().otter_check_report_message(report, i).decode(errors="replace")
                    for i in range(_c().otter_check_report_count(report))]
        finally:
            _c().otter_check_report_free(report)


def to_dot(data, rankdir=None):
    """otter_graph_to_dot of the model's graph (rankdir "TB" or "LR"; None: top to bottom)."""
    with _Model(data) as m:
        out = _P()
        opts = _DotOptions(hide_initializers=False, rankdir=rankdir.encode() if rankdir else None)
        _lib.check(_c().otter_graph_to_dot(m.graph(), ctypes.byref(opts), ctypes.byref(out)), "drawing the graph")
        try:
            return ctypes.string_at(out).decode()
        finally:
            _c().otter_free(out)


def merge(data_a, data_b, wires, keep_a_outputs, graph_name=None):
    """otter_model_merge: A followed by B, each (a_output, b_input) wire connecting them; returns bytes."""
    arr = (_Wire * max(len(wires), 1))(*[_Wire(a.encode(), b.encode()) for a, b in wires])
    opts = _MergeOptions(keep_a_outputs=keep_a_outputs, graph_name=graph_name.encode() if graph_name else None)
    with _Model(data_a) as a, _Model(data_b) as b:
        out = _P()
        _lib.check(_c().otter_model_merge(ctypes.byref(out), a.handle, b.handle, arr, len(wires),
                                          ctypes.byref(opts)), "merging the graphs")
        with _Model(handle=out) as merged:
            return merged.to_bytes()


def dtypes():
    """The element types otter knows (ONNX's TensorProto.DataType numbers), in otter_dtype_list's order."""
    count = _SZ()
    types = _c().otter_dtype_list(ctypes.byref(count))
    return [types[i] for i in range(count.value)]


def operators():
    """(domain, op_type, since_versions, has a kernel) of every operator in otter's registry."""
    result = []
    for i in range(_c().otter_ops_count()):
        info = _OpInfo()
        _lib.check(_c().otter_ops_get(i, ctypes.byref(info)), "reading the operator registry")
        result.append((info.domain.decode(), info.op_type.decode(),
                       list(info.since_versions[:info.n_since_versions]), info.kernel))
    return result


def run(data, feeds, output_names=None):
    """Runs the model once on feeds ({name: numpy array}); returns the outputs (all when output_names is
    None) as numpy arrays, in order."""
    session = _P()
    _lib.check(_c().otter_session_create_from_memory(ctypes.byref(session), data, len(data), None),
               "creating the session")
    try:
        if output_names is None:
            output_names = [_c().otter_session_output_name(session, i).decode()
                            for i in range(_c().otter_session_output_count(session))]
        names = list(feeds)
        with _lib.TensorList([feeds[n] for n in names], names) as inputs:
            outputs = (_lib.TP * max(len(output_names), 1))()
            status = _c().otter_session_run(session, len(names), _lib.names_array(names), inputs.array,
                                            len(output_names), _lib.names_array(output_names), outputs)
            if status != _lib.OK:
                for i in range(len(output_names)):  # any made before the failure
                    if outputs[i]:
                        _c().otter_tensor_free(outputs[i])
                _lib.check(status, "running the model")
            return _lib.outputs_to_arrays(outputs, len(output_names))
    finally:
        _c().otter_session_free(session)

