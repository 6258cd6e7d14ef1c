"""otter's gradients of recurrent layers exported from PyTorch against torch.autograd.

Each case is a small torch.nn.Module: an nn.LSTM, nn.GRU or nn.RNN (seq 5, batch 3, input 4,
hidden 6) and an nn.Linear head reading the last step of the output sequence, the final hidden state
or (LSTM) the final cell state, so the gradients flow in through Y, Y_h and Y_c. Directions: forward
and bidirectional; batch_first; two stacked layers; RNN with tanh and relu. GRU exports with
linear_before_reset = 1 (torch's formula).

1. torch.onnx.export (opset 14) writes the model: with constant folding, the usual export, where
   W, R and B are new initializers holding torch's weights in ONNX's gate order; and one LSTM without
   folding, where the gradient also flows back through the Slice / Concat / Unsqueeze nodes that
   reorder the gates into torch's own parameters.
2. `otter artifacts MODEL -o DIR --loss MSELoss` makes the artifacts (the training model passes
   onnx.checker with full_check); otter's runtime (libotter.so
   through ctypes) runs training_model.onnx once with zeroed gradient buffers; they then hold the
   gradients.
3. The module in float64 with the same weights, input and target gives torch's loss and gradients;
   an ONNX W / R / B initializer's reference is torch's weight_ih / weight_hh / (bias_ih, bias_hh) of
   that layer and direction with the gate blocks reordered (LSTM ifgo -> iofc, GRU rzn -> zrh).

Norm: per parameter, max|otter - torch| / max|torch| <= 1e-4 (otter runs the recurrent kernels in
float32, as everything else here); the loss to 1e-5 relative. Skips (exit 77) only without torch.
"""
import os
import sys

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("SKIP: python3-torch is not installed")
    sys.exit(77)

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import LIB, check, run_cli  # noqa: E402
from test_torch_grads import Otter, Session  # noqa: E402

WORK = tl.work_dir("rnn_grad_torch")
GRAD_TOL = 1e-4
LOSS_TOL = 1e-5
SEQ, BATCH, INPUT, HIDDEN, OUT = 5, 3, 4, 6, 2
# ONNX gate block k is torch's block ORDER[kind][k]
ORDER = {"LSTM": [0, 3, 1, 2], "GRU": [1, 0, 2], "RNN": [0]}


class Net(nn.Module):
    def __init__(self, kind, read, bidirectional=False, batch_first=False, layers=1, nonlinearity="tanh"):
        super().__init__()
        extra = {"nonlinearity": nonlinearity} if kind == "RNN" else {}
        self.kind, self.read, self.batch_first = kind, read, batch_first
        self.rnn = getattr(nn, kind)(INPUT, HIDDEN, num_layers=layers, bidirectional=bidirectional,
                                     batch_first=batch_first, **extra)
        dirs = 2 if bidirectional else 1
        self.fc = nn.Linear(HIDDEN * dirs if read != "y_h_c" else 2 * HIDDEN * dirs, OUT)

    def forward(self, x):
        y, state = self.rnn(x)
        h = state[0] if self.kind == "LSTM" else state
        if self.read == "y":  # the last step of Y
            feat = y[:, -1] if self.batch_first else y[-1]
        elif self.read == "y_h":  # the last layer's final hidden state, every direction
            d = 2 if self.rnn.bidirectional else 1
            feat = h[-d:].transpose(0, 1).reshape(x.shape[0 if self.batch_first else 1], -1)
        else:  # y_h_c: the last layer's final hidden and cell states, every direction
            d = 2 if self.rnn.bidirectional else 1
            c = state[1]
            n = x.shape[0 if self.batch_first else 1]
            feat = torch.cat([h[-d:].transpose(0, 1).reshape(n, -1), c[-d:].transpose(0, 1).reshape(n, -1)], 1)
        return self.fc(feat)


CASES = [
    ("lstm_y", dict(kind="LSTM", read="y"), True),
    ("lstm_h_c_bidirectional", dict(kind="LSTM", read="y_h_c", bidirectional=True), True),
    ("lstm_batch_first_2_layers", dict(kind="LSTM", read="y", batch_first=True, layers=2), True),
    ("lstm_bidirectional_unfolded", dict(kind="LSTM", read="y", bidirectional=True), False),
    ("gru_y", dict(kind="GRU", read="y"), True),
    ("gru_h_bidirectional", dict(kind="GRU", read="y_h", bidirectional=True), True),
    ("gru_batch_first_2_layers", dict(kind="GRU", read="y_h", batch_first=True, layers=2), True),
    ("rnn_tanh_bidirectional", dict(kind="RNN", read="y", bidirectional=True), True),
    ("rnn_relu_h", dict(kind="RNN", read="y_h", nonlinearity="relu"), True),
]

worst = [0.0, ""]


