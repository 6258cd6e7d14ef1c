"""Optimizer models in the layout ONNX Runtime's training runtime (and otter's) expects: inputs
learning_rate FLOAT [1], step INT64 [1], then tensor sequences params, gradients, first_order_moments
(and second_order_moments for AdamW), one com.microsoft optimizer node, a BOOL flag output. Build one on
an empty base: `with onnxblock.empty_base() as accessor: onnxblock.optim.AdamW()(block.parameters())`."""
import onnx
from onnx import helper

from .. import _graph_utils, blocks

_SEQUENCES = ("params", "gradients", "first_order_moments", "second_order_moments")


def _declare_inputs(model, n_sequences, elem_type):
    model.graph.name = model.graph.name or "optimizer"
    model.graph.input.extend([helper.make_tensor_value_info("learning_rate", onnx.TensorProto.FLOAT, [1]),
                              helper.make_tensor_value_info("step", onnx.TensorProto.INT64, [1])])
    model.graph.input.extend(helper.make_tensor_sequence_value_info(name, elem_type, None)
                             for name in _SEQUENCES[:n_sequences])
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))


def _elem_type(parameters):
    trainable, _ = parameters
    if not trainable:
        raise RuntimeError("the optimizer needs at least one trainable parameter")
    return trainable[0].data_type


class ClipGradNorm(blocks.Block):
    """Clips the gradient sequence to an L2 norm of max_norm in place (com.microsoft InplaceClipGradNorm)."""

    def __init__(self, max_norm):
        super().__init__()
        self._max_norm = max_norm

    def build(self, gradients_name):
        output = _graph_utils.fresh_name(self.base, "clip_grad_norm_output")
        self.base.graph.node.append(helper.make_node(
            "InplaceClipGradNorm", [gradients_name], [output], domain="com.microsoft", max_norm=self._max_norm,
            norm_type="fro", name=_graph_utils.fresh_name(self.base, "InplaceClipGradNorm")))
        return output


class AdamW(blocks.Block):
    """com.microsoft AdamWOptimizer with ONNX Runtime's Python-tool defaults (eps 1e-6, weight_decay 0,
    adam_mode 1); called with TrainingBlock.parameters(), returns the flag's name."""

    def __init__(self, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, clip_grad=None):
        super().__init__()
        self._attributes = {"alpha": betas[0], "beta": betas[1], "epsilon": eps, "weight_decay": weight_decay,
                            "correct_bias": int(bool(bias_correction)), "adam_mode": 1}
        self._clip_grad = clip_grad

    def build(self, parameters):
        _declare_inputs(self.base, 4, _elem_type(parameters))
        gradients = self._clip_grad("gradients") if self._clip_grad is not None else "gradients"
        self.base.graph.node.append(helper.make_node(
            "AdamWOptimizer", ["learning_rate", "step", "params", gradients, "first_order_moments",
                               "second_order_moments"], ["adamw.updated_flag"], domain="com.microsoft",
            name="AdamWOptimizer", **self._attributes))
        self.base.graph.output.append(helper.make_tensor_value_info("adamw.updated_flag", onnx.TensorProto.BOOL, [1]))
        return "adamw.updated_flag"


class SGD(blocks.Block):
    """com.microsoft SGDOptimizerV2 (w -= lr * g); step and first_order_moments are inputs it ignores, as
    the runtime feeds every optimizer model the same way."""

    def __init__(self, clip_grad=None):
        super().__init__()
        self._clip_grad = clip_grad

    def build(self, parameters):
        _declare_inputs(self.base, 3, _elem_type(parameters))
        gradients = self._clip_grad("gradients") if self._clip_grad is not None else "gradients"
        self.base.graph.node.append(helper.make_node(
            "SGDOptimizerV2", ["learning_rate", "params", gradients], ["update_completed"],
            domain="com.microsoft", name="SGDOptimizerV2"))
        self.base.graph.output.append(helper.make_tensor_value_info("update_completed", onnx.TensorProto.BOOL, []))
        return "update_completed"
