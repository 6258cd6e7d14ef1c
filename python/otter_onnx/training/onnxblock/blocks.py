"""Building blocks: each call appends nodes to the base model (see onnxblock.base) and returns the name of
the tensor it produced, as ONNX Runtime's onnxblock.blocks."""
from abc import ABC, abstractmethod

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import _graph_utils, model_accessor


class Block(ABC):
    """Base of every block: subclasses implement build(*args) returning output name(s); calling the block
    runs build on the open base model (self.base). Subclasses need not call Block.__init__."""

    def __init__(self):
        self.base = None

    @abstractmethod
    def build(self, *args, **kwargs):
        """Appends this block's nodes to self.base; returns the output name(s)."""

    def __call__(self, *args, **kwargs):
        self.base = model_accessor.current_model()
        return self.build(*args, **kwargs)


class _Op(Block):
    """One ONNX node over the given inputs, with a fresh output name."""

    op_type = None
    attributes = {}

    def _node(self, inputs, **attributes):
        output = _graph_utils.fresh_name(self.base, f"{self.op_type.lower()}_output")
        self.base.graph.node.append(helper.make_node(
            self.op_type, list(inputs), [output], name=_graph_utils.fresh_name(self.base, self.op_type),
            **attributes))
        return output

    def build(self, *inputs):
        return self._node(inputs, **self.attributes)


class Add(_Op):
    op_type = "Add"


class Sub(_Op):
    op_type = "Sub"


class Mul(_Op):
    op_type = "Mul"


class Div(_Op):
    op_type = "Div"


class MatMul(_Op):
    op_type = "MatMul"


class Sigmoid(_Op):
    op_type = "Sigmoid"


class Log(_Op):
    op_type = "Log"


class Neg(_Op):
    op_type = "Neg"


class Abs(_Op):
    op_type = "Abs"


class Relu(_Op):
    op_type = "Relu"


class Softmax(_Op):
    op_type = "Softmax"


class Identity(_Op):
    op_type = "Identity"


class PassThrough(Block):
    """Returns its input unchanged (the "none" reduction of the losses)."""

    def build(self, input_name):
        return input_name


def _initializer(model, prefix, array):
    name = _graph_utils.fresh_name(model, prefix)
    model.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
    return name


class Constant(Block):
    """A float32 scalar constant (a Constant node); called with no arguments."""

    def __init__(self, value_float):
        super().__init__()
        self._value = value_float

    def build(self):
        output = _graph_utils.fresh_name(self.base, "constant_output")
        self.base.graph.node.append(helper.make_node(
            "Constant", [], [output], name=_graph_utils.fresh_name(self.base, "Constant"),
            value=numpy_helper.from_array(np.array(self._value, dtype=np.float32))))
        return output


class Pow(_Op):
    """input ** exponent, the exponent a float32 scalar initializer."""

    op_type = "Pow"

    def __init__(self, exponent):
        super().__init__()
        self._exponent = exponent

    def build(self, input_name):
        exponent = _initializer(self.base, "pow_exponent", np.array(self._exponent, dtype=np.float32))
        return self._node([input_name, exponent])


def _opset(model):
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), onnx.defs.onnx_opset_version())


class _Reduce(_Op):
    """Reduction over `axes` (all axes when None); axes move from attribute to input at the op's version."""

    axes_input_since = None

    def __init__(self, keepdims=False, axes=None):
        super().__init__()
        self._keepdims = int(keepdims)
        self._axes = axes

    def build(self, input_name):
        if self._axes is None:
            return self._node([input_name], keepdims=self._keepdims)
        if _opset(self.base) >= self.axes_input_since:
            axes = _initializer(self.base, "axes", np.array(self._axes, dtype=np.int64))
            return self._node([input_name, axes], keepdims=self._keepdims)
        return self._node([input_name], keepdims=self._keepdims, axes=list(self._axes))


class ReduceMean(_Reduce):
    op_type = "ReduceMean"
    axes_input_since = 18


class ReduceSum(_Reduce):
    op_type = "ReduceSum"
    axes_input_since = 13


class Clip(_Op):
    """input clamped to [clip_min, clip_max] (float32 scalar initializers; None: unbounded)."""

    op_type = "Clip"

    def __init__(self, clip_min=None, clip_max=None):
        super().__init__()
        self._bounds = (clip_min, clip_max)

    def build(self, input_name):
        bounds = ["" if b is None else _initializer(self.base, "clip_bound", np.array(b, dtype=np.float32))
                  for b in self._bounds]
        while bounds and bounds[-1] == "":
            bounds.pop()
        return self._node([input_name, *bounds])


class Cast(_Op):
    """input converted to element type `to` (an onnx.TensorProto.DataType)."""

    op_type = "Cast"

    def __init__(self, to):
        super().__init__()
        self._to = to

    def build(self, input_name):
        return self._node([input_name], to=self._to)


class Linear(Block):
    """x @ W^T + b (Gemm, transB=1) with new parameters W [out_features, in_features] and b [out_features],
    initialized as torch.nn.Linear (uniform in +-1/sqrt(in_features)); names after `name`."""

    def __init__(self, in_features, out_features, bias=True, alpha=1.0, beta=1.0, name="linear", seed=0):
        super().__init__()
        self._shape = (out_features, in_features)
        self._bias, self._alpha, self._beta, self._name = bias, alpha, beta, name
        self._rng = np.random.default_rng(seed)

    def build(self, input_name):
        bound = 1.0 / np.sqrt(self._shape[1])
        weight = _initializer(self.base, self._name + ".weight",
                              self._rng.uniform(-bound, bound, self._shape).astype(np.float32))
        inputs = [input_name, weight]
        if self._bias:
            inputs.append(_initializer(self.base, self._name + ".bias",
                                       self._rng.uniform(-bound, bound, self._shape[0]).astype(np.float32)))
        output = _graph_utils.fresh_name(self.base, self._name + "_output")
        self.base.graph.node.append(helper.make_node("Gemm", inputs, [output], transB=1, alpha=self._alpha,
                                                     beta=self._beta,
                                                     name=_graph_utils.fresh_name(self.base, "Gemm")))
        return output


class InputLike(Block):
    """A new graph input `input_name` with the type and shape of tensor `like`."""

    def __init__(self, like):
        super().__init__()
        self._like = like

    def build(self, input_name):
        info = _graph_utils.value_info(self.base, self._like)
        if info is None:
            raise RuntimeError(f"InputLike: the type of '{self._like}' is unknown")
        new_input = onnx.ValueInfoProto.FromString(info.SerializeToString())
        new_input.name = input_name
        self.base.graph.input.append(new_input)
        return input_name