def reference_of(onnx_model, kind, torch_grads):
    """{ONNX initializer: torch's gradient of the same values}: the recurrent nodes' W, R, B (the
    k-th node is layer k) with the gate blocks reordered, and every initializer torch names."""
    ref = {n: g for n, g in torch_grads.items()}
    inits = {t.name for t in onnx_model.graph.initializer}
    nodes = [n for n in onnx_model.graph.node if n.op_type == kind]
    for layer, node in enumerate(nodes):
        dirs = 2 if any(a.name == "direction" and a.s == b"bidirectional" for a in node.attribute) else 1

        def blocks(a):
            parts = np.split(a, len(ORDER[kind]), axis=0)
            return np.concatenate([parts[k] for k in ORDER[kind]], axis=0)

        def stacked(name):
            return np.stack([blocks(torch_grads[f"rnn.{name}_l{layer}" + ("_reverse" if d else "")])
                             for d in range(dirs)])
        w, r, b = node.input[1], node.input[2], node.input[3] if len(node.input) > 3 else ""
        for name, value in ((w, stacked("weight_ih")), (r, stacked("weight_hh")),
                            (b, np.concatenate([stacked("bias_ih"), stacked("bias_hh")], axis=1))):
            if name in inits:
                ref[name] = value
    return ref


def run_case(otter, label, spec, fold, seed):
    torch.manual_seed(seed)
    net = Net(**spec)
    d = os.path.join(WORK, label)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    shape = (BATCH, SEQ, INPUT) if spec.get("batch_first") else (SEQ, BATCH, INPUT)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    target = rng.standard_normal((BATCH, OUT)).astype(np.float32)
    torch.onnx.export(net, torch.from_numpy(x), path, opset_version=14, do_constant_folding=fold,
                      input_names=["input"], output_names=["output"])
    model = onnx.load(path)
    rc, out = run_cli("artifacts", path, "-o", d, "--loss", "MSELoss")
    check(rc == 0, f"{label}: otter artifacts -> exit {rc}" + ("" if rc == 0 else f": {out[-600:]}"))
    if rc != 0:
        return
    training = onnx.load(os.path.join(d, "training_model.onnx"))
    try:
        onnx.checker.check_model(training, full_check=True)
        msg = "passes"
    except Exception as e:  # onnx raises ValidationError or InferenceError
        msg = f"fails: {str(e).splitlines()[0][:300]}"
    check(msg == "passes", f"{label}: onnx.checker(full_check=True) training_model.onnx {msg}")
    kind = spec["kind"]
    ops = sorted({f"{n.domain}:{n.op_type}" for n in training.graph.node if n.op_type.startswith(kind)})
    if kind == "RNN":  # ORT has no RNN gradient: the forward node stays, com.otter RNNGrad differentiates it
        want = [":RNN", "com.otter:RNNGrad"]
    else:
        want = [f"com.microsoft:{kind}Grad", f"com.microsoft:{kind}Training"]
    check(ops == want, f"{label}: the training model's recurrent operators {ops}"
          + ("" if ops == want else f", expected {want}"))

    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    sess = Session(otter, os.path.join(d, "training_model.onnx"))
    feeds = {}
    try:
        buffers = {n: n[: -len("_grad.accumulation.buffer")] for n in sess.inputs
                   if n.endswith("_grad.accumulation.buffer")}
        feeds = {"input": otter.tensor(x), "target": otter.tensor(target),
                 "lazy_reset_grad": otter.tensor(np.array([True]))}
        for n in sess.inputs:
            if n in inits:
                feeds[n] = otter.tensor(inits[n])
        for b, p in buffers.items():
            feeds[b] = otter.tensor(np.zeros_like(inits[p]))
        loss_otter = float(sess.run(feeds, [sess.outputs[0]])[0])
        grads = {p: Otter.to_numpy(feeds[b]).astype(np.float64) for b, p in buffers.items()}
    finally:
        for t in feeds.values():
            otter.lib.otter_tensor_free(t)
        sess.free()

    net = net.double()
    value = nn.MSELoss()(net(torch.from_numpy(x).double()), torch.from_numpy(target).double())
    net.zero_grad()
    value.backward()
    ref = reference_of(model, spec["kind"], {n: p.grad.numpy() for n, p in net.named_parameters()})
    lerr = abs(loss_otter - float(value)) / abs(float(value))
    check(lerr <= LOSS_TOL, f"{label}: loss otter {loss_otter:.8g} torch {float(value):.8g} rel err {lerr:.2e}")
    missing = sorted(set(grads) - set(ref))
    check(not missing and grads, f"{label}: {len(grads)} trained initializers, each with a torch reference"
          + (f"; none for {missing}" if missing else ""))
    tl.check_gradients(label, grads, ref, GRAD_TOL, worst)


def main():
    if not os.path.exists(LIB):
        print(f"FAIL {LIB} was not built")
        return 1
    otter = Otter(LIB)
    os.makedirs(WORK, exist_ok=True)
    torch.set_num_threads(1)
    for seed, (label, spec, fold) in enumerate(CASES, 1):
        try:
            run_case(otter, label, spec, fold, seed)
        except Exception as e:  # one case's crash must not hide the others
            check(False, f"{label}: {type(e).__name__}: {e}")
    print(f"worst gradient error {worst[0]:.3e} ({worst[1]}), tolerance {GRAD_TOL:g}")
    return tl.finish("test_rnn_grad_torch")


if __name__ == "__main__":
    sys.exit(main())
