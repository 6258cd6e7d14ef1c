"""onnxruntime.training.api over otter's training session (include/otter/training.h, checkpoint.h): CheckpointState,
Module, Optimizer, LinearLRScheduler, with ONNX Runtime 1.19's Python signatures.

A CheckpointState owns its otter_checkpoint until a Module is made from it; from then on the Module's training
session owns it and the state reads and writes through the session, so state.parameters always shows the weights
being trained (as ONNX Runtime's shared CheckpointState does)."""
import ctypes
import os

import numpy as np

from .. import _lib as L

_P, _I, _S, _SZ, _B = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_bool
_PP = ctypes.POINTER(ctypes.c_void_p)
_FLOATS = ctypes.POINTER(ctypes.c_float)
_TRAINING, _EVAL = 0, 1  # otter_training_graph
_PROP_INT, _PROP_FLOAT, _PROP_STRING = 0, 1, 2


class _Property(ctypes.Structure):  # otter_property
    _fields_ = [("name", _S), ("type", _I), ("i", ctypes.c_int64), ("f", ctypes.c_float), ("s", _S)]


class _ParamInfo(ctypes.Structure):  # otter_param_info
    _fields_ = [("dtype", _I), ("rank", _I), ("dims", ctypes.c_int64 * L.MAX_RANK), ("trainable", _B),
                ("offset_all", _SZ), ("offset_trainable", _SZ)]


class _SaveOptions(ctypes.Structure):  # otter_checkpoint_save_options
    _fields_ = [("version", _I), ("keep_order", _B), ("skip_optimizer_state", _B),
                ("external_data_threshold", ctypes.c_uint64)]


class _LRSchedule(ctypes.Structure):  # otter_lr_schedule
    _fields_ = [("kind", _I), ("initial_lr", ctypes.c_float), ("warmup_steps", ctypes.c_int64),
                ("total_steps", ctypes.c_int64), ("min_lr", ctypes.c_float), ("step_size", ctypes.c_int64),
                ("gamma", ctypes.c_float)]


