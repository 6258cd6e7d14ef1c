"""The losses of ONNX Runtime's onnxblock.loss, built from the same ONNX operators, so their training
graphs are the ones ONNX Runtime's tool makes. A target or labels input that the model lacks becomes a new
graph input."""
import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import _graph_utils, blocks

_REDUCTIONS = ("mean", "sum", "none")


def _reduce_block(reduction):
    if reduction not in _REDUCTIONS:
        raise RuntimeError(f"reduction '{reduction}' is not one of {', '.join(_REDUCTIONS)}")
    return {"mean": blocks.ReduceMean, "sum": blocks.ReduceSum, "none": blocks.PassThrough}[reduction]()


def _target(block, like, target_name):
    """target_name, declared as a graph input shaped like `like` when the model does not have it yet."""
    if target_name in _graph_utils.names_in(block.base):
        return target_name
    return blocks.InputLike(like)(target_name)


class MSELoss(blocks.Block):
    """reduce((input - target) ** 2)."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self._reduce = _reduce_block(reduction)
        self._sub, self._square = blocks.Sub(), blocks.Pow(2.0)

    def build(self, loss_input_name, target_name="target"):
        target = _target(self, loss_input_name, target_name)
        return self._reduce(self._square(self._sub(loss_input_name, target)))


class L1Loss(blocks.Block):
    """reduce(|input - target|)."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self._reduce = _reduce_block(reduction)
        self._sub, self._abs = blocks.Sub(), blocks.Abs()

    def build(self, loss_input_name, target_name="target"):
        target = _target(self, loss_input_name, target_name)
        return self._reduce(self._abs(self._sub(loss_input_name, target)))


class CrossEntropyLoss(blocks.Block):
    """SoftmaxCrossEntropyLoss of scores [N, C] against int64 labels [N] (a new input when missing), with
    optional class weights and ignore_index."""

    def __init__(self, weight=None, reduction="mean", ignore_index=None):
        super().__init__()
        _reduce_block(reduction)
        self._weight, self._reduction, self._ignore_index = weight, reduction, ignore_index

    def build(self, scores_input_name, labels_name="labels"):
        model = self.base
        if labels_name not in _graph_utils.names_in(model):
            scores = _graph_utils.value_info(model, scores_input_name)
            if scores is None:
                raise RuntimeError(f"CrossEntropyLoss: the type of '{scores_input_name}' is unknown")
            labels = onnx.ValueInfoProto.FromString(scores.SerializeToString())
            labels.name = labels_name
            labels.type.tensor_type.elem_type = onnx.TensorProto.INT64
            del labels.type.tensor_type.shape.dim[1:]  # [N, C] scores, [N] labels
            model.graph.input.append(labels)
        inputs = [scores_input_name, labels_name]
        if self._weight is not None:
            weight = _graph_utils.fresh_name(model, "celoss_weight")
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(self._weight, np.float32), weight))
            inputs.append(weight)
        outputs = [_graph_utils.fresh_name(model, "loss"), _graph_utils.fresh_name(model, "log_prob")]
        attributes = {"reduction": self._reduction}
        if self._ignore_index is not None:
            attributes["ignore_index"] = self._ignore_index
        model.graph.node.append(helper.make_node("SoftmaxCrossEntropyLoss", inputs, outputs,
                                                 name=_graph_utils.fresh_name(model, "SoftmaxCrossEntropyLoss"),
                                                 **attributes))
        return outputs[0]


class BCEWithLogitsLoss(blocks.Block):
    """reduce(-weight * (pos_weight * target * log(sigmoid(x)) + (1 - target) * log(1 - sigmoid(x))))."""

    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__()
        self._reduce = _reduce_block(reduction)
        self._weight, self._pos_weight = weight, pos_weight

    def _constant(self, prefix, value):
        name = _graph_utils.fresh_name(self.base, prefix)
        self.base.graph.initializer.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def build(self, loss_input_name, target_name="target"):
        target = _target(self, loss_input_name, target_name)
        one = self._constant("bceloss_one", [1.0])
        probability = blocks.Sigmoid()(loss_input_name)
        positive = blocks.Mul()(blocks.Log()(probability), target)
        if self._pos_weight is not None:
            positive = blocks.Mul()(positive, self._constant("bceloss_pos_weight", self._pos_weight))
        negative = blocks.Mul()(blocks.Log()(blocks.Sub()(one, probability)), blocks.Sub()(one, target))
        loss = blocks.Neg()(blocks.Add()(positive, negative))
        if self._weight is not None:
            loss = blocks.Mul()(self._constant("bceloss_weight", self._weight), loss)
        return self._reduce(loss)
