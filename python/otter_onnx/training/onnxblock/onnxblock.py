"""ForwardBlock and TrainingBlock, as ONNX Runtime's: blocks whose call also turns the base model into a
forward model, or into training and eval models (the gradient graph is libotter's)."""
import ctypes

import onnx

from ... import _lib
from .. import artifacts
from . import _graph_utils, blocks, model_accessor


def _model_bytes(model):
    return model.SerializeToString()


def _training_and_eval(model, requires_grad, frozen):
    """otter_artifacts_build on a model whose only output is the loss (loss kind none, no optimizer): the
    training and eval models as bytes."""
    artifacts._signatures()
    c = _lib.lib()
    opts, keep = artifacts._Options(), []
    artifacts._set_names(opts, "n_requires_grad", "requires_grad", requires_grad, keep)
    artifacts._set_names(opts, "n_frozen", "frozen", frozen, keep)
    opts.loss, opts.optimizer = artifacts._LOSS_KIND[None], artifacts._OPTIM_KIND[None]
    handle = _lib.load_model(model)
    made = artifacts._Artifacts()
    try:
        _lib.check(c.otter_artifacts_build(ctypes.byref(made), handle, ctypes.byref(opts)),
                   "building the training model")
        try:
            return _lib.save_model_to_bytes(made.training), _lib.save_model_to_bytes(made.eval)
        finally:
            c.otter_artifacts_free(ctypes.byref(made))
    finally:
        c.otter_model_free(handle)


class ForwardBlock(blocks.Block):
    """build() returns the output name(s); the call makes them the graph's outputs."""

    def __init__(self):
        super().__init__()
        self._model = None

    def __call__(self, *args, **kwargs):
        output = super().__call__(*args, **kwargs)
        _graph_utils.register_graph_outputs(self.base, output)
        self._model = onnx.ModelProto.FromString(_model_bytes(self.base))
        return output

    def to_model_proto(self):
        """The forward model (RuntimeError before the block was called)."""
        if self._model is None:
            raise RuntimeError("call the block inside an onnxblock.base context before to_model_proto()")
        return self._model


class TrainingBlock(blocks.Block):
    """build() returns the loss name; the call builds the training model (forward, loss, gradients of the
    parameters marked with requires_grad, gradient accumulation, as ONNX Runtime lays it out) and the eval
    model, and leaves the training model in the base context."""

    def __init__(self):
        super().__init__()
        self._requires_grad, self._frozen_params = [], []
        self._parameters = self._training_model = self._eval_model = None

    def requires_grad(self, argument_name, value=True):
        """Marks an initializer as trainable (value True) or frozen."""
        for names in (self._requires_grad, self._frozen_params):
            if argument_name in names:
                names.remove(argument_name)
        (self._requires_grad if value else self._frozen_params).append(argument_name)

    def parameters(self):
        """(trainable, frozen) lists of onnx.TensorProto, after the block was called."""
        if self._parameters is None:
            raise RuntimeError("call the block inside an onnxblock.base context before parameters()")
        return self._parameters

    def to_model_proto(self):
        """(training model, eval model), after the block was called."""
        if self._training_model is None:
            raise RuntimeError("call the block inside an onnxblock.base context before to_model_proto()")
        return self._training_model, self._eval_model

    def __call__(self, *args, **kwargs):
        output = super().__call__(*args, **kwargs)
        model = self.base
        _graph_utils.register_graph_outputs(model, output)
        by_name = {t.name: t for t in model.graph.initializer}
        missing = [n for n in self._requires_grad + self._frozen_params if n not in by_name]
        if missing:
            raise RuntimeError(f"requires_grad: the model has no initializer named {', '.join(missing)}")
        self._parameters = ([by_name[n] for n in self._requires_grad], [by_name[n] for n in self._frozen_params])
        training, evaluation = _training_and_eval(_model_bytes(model), self._requires_grad, self._frozen_params)
        self._training_model = onnx.ModelProto.FromString(training)
        self._eval_model = onnx.ModelProto.FromString(evaluation)
        model.CopyFrom(self._training_model)
        return output


def loss_model(model, loss, loss_input_names=None):
    """The forward model with the loss block stacked on its outputs (loss_input_names, default all, are the
    block's arguments) and the loss as the only output: what otter's artifacts take with loss kind "none".
    For generate_artifacts(loss=<a Block>)."""
    with model_accessor.base(model) as accessor:
        inputs = list(loss_input_names) if loss_input_names else [o.name for o in model.graph.output]
        output = loss(*inputs)
        if not isinstance(output, str):
            raise RuntimeError(f"the loss block {type(loss).__name__} must return one output name")
        _graph_utils.register_graph_outputs(accessor.model, output)
        return accessor.model