_SIGNATURES = {
    "otter_checkpoint_load": (_I, [_PP, _S]),
    "otter_checkpoint_load_from_memory": (_I, [_PP, _P, _SZ]),
    "otter_checkpoint_save": (_I, [_P, _S, ctypes.POINTER(_SaveOptions)]),
    "otter_checkpoint_save_to_memory": (_I, [_P, _P, _PP, ctypes.POINTER(_SZ)]),
    "otter_checkpoint_free": (None, [_P]),
    "otter_checkpoint_param_count": (_SZ, [_P, _I]),
    "otter_checkpoint_param_at": (L.TP, [_P, _I, _SZ]),
    "otter_checkpoint_get_param": (_I, [_P, _S, ctypes.POINTER(L.TP), ctypes.POINTER(_I)]),
    "otter_checkpoint_set_param": (_I, [_P, _S, L.TP]),
    "otter_checkpoint_property_count": (_SZ, [_P]),
    "otter_checkpoint_property_at": (ctypes.POINTER(_Property), [_P, _SZ]),
    "otter_checkpoint_get_property": (_I, [_P, _S, ctypes.POINTER(ctypes.POINTER(_Property))]),
    "otter_checkpoint_set_property_int": (_I, [_P, _S, ctypes.c_int64]),
    "otter_checkpoint_set_property_float": (_I, [_P, _S, ctypes.c_float]),
    "otter_checkpoint_set_property_string": (_I, [_P, _S, _S]),
    "otter_training_session_create": (_I, [_PP, _P, _S, _S, _S, _P]),
    "otter_training_session_free": (None, [_P]),
    "otter_training_input_count": (_SZ, [_P, _I]),
    "otter_training_input_name": (_S, [_P, _I, _SZ]),
    "otter_training_output_count": (_SZ, [_P, _I]),
    "otter_training_output_name": (_S, [_P, _I, _SZ]),
    "otter_training_train_step": (_I, [_P, _SZ, _P, ctypes.POINTER(L.TP), _SZ, ctypes.POINTER(L.TP)]),
    "otter_training_eval_step": (_I, [_P, _SZ, _P, ctypes.POINTER(L.TP), _SZ, ctypes.POINTER(L.TP)]),
    "otter_training_lazy_reset_grad": (_I, [_P]),
    "otter_training_optimizer_step": (_I, [_P]),
    "otter_training_get_lr": (ctypes.c_float, [_P]),
    "otter_training_set_lr": (_I, [_P, ctypes.c_float]),
    "otter_training_set_schedule": (_I, [_P, ctypes.POINTER(_LRSchedule)]),
    "otter_training_scheduler_step": (_I, [_P]),
    "otter_lr_schedule_at": (ctypes.c_float, [ctypes.POINTER(_LRSchedule), ctypes.c_int64]),
    "otter_training_params_size": (_SZ, [_P, _B]),
    "otter_training_copy_params_to_buffer": (_I, [_P, _FLOATS, _SZ, _B]),
    "otter_training_copy_buffer_to_params": (_I, [_P, _FLOATS, _SZ, _B]),
    "otter_training_describe_param": (_I, [_P, _S, ctypes.POINTER(_ParamInfo)]),
    "otter_training_get_param": (_I, [_P, _S, ctypes.POINTER(L.TP)]),
    "otter_training_set_param": (_I, [_P, _S, L.TP]),
    "otter_training_set_property_int": (_I, [_P, _S, ctypes.c_int64]),
    "otter_training_set_property_float": (_I, [_P, _S, ctypes.c_float]),
    "otter_training_set_property_string": (_I, [_P, _S, _S]),
    "otter_training_get_property": (_I, [_P, _S, ctypes.POINTER(ctypes.POINTER(_Property))]),
    "otter_training_sync_checkpoint": (_I, [_P, _PP]),
    "otter_training_save_checkpoint": (_I, [_P, _S, _B]),
    "otter_training_export": (_I, [_P, _S, _SZ, _P]),
}
_lib = L.binder(_SIGNATURES)


def _property_value(p):
    p = p.contents
    return p.i if p.type == _PROP_INT else float(p.f) if p.type == _PROP_FLOAT else p.s.decode()


# ---- CheckpointState ------------------------------------------------------------------------------------------


class Parameter:
    """One parameter of a CheckpointState (ORT's Parameter): name, requires_grad, data (a numpy copy; assigning it
    sets the values) and copy_from()."""

    def __init__(self, state, name, requires_grad):
        self._state, self.name, self.requires_grad = state, name, requires_grad

    @property
    def data(self):
        return self._state._get_param(self.name)

    @data.setter
    def data(self, value):
        self.copy_from(value)

    def copy_from(self, value):
        value = value.numpy() if hasattr(value, "numpy") else value
        self._state._set_param(self.name, np.asarray(value))

    def __repr__(self):
        return f"Parameter(name={self.name!r}, requires_grad={self.requires_grad})"


class Parameters:
    """state.parameters: a read-only mapping name -> Parameter, in the checkpoint's order (trainable first)."""

    def __init__(self, state):
        self._state = state

    def _names(self):
        return self._state._param_names()

    def __getitem__(self, name):
        for n, trainable in self._names():
            if n == name:
                return Parameter(self._state, n, trainable)
        raise L.NotFoundError(f"parameter '{name}' is not in the checkpoint")

    def __setitem__(self, name, value):
        self[name].copy_from(value)

    def __contains__(self, name):
        return any(n == name for n, _ in self._names())

    def __iter__(self):
        return (n for n, _ in self._names())

    def __len__(self):
        return len(self._names())

    def keys(self):
        return list(self)

    def items(self):
        return [(n, Parameter(self._state, n, t)) for n, t in self._names()]

    def values(self):
        return [p for _, p in self.items()]


