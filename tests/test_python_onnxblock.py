"""otter_onnx.training.onnxblock, ONNX Runtime's onnxblock over libotter: the guide's WeightedAverageLoss
(0.4 * MSE(output1, target1) + 0.6 * MSE(output2, target2)) with only the import changed, stacked on a
two-headed model through generate_artifacts as the guide calls it. The training model's loss and gradients
equal numpy's, and otter's training session trains it (each loss equal to numpy's at the parameters the
session holds). Also TrainingBlock, ForwardBlock, optim, and the other losses and blocks against numpy on an
empty base. Skips (77) only when onnx or numpy is missing."""
import ctypes
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.join(tl.SRC, "python"))
os.environ.setdefault("OTTER_LIB", tl.LIB)
import otter_onnx.training.onnxblock as onnxblock  # noqa: E402  (the guide's onnxruntime.training.onnxblock)
from otter_onnx import _graphlib, _lib  # noqa: E402
from otter_onnx.training import artifacts  # noqa: E402  (the guide's onnxruntime.training.artifacts)
from otter_onnx.training.onnxblock import _graph_utils  # noqa: E402

work = tl.work_dir("test_python_onnxblock")
os.makedirs(work, exist_ok=True)


# The guide's custom loss, unchanged.
class WeightedAverageLoss(onnxblock.Block):
    def __init__(self):
        self._loss1 = onnxblock.loss.MSELoss()
        self._loss2 = onnxblock.loss.MSELoss()
        self._w1 = onnxblock.blocks.Constant(0.4)
        self._w2 = onnxblock.blocks.Constant(0.6)
        self._add = onnxblock.blocks.Add()
        self._mul = onnxblock.blocks.Mul()

    def build(self, loss_input_name1, loss_input_name2):
        # The build method defines how the block should be stacked on top of
        # loss_input_name1 and loss_input_name2

        # Returns weighted average of the two losses
        return self._add(
            self._mul(self._w1(), self._loss1(loss_input_name1, target_name="target1")),
            self._mul(self._w2(), self._loss2(loss_input_name2, target_name="target2"))
        )


# The guide's model: two outputs; weight1/bias1/weight2/bias2 trained, weight3/bias3 frozen.
rng = np.random.default_rng(7)
params = {"weight3": (5, 4), "bias3": (5,), "weight1": (3, 5), "bias1": (3,), "weight2": (2, 5), "bias2": (2,)}
params = {k: (rng.standard_normal(s) * 0.5).astype(np.float32) for k, s in params.items()}
graph = helper.make_graph(
    [helper.make_node("Gemm", ["x", "weight3", "bias3"], ["hidden"], transB=1),
     helper.make_node("Gemm", ["hidden", "weight1", "bias1"], ["output1"], transB=1),
     helper.make_node("Gemm", ["hidden", "weight2", "bias2"], ["output2"], transB=1)],
    "two_heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 4])],
    [helper.make_tensor_value_info("output1", TensorProto.FLOAT, [8, 3]),
     helper.make_tensor_value_info("output2", TensorProto.FLOAT, [8, 2])],
    [numpy_helper.from_array(v, k) for k, v in params.items()])
base_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
requires_grad = ["weight1", "bias1", "weight2", "bias2"]
frozen_params = ["weight3", "bias3"]

x = rng.standard_normal((8, 4)).astype(np.float32)
target1 = rng.standard_normal((8, 3)).astype(np.float32)
target2 = rng.standard_normal((8, 2)).astype(np.float32)
feeds = {"x": x, "target1": target1, "target2": target2}


