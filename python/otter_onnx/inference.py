"""otter_onnx.InferenceSession: ONNX Runtime's InferenceSession over otter's runtime (otter_session_*)."""
import ctypes
import os
from collections import namedtuple

from . import _lib as L

# ORT's onnxruntime.NodeArg: name, shape (ints, symbol names or None), type ("tensor(float)").
NodeArg = namedtuple("NodeArg", ["name", "type", "shape"])


class InferenceSession:
    """InferenceSession(path_or_bytes_or_ModelProto, sess_options=None, providers=None, **kwargs).

    providers and ORT's other options are accepted and ignored (otter runs on the CPU); sess_options may be an
    object with intra_op_num_threads and graph_optimization_level like ORT's SessionOptions."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        opts = L.SessionOptions()
        if sess_options is not None:
            opts.n_threads = int(getattr(sess_options, "intra_op_num_threads", 0) or 0)
            level = getattr(sess_options, "graph_optimization_level", None)
            if level is not None:  # ORT: 0 disable, 1 basic, 2 extended, 99 all
                opts.opt_level, opts.opt_level_set = min(int(level), 2), True
        self._handle = ctypes.c_void_p()
        lib = L.lib()
        if isinstance(path_or_bytes, (str, os.PathLike)):
            L.check(lib.otter_session_create_from_file(ctypes.byref(self._handle), os.fsencode(path_or_bytes),
                                                       ctypes.byref(opts)))
        else:
            data = L.model_bytes(path_or_bytes)
            L.check(lib.otter_session_create_from_memory(ctypes.byref(self._handle), data, len(data),
                                                         ctypes.byref(opts)))
        h = self._handle
        self._inputs = [NodeArg(lib.otter_session_input_name(h, i).decode(),
                                L.type_name(lib.otter_session_input_type(h, i)),
                                L.type_shape(lib.otter_session_input_type(h, i)))
                        for i in range(lib.otter_session_input_count(h))]
        self._outputs = [NodeArg(lib.otter_session_output_name(h, i).decode(),
                                 L.type_name(lib.otter_session_output_type(h, i)),
                                 L.type_shape(lib.otter_session_output_type(h, i)))
                         for i in range(lib.otter_session_output_count(h))]

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h:
            L.lib().otter_session_free(h)
            self._handle = None

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_providers(self):
        return ["CPUExecutionProvider"]

    def run(self, output_names, input_feed, run_options=None):
        """Runs the model on input_feed ({name: numpy array}); returns the outputs named (None: all) as a list of
        numpy arrays, as ORT does."""
        names = [o.name for o in self._outputs] if not output_names else list(output_names)
        feed_names = list(input_feed)
        with L.TensorList([input_feed[k] for k in feed_names]) as ins:
            outs = (L.TP * max(len(names), 1))()
            L.check(L.lib().otter_session_run(self._handle, len(feed_names), L.names_array(feed_names), ins.array,
                                              len(names), L.names_array(names), outs))
            return L.outputs_to_arrays(outs, len(names))