class Properties:
    """state.properties: a mapping name -> int, float or str, stored in the checkpoint's property bag."""

    def __init__(self, state):
        self._state = state

    def __getitem__(self, name):
        return self._state._get_property(name)

    def __setitem__(self, name, value):
        self._state._set_property(name, value)

    def __contains__(self, name):
        try:
            self._state._get_property(name)
            return True
        except L.NotFoundError:
            return False

    def __iter__(self):
        return iter(self._state._property_names())

    def __len__(self):
        return len(self._state._property_names())

    def keys(self):
        return list(self)

    def items(self):
        return [(n, self[n]) for n in self]


class CheckpointState:
    """ORT's CheckpointState: load_checkpoint, save_checkpoint, parameters, properties."""

    def __init__(self, handle):
        self._handle = handle  # otter_checkpoint *, ours until a Module takes it
        self._module = None

    def __del__(self):
        if getattr(self, "_handle", None) and self._module is None:
            L.lib().otter_checkpoint_free(self._handle)
            self._handle = None

    @staticmethod
    def load_checkpoint(checkpoint_uri):
        h = ctypes.c_void_p()
        L.check(_lib().otter_checkpoint_load(ctypes.byref(h), os.fsencode(checkpoint_uri)))
        return CheckpointState(h)

    @staticmethod
    def save_checkpoint(state, checkpoint_uri, include_optimizer_state=False):
        path = os.fsencode(checkpoint_uri)
        if state._module is not None:
            L.check(_lib().otter_training_save_checkpoint(state._module._session, path, include_optimizer_state))
            return
        opts = _SaveOptions(skip_optimizer_state=not include_optimizer_state)
        L.check(_lib().otter_checkpoint_save(state._handle, path, ctypes.byref(opts)))

    @property
    def parameters(self):
        return Parameters(self)

    @property
    def properties(self):
        return Properties(self)

    # The state as the library holds it now (synced from the session's slabs when a Module trains it).
    def _current(self):
        if self._module is None:
            return self._handle
        out = ctypes.c_void_p()
        L.check(_lib().otter_training_sync_checkpoint(self._module._session, ctypes.byref(out)))
        return out

    def _param_names(self):
        h, lib = self._current(), _lib()
        return [(lib.otter_checkpoint_param_at(h, kind, i).contents.name.decode(), kind == 0)
                for kind in (0, 1) for i in range(lib.otter_checkpoint_param_count(h, kind))]

    def _get_param(self, name):
        if self._module is not None:
            t = L.TP()
            L.check(_lib().otter_training_get_param(self._module._session, name.encode(), ctypes.byref(t)))
            try:
                return L.array_from_tensor(t)
            finally:
                L.lib().otter_tensor_free(t)
        t = L.TP()
        L.check(_lib().otter_checkpoint_get_param(self._handle, name.encode(), ctypes.byref(t), None))
        return L.array_from_tensor(t)

    def _set_param(self, name, array):
        t = L.tensor_from_array(array)
        try:
            if self._module is not None:
                L.check(_lib().otter_training_set_param(self._module._session, name.encode(), t))
            else:
                L.check(_lib().otter_checkpoint_set_param(self._handle, name.encode(), t))
        finally:
            L.lib().otter_tensor_free(t)

    def _property_names(self):
        h, lib = self._current(), _lib()
        return [lib.otter_checkpoint_property_at(h, i).contents.name.decode()
                for i in range(lib.otter_checkpoint_property_count(h))]

    def _get_property(self, name):
        p = ctypes.POINTER(_Property)()
        if self._module is not None:
            L.check(_lib().otter_training_get_property(self._module._session, name.encode(), ctypes.byref(p)))
        else:
            L.check(_lib().otter_checkpoint_get_property(self._handle, name.encode(), ctypes.byref(p)))
        return _property_value(p)

    def _set_property(self, name, value):
        target, prefix = ((self._module._session, "otter_training_set_property_") if self._module is not None
                          else (self._handle, "otter_checkpoint_set_property_"))
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise L.InvalidArgumentError(f"property '{name}': expected an int, float or str, got "
                                         f"{type(value).__name__}")
        kind = "int" if isinstance(value, int) else "float" if isinstance(value, float) else "string"
        arg = value.encode() if kind == "string" else value
        L.check(getattr(_lib(), prefix + kind)(target, name.encode(), arg))