def reference(p):
    """numpy's loss and gradients of the trained parameters (float64)."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    hidden = x @ p["weight3"].T + p["bias3"]
    out1, out2 = hidden @ p["weight1"].T + p["bias1"], hidden @ p["weight2"].T + p["bias2"]
    loss = 0.4 * np.mean((out1 - target1) ** 2) + 0.6 * np.mean((out2 - target2) ** 2)
    d1, d2 = 0.4 * 2 * (out1 - target1) / out1.size, 0.6 * 2 * (out2 - target2) / out2.size
    grads = {"weight1": d1.T @ hidden, "bias1": d1.sum(0), "weight2": d2.T @ hidden, "bias2": d2.sum(0)}
    return loss, grads


def close(a, b, tol=1e-5):
    return np.allclose(np.asarray(a, np.float64), b, rtol=tol, atol=tol)


# ---- the loss block on the model, as generate_artifacts(loss=WeightedAverageLoss()) stacks it ------------
my_custom_loss = WeightedAverageLoss()
with_loss = onnxblock.loss_model(base_model, my_custom_loss)
tl.check([i.name for i in with_loss.graph.input] == ["x", "target1", "target2"],
         "the MSE losses add target1 and target2 as inputs shaped like the outputs")
tl.check(len(with_loss.graph.output) == 1 and not with_loss.graph.output[0].type.tensor_type.shape.dim,
         "the loss is the only output, a scalar")
tl.check(len(base_model.graph.node) == 3, "the base model is left unchanged")
loss_np, grads_np = reference(params)
(loss,) = _graphlib.run(with_loss.SerializeToString(), feeds)
tl.check(close(loss, loss_np), f"forward + loss run by otter = numpy's 0.4 MSE1 + 0.6 MSE2 ({loss} vs {loss_np:.7f})")


# ---- TrainingBlock: the training and eval models --------------------------------------------------------
class TwoHeadTraining(onnxblock.TrainingBlock):
    def __init__(self):
        super().__init__()
        self.loss = WeightedAverageLoss()

    def build(self, output1, output2):
        return self.loss(output1, output2)


block = TwoHeadTraining()
for name in requires_grad:
    block.requires_grad(name)
for name in frozen_params:
    block.requires_grad(name, False)
try:
    block.to_model_proto()
    tl.check(False, "to_model_proto() before the block ran raises")
except RuntimeError:
    tl.check(True, "to_model_proto() before the block ran raises")
with onnxblock.base(base_model) as accessor:
    loss_name = block("output1", "output2")
    in_context = accessor.model
training_model, eval_model = block.to_model_proto()
trainable, frozen = block.parameters()
tl.check([t.name for t in trainable] == requires_grad and [t.name for t in frozen] == frozen_params,
         "parameters() gives the trainable and frozen initializers")
tl.check(in_context.graph.output[0].name == loss_name and len(in_context.graph.output) == 5,
         "the base context holds the training model (loss + 4 gradient outputs)")
train_feeds = dict(feeds, **params, lazy_reset_grad=np.array([True]))
for name in requires_grad:
    train_feeds[name + "_grad.accumulation.buffer"] = np.zeros_like(params[name])
# The accumulators update their buffers in place (their outputs are flags): read the gradients they add.
probe = onnx.ModelProto.FromString(training_model.SerializeToString())
probe.graph.output.extend(helper.make_tensor_value_info(n + "_grad", TensorProto.FLOAT, params[n].shape)
                          for n in requires_grad)
outs = _graphlib.run(probe.SerializeToString(), train_feeds)
tl.check(close(outs[0], loss_np), "the training model's loss = numpy's")
worst = 0.0
for name, got in zip(requires_grad, outs[-len(requires_grad):]):
    worst = tl.worse(worst, float(np.max(np.abs(got - grads_np[name]))))
tl.check(worst < 1e-5, f"the training model's gradients = numpy's (max error {worst:.2e})")
(eval_loss,) = _graphlib.run(eval_model.SerializeToString(), dict(feeds, **params))[:1]
tl.check(close(eval_loss, loss_np), "the eval model's loss = numpy's")

# ---- artifacts from the custom loss, trained by otter's training session -------------------------------
# The guide's generate_artifacts call, verbatim, in a folder of its own (it writes into the current one).
artifacts_dir = os.path.join(work, "artifacts")
shutil.rmtree(artifacts_dir, ignore_errors=True)
os.makedirs(artifacts_dir)
os.chdir(artifacts_dir)
artifacts.generate_artifacts(base_model, requires_grad = requires_grad, frozen_params = frozen_params,
                             loss = my_custom_loss, optimizer = artifacts.OptimType.AdamW)
os.chdir(work)
tl.check(all(os.path.exists(os.path.join(artifacts_dir, f)) for f in
             ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint")),
         "the four artifacts are written")

lib = tl.load_lib()
P = ctypes.c_void_p
for fname, args, res in [
        ("otter_training_session_create_from_dir",
         [ctypes.POINTER(P), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(tl.TrainingOptions)],
         ctypes.c_int),
        ("otter_training_session_free", [P], None),
        ("otter_training_train_step",
         [P, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(tl.TP), ctypes.c_size_t,
          ctypes.POINTER(tl.TP)], ctypes.c_int),
        ("otter_training_optimizer_step", [P], ctypes.c_int),
        ("otter_training_lazy_reset_grad", [P], ctypes.c_int),
        ("otter_training_set_lr", [P, ctypes.c_float], ctypes.c_int),
        ("otter_training_get_param", [P, ctypes.c_char_p, ctypes.POINTER(tl.TP)], ctypes.c_int)]:
    fn = getattr(lib, fname)
    fn.argtypes, fn.restype = args, res


def train(directory, steps=20):
    """steps AdamW steps at lr 0.02 in otter's training session on the artifacts in directory: the losses,
    the worst relative error of a loss against numpy's at the session's parameters, the final parameters."""
    session = P()
    if lib.otter_training_session_create_from_dir(ctypes.byref(session), directory.encode(), None, None,
                                                  ctypes.byref(tl.TrainingOptions(1, False, 0))) != 0:
        raise RuntimeError(tl.last_error(lib))

    def ok(status):
        if status != 0:
            raise RuntimeError(tl.last_error(lib))

    def session_params():
        result = {}
        for name in params:
            t = tl.TP()
            ok(lib.otter_training_get_param(session, name.encode(), ctypes.byref(t)))
            result[name] = tl.tensor_to_array(t)
            lib.otter_tensor_free(t)
        return result

    def train_step():
        inputs = [tl.tensor_from_array(lib, a) for a in feeds.values()]
        names = (ctypes.c_char_p * 3)(*[n.encode() for n in feeds])
        out = (tl.TP * 1)()
        try:
            ok(lib.otter_training_train_step(session, 3, names, (tl.TP * 3)(*inputs), 1, out))
            return float(tl.tensor_to_array(out[0]))
        finally:
            for t in inputs:
                lib.otter_tensor_free(t)
            lib.otter_tensor_free(out[0])

    try:
        ok(lib.otter_training_set_lr(session, 0.02))
        losses, worst = [], 0.0
        for _ in range(steps):
            held = session_params()
            losses.append(train_step())
            expected, _ = reference(held)
            worst = tl.worse(worst, abs(losses[-1] - expected) / max(abs(expected), 1e-12))
            ok(lib.otter_training_optimizer_step(session))
            ok(lib.otter_training_lazy_reset_grad(session))
        return losses, worst, session_params()
    finally:
        lib.otter_training_session_free(session)


losses, worst, final = train(artifacts_dir)
print(f"losses: {losses[0]:.6f} -> {losses[-1]:.6f}")
tl.check(worst < 1e-5, f"every training step's loss = numpy's at the session's parameters (rel. error {worst:.2e})")
tl.check(losses[-1] < 0.9 * losses[0], f"20 AdamW steps (lr 0.02) lower the loss ({losses[0]:.4f} -> {losses[-1]:.4f})")
tl.check(all(np.array_equal(final[k], params[k]) for k in frozen_params)
         and not any(np.array_equal(final[k], params[k]) for k in requires_grad),
         "frozen parameters stay, trained ones move")

# ---- optim.AdamW / SGD: optimizer models the training session runs --------------------------------------
with onnxblock.empty_base() as accessor:
    onnxblock.optim.AdamW()(block.parameters())
    adamw_model = accessor.model
own_dir = os.path.join(work, "own_optimizer")
shutil.rmtree(own_dir, ignore_errors=True)
shutil.copytree(artifacts_dir, own_dir)
onnx.save(adamw_model, os.path.join(own_dir, "optimizer_model.onnx"))
own_losses, _, own_final = train(own_dir)
tl.check(own_losses == losses and all(np.array_equal(own_final[k], final[k]) for k in params),
         "optim.AdamW's model trains exactly as the artifacts' optimizer model")
# The whole set from onnxblock alone: the TrainingBlock's models, optim.AdamW's, save_checkpoint's file.
block_dir = os.path.join(work, "from_blocks")
shutil.rmtree(block_dir, ignore_errors=True)
os.makedirs(block_dir)
onnx.save(training_model, os.path.join(block_dir, "training_model.onnx"))
onnx.save(eval_model, os.path.join(block_dir, "eval_model.onnx"))
onnx.save(adamw_model, os.path.join(block_dir, "optimizer_model.onnx"))
onnxblock.save_checkpoint(block.parameters(), os.path.join(block_dir, "checkpoint"))
onnxblock.save_checkpoint(block.parameters(), os.path.join(block_dir, "nominal"), nominal_checkpoint=True)
for fname, args, res in [("otter_checkpoint_load", [ctypes.POINTER(P), ctypes.c_char_p], ctypes.c_int),
                         ("otter_checkpoint_is_nominal", [P], ctypes.c_bool),
                         ("otter_checkpoint_param_count", [P, ctypes.c_int], ctypes.c_size_t),
                         ("otter_checkpoint_free", [P], None)]:
    fn = getattr(lib, fname)
    fn.argtypes, fn.restype = args, res
for fname, nominal in (("checkpoint", False), ("nominal", True)):
    state = P()
    if lib.otter_checkpoint_load(ctypes.byref(state), os.path.join(block_dir, fname).encode()) != 0:
        raise RuntimeError(tl.last_error(lib))
    counts = (lib.otter_checkpoint_param_count(state, 0), lib.otter_checkpoint_param_count(state, 1))
    tl.check(lib.otter_checkpoint_is_nominal(state) == nominal and counts == (4, 2),
             f"save_checkpoint(nominal_checkpoint={nominal}): 4 trainable, 2 frozen, nominal {nominal}")
    lib.otter_checkpoint_free(state)
block_losses, _, block_final = train(block_dir)
tl.check(block_losses == losses and all(np.array_equal(block_final[k], final[k]) for k in params),
         "TrainingBlock + optim.AdamW + save_checkpoint train exactly as generate_artifacts' files")
with onnxblock.empty_base() as accessor:
    onnxblock.optim.SGD()(block.parameters())
    sgd_model = accessor.model
onnx.save(sgd_model, os.path.join(own_dir, "optimizer_model.onnx"))
sgd_losses, _, sgd_final = train(own_dir, steps=1)
first_grads = reference(params)[1]
worst = 0.0
for name in requires_grad:
    worst = tl.worse(worst, float(np.max(np.abs(sgd_final[name] - (params[name] - 0.02 * first_grads[name])))))
tl.check(worst < 1e-6, f"optim.SGD's model: one step is w - 0.02 * numpy's gradient (max error {worst:.2e})")

with onnxblock.empty_base() as accessor:
    onnxblock.optim.SGD(clip_grad=onnxblock.optim.ClipGradNorm(0.05))(block.parameters())
    onnx.save(accessor.model, os.path.join(own_dir, "optimizer_model.onnx"))
_, _, clipped = train(own_dir, steps=1)
norm = np.sqrt(sum(np.sum(first_grads[k] ** 2) for k in requires_grad))
scale = min(1.0, 0.05 / (norm + 1e-6))
worst = 0.0
for name in requires_grad:
    worst = tl.worse(worst, float(np.max(np.abs(clipped[name] - (params[name] - 0.02 * scale * first_grads[name])))))
tl.check(norm > 0.05 and worst < 1e-6,
         f"ClipGradNorm(0.05) scales the gradients by 0.05 / {norm:.3f} before SGD (max error {worst:.2e})")

# ---- the other losses and blocks against numpy, built on an empty base ---------------------------------
pred = rng.standard_normal((6, 4)).astype(np.float32)
target = rng.random((6, 4)).astype(np.float32)
labels = rng.integers(0, 4, 6).astype(np.int64)


def on_empty_base(build, inputs):
    """A model from an empty base: `inputs` ({name: array}) declared, build() returning the output."""
    with onnxblock.empty_base(opset_version=17) as accessor:
        for name, value in inputs.items():
            accessor.model.graph.input.append(helper.make_tensor_value_info(
                name, _lib.otter_dtype(value.dtype), value.shape))
        out = build()
        _graph_utils.register_graph_outputs(accessor.model, out)
        model = accessor.model
    return _graphlib.run(model.SerializeToString(), inputs)[0]


sig = 1 / (1 + np.exp(-pred.astype(np.float64)))
log_softmax = pred - np.log(np.exp(pred.astype(np.float64)).sum(1, keepdims=True))
cases = [
    ("MSELoss sum", lambda: onnxblock.loss.MSELoss("sum")("pred", "target"), np.sum((pred - target) ** 2)),
    ("L1Loss mean", lambda: onnxblock.loss.L1Loss()("pred", "target"), np.mean(np.abs(pred - target))),
    ("L1Loss none", lambda: onnxblock.loss.L1Loss("none")("pred", "target"), np.abs(pred - target)),
    ("BCEWithLogitsLoss", lambda: onnxblock.loss.BCEWithLogitsLoss()("pred", "target"),
     np.mean(-(target * np.log(sig) + (1 - target) * np.log(1 - sig)))),
    ("BCEWithLogitsLoss pos_weight", lambda: onnxblock.loss.BCEWithLogitsLoss(
        pos_weight=np.array([2.0, 1.0, 0.5, 1.0], np.float32))("pred", "target"),
     np.mean(-(np.array([2.0, 1.0, 0.5, 1.0]) * target * np.log(sig) + (1 - target) * np.log(1 - sig)))),
    ("CrossEntropyLoss", lambda: onnxblock.loss.CrossEntropyLoss()("pred", "labels"),
     -np.mean(log_softmax[np.arange(6), labels])),
    ("Clip", lambda: onnxblock.blocks.Clip(-0.5, 0.5)("pred"), np.clip(pred, -0.5, 0.5)),
    ("ReduceSum axes", lambda: onnxblock.blocks.ReduceSum(axes=[1])("pred"), pred.sum(1)),
    ("ReduceMean keepdims", lambda: onnxblock.blocks.ReduceMean(keepdims=True, axes=[0])("pred"),
     pred.mean(0, keepdims=True)),
    ("Div Neg Abs", lambda: onnxblock.blocks.Div()(onnxblock.blocks.Neg()("pred"),
                                                   onnxblock.blocks.Abs()("target")), -pred / np.abs(target)),
    ("Pow Log Sigmoid", lambda: onnxblock.blocks.Pow(3.0)(onnxblock.blocks.Log()(onnxblock.blocks.Sigmoid()("pred"))),
     np.log(sig) ** 3),
    ("Cast", lambda: onnxblock.blocks.Cast(TensorProto.INT32)(onnxblock.blocks.Sub()("pred", "target")),
     (pred - target).astype(np.int32)),
]
for what, build, expected in cases:
    got = on_empty_base(build, {"pred": pred, "target": target, "labels": labels})
    tl.check(got.shape == np.shape(expected) and close(got, expected),
             f"{what} = numpy's (max error {float(np.max(np.abs(got - expected))):.2e})")

lin = onnxblock.blocks.Linear(4, 3, name="fc")
got = on_empty_base(lambda: lin("pred"), {"pred": pred})
tl.check(got.shape == (6, 3), "Linear(4, 3) maps [6, 4] to [6, 3]")


class Head(onnxblock.ForwardBlock):
    def __init__(self):
        super().__init__()
        self.relu = onnxblock.blocks.Relu()

    def build(self, name):
        return self.relu(name)


head = Head()
with onnxblock.base(base_model):
    head("output1")
forward = head.to_model_proto()
(relu_out,) = _graphlib.run(forward.SerializeToString(), {"x": x})
hidden = x @ params["weight3"].T + params["bias3"]
tl.check([o.name for o in forward.graph.output] == [forward.graph.node[-1].output[0]]
         and close(relu_out, np.maximum(hidden @ params["weight1"].T + params["bias1"], 0)),
         "ForwardBlock makes its output the model's output (relu(output1))")
try:
    onnxblock.blocks.Add()("a", "b")
    tl.check(False, "a block outside a base context raises")
except RuntimeError as e:
    tl.check("base" in str(e), f"a block outside a base context raises ({e})")

sys.exit(tl.finish("test_python_onnxblock"))