# ---- Module ---------------------------------------------------------------------------------------------------


class OrtValueLike:
    """What get_contiguous_parameters returns in place of an OrtValue: numpy() gives the array."""

    def __init__(self, array):
        self._array = array

    def numpy(self):
        return self._array

    def shape(self):
        return list(self._array.shape)


class Module:
    """ORT's Module(train_model_uri, state, eval_model_uri=None, device="cpu")."""

    training = True

    def __init__(self, train_model_uri, state, eval_model_uri=None, device="cpu", session_options=None):
        if str(device).split(":")[0] != "cpu":
            raise L.NotSupportedError(f"Module: device '{device}': otter trains on the CPU only")
        if state._module is not None:
            raise L.InvalidArgumentError("Module: this CheckpointState already belongs to a Module")
        self._train_uri, self._eval_uri = os.fspath(train_model_uri), eval_model_uri and os.fspath(eval_model_uri)
        self._state, self._session, self._optimizer_uri = state, None, None
        self._create(state._handle)

    def _create(self, ckpt):
        s = ctypes.c_void_p()
        L.check(_lib().otter_training_session_create(
            ctypes.byref(s), ckpt, os.fsencode(self._train_uri),
            os.fsencode(self._eval_uri) if self._eval_uri else None,
            os.fsencode(self._optimizer_uri) if self._optimizer_uri else None, None))
        self._session = s
        self._state._handle, self._state._module = None, self  # the session owns the checkpoint now

    def _attach_optimizer(self, optimizer_uri):
        """otter builds the optimizer into the training session: recreate it with the optimizer model, from the
        state trained so far and with the learning rate kept."""
        lib = _lib()
        lr = lib.otter_training_get_lr(self._session)
        current = ctypes.c_void_p()
        L.check(lib.otter_training_sync_checkpoint(self._session, ctypes.byref(current)))
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        L.check(lib.otter_checkpoint_save_to_memory(current, None, ctypes.byref(data), ctypes.byref(size)))
        copy = ctypes.c_void_p()
        try:
            L.check(lib.otter_checkpoint_load_from_memory(ctypes.byref(copy), data, size.value))
        finally:
            lib.otter_free(data)
        previous, previous_uri = self._session, self._optimizer_uri
        self._optimizer_uri = os.fspath(optimizer_uri)
        try:
            self._create(copy)
        except BaseException:
            lib.otter_checkpoint_free(copy)
            self._session, self._optimizer_uri = previous, previous_uri
            raise
        lib.otter_training_session_free(previous)
        L.check(lib.otter_training_set_lr(self._session, lr))

    def __del__(self):
        if getattr(self, "_session", None):
            state = self._state
            # hand the trained state back to the CheckpointState, which outlives us
            try:
                current = ctypes.c_void_p()
                L.check(_lib().otter_training_sync_checkpoint(self._session, ctypes.byref(current)))
                data, size = ctypes.c_void_p(), ctypes.c_size_t()
                L.check(_lib().otter_checkpoint_save_to_memory(current, None, ctypes.byref(data), ctypes.byref(size)))
                h = ctypes.c_void_p()
                try:
                    L.check(_lib().otter_checkpoint_load_from_memory(ctypes.byref(h), data, size.value))
                finally:
                    _lib().otter_free(data)
                state._handle = h
            finally:
                state._module = None
                _lib().otter_training_session_free(self._session)
                self._session = None

    def train(self, mode=True):
        self.training = mode
        return self

    def eval(self):
        return self.train(False)

    def _graph(self):
        return _TRAINING if self.training else _EVAL

    def input_names(self):
        lib, g = _lib(), self._graph()
        return [lib.otter_training_input_name(self._session, g, i).decode()
                for i in range(lib.otter_training_input_count(self._session, g))]

    def output_names(self):
        lib, g = _lib(), self._graph()
        return [lib.otter_training_output_name(self._session, g, i).decode()
                for i in range(lib.otter_training_output_count(self._session, g))]

    def __call__(self, *user_inputs):
        """One train step (train mode: forward, backward, gradient accumulation) or eval step on the user inputs
        in input_names() order; returns the outputs (the loss first) as numpy, one array when there is one."""
        lib = _lib()
        n_out = lib.otter_training_output_count(self._session, self._graph())
        step = lib.otter_training_train_step if self.training else lib.otter_training_eval_step
        inputs = [x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else x for x in user_inputs]
        with L.TensorList(inputs) as ins:
            outs = (L.TP * max(n_out, 1))()
            L.check(step(self._session, len(inputs), None, ins.array, n_out, outs))
            fetches = L.outputs_to_arrays(outs, n_out)
        return fetches[0] if len(fetches) == 1 else fetches

    def lazy_reset_grad(self):
        L.check(_lib().otter_training_lazy_reset_grad(self._session))

    def get_parameters_size(self, trainable_only=True):
        return _lib().otter_training_params_size(self._session, trainable_only)

    def get_contiguous_parameters(self, trainable_only=False):
        n = self.get_parameters_size(trainable_only)
        buf = np.empty(n, np.float32)
        L.check(_lib().otter_training_copy_params_to_buffer(self._session, buf.ctypes.data_as(_FLOATS), n,
                                                            trainable_only))
        return OrtValueLike(buf)

    def copy_buffer_to_parameters(self, buffer, trainable_only=True):
        arr = np.ascontiguousarray(buffer.numpy() if hasattr(buffer, "numpy") else buffer, np.float32).reshape(-1)
        L.check(_lib().otter_training_copy_buffer_to_params(self._session, arr.ctypes.data_as(_FLOATS), arr.size,
                                                            trainable_only))

    def export_model_for_inferencing(self, inference_model_uri, graph_output_names):
        names = list(graph_output_names)
        L.check(_lib().otter_training_export(self._session, os.fsencode(inference_model_uri), len(names),
                                             ctypes.cast(L.names_array(names), ctypes.c_void_p) if names else None))


# ---- Optimizer, LinearLRScheduler -----------------------------------------------------------------------------


class Optimizer:
    """ORT's Optimizer(optimizer_uri, module): step(), set_learning_rate(), get_learning_rate()."""

    def __init__(self, optimizer_uri, module):
        module._attach_optimizer(optimizer_uri)
        self._module = module

    def step(self):
        L.check(_lib().otter_training_optimizer_step(self._module._session))

    def set_learning_rate(self, learning_rate):
        L.check(_lib().otter_training_set_lr(self._module._session, float(learning_rate)))

    def get_learning_rate(self):
        return float(_lib().otter_training_get_lr(self._module._session))


class LinearLRScheduler:
    """ORT's LinearLRScheduler(optimizer, warmup_step_count, total_step_count, initial_lr): the learning rate
    rises linearly from 0 over the warm-up steps, then falls linearly to 0 at total_step_count; step() moves it to
    the optimizer's current step."""

    def __init__(self, optimizer, warmup_step_count, total_step_count, initial_lr):
        self._optimizer = optimizer
        self._schedule = _LRSchedule(kind=1, initial_lr=initial_lr, warmup_steps=warmup_step_count,
                                     total_steps=total_step_count)
        L.check(_lib().otter_training_set_schedule(optimizer._module._session, ctypes.byref(self._schedule)))

    def step(self):
        L.check(_lib().otter_training_scheduler_step(self._optimizer._module._session))

    def learning_rate_at(self, step):
        """The schedule's learning rate at optimizer step `step` (otter's addition, for plotting and checks)."""
        return float(_lib().otter_lr_schedule_at(ctypes.byref(self._schedule), step))
