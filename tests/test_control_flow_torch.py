"""Gradients through control flow of PyTorch-exported models, against torch.autograd.

Two TorchScript modules exported at opset 17:
  loop: h = tanh(h @ w + x[t]) for t in range(x.size(0)): a Loop (M a constant once the input shape is
        fixed, the body's condition an outer constant true), which otter unrolls;
  if:   three tanh(h @ w) steps, then Linear(h) if x.sum() > 0 else 2 * h: an If on a computed condition,
        whose gradient is an If over the branches' gradient graphs.
`otter artifacts MODEL --loss MSELoss` makes the artifacts; the training model must pass
onnx.checker.check_model(full_check=True). `otter run` runs a copy of it that also outputs every
`<p>_grad` on inputs drawn with several seeds (for `if`, seeds where x.sum() is positive and where it is
negative, so both branches run); torch computes the loss and gradients of the same module on the same
values. Norm: max|otter - torch| / max(max|torch|, 1e-3) per parameter, tolerance 1e-5; a parameter the
taken branch doesn't use must get exactly zero. The loss to 1e-6 relative.
"""
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402

WORK = tl.work_dir("control_flow_torch")
os.makedirs(WORK, exist_ok=True)
GRAD_TOL = 1e-5
LOSS_TOL = 1e-6


class LoopModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4) * 0.5)

    def forward(self, x):
        h = torch.zeros(1, 4)
        for t in range(x.size(0)):
            h = torch.tanh(h @ self.w + x[t])
        return h


class IfModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 4)
        self.w = torch.nn.Parameter(torch.randn(4, 4) * 0.5)

    def forward(self, x):
        h = x
        for _ in range(3):
            h = torch.tanh(h @ self.w)
        if bool(x.sum() > 0):
            y = self.l(h)
        else:
            y = h * 2.0
        return y


def export(name, module, x_shape):
    torch.manual_seed(0)
    m = torch.jit.script(module())
    path = os.path.join(WORK, name + ".onnx")
    torch.onnx.export(m, (torch.randn(*x_shape),), path, input_names=["x"], output_names=["y"], opset_version=17)
    return m, path


def run_case(name, module, x_shape, y_shape, seeds, expect_op):
    scripted, path = export(name, module, x_shape)
    ops = [n.op_type for n in onnx.load(path).graph.node]
    tl.check(expect_op in ops, f"{name}: the export has a {expect_op} node")
    art = os.path.join(WORK, name + "_artifacts")
    code, out = tl.run_cli("artifacts", path, "-o", art, "--loss", "MSELoss", "--optimizer", "none")
    tl.check(code == 0, f"{name}: otter artifacts ({out.splitlines()[-1] if out else ''})")
    if code != 0:
        print(out)
        return
    tm = onnx.load(os.path.join(art, "training_model.onnx"))
    try:
        onnx.checker.check_model(tm, full_check=True)
        tl.check(True, f"{name}: training model passes onnx.checker (full_check)")
    except onnx.checker.ValidationError as e:
        tl.check(False, f"{name}: training model fails onnx.checker: {e}")
    params = dict(scripted.named_parameters())
    for p in params:
        tm.graph.output.append(onnx.helper.make_tensor_value_info(p + "_grad", onnx.TensorProto.FLOAT, None))
    with_grads = os.path.join(WORK, name + "_with_grads.onnx")
    onnx.save(tm, with_grads)
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    branches = set()
    for seed in seeds:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(x_shape).astype(np.float32)
        target = rng.standard_normal(y_shape).astype(np.float32)
        feeds = {"x": x, "target": target, "lazy_reset_grad": np.array([True])}
        for p in params:
            feeds[p] = inits[p].astype(np.float32)
            feeds[p + "_grad.accumulation.buffer"] = np.zeros_like(feeds[p])
        args = []
        for n, v in feeds.items():
            f = os.path.join(WORK, f"{name}_{n}.npy")
            np.save(f, v)
            args.append(f"{n}={f}")
        outdir = os.path.join(WORK, f"{name}_out_{seed}")
        code, out = tl.run_cli("run", "-q", "-o", outdir, with_grads, *args)
        tl.check(code == 0, f"{name} seed {seed}: otter run")
        if code != 0:
            print(out)
            continue
        res = {o.name: np.load(os.path.join(outdir, f"output_{i}.npy")) for i, o in enumerate(tm.graph.output)}
        ref = module()
        ref.load_state_dict({k: torch.tensor(feeds[k]) for k in params})
        loss = torch.nn.functional.mse_loss(ref(torch.tensor(x)), torch.tensor(target))
        loss.backward()
        got = float(res[tm.graph.output[0].name])
        branch = "" if name != "if" else (" (then)" if x.sum() > 0 else " (else)")
        branches.add(branch)
        tl.check(abs(got - loss.item()) <= LOSS_TOL * max(1.0, abs(loss.item())),
                 f"{name} seed {seed}{branch}: loss {got:.7f}, torch {loss.item():.7f}")
        for p, param in dict(ref.named_parameters()).items():
            g = res[p + "_grad"]
            if param.grad is None:
                tl.check(np.all(g == 0), f"{name} seed {seed}{branch}: d{p} is zero (unused by the branch)")
                continue
            want = param.grad.numpy()
            err = np.abs(g - want).max() / max(np.abs(want).max(), 1e-3)
            tl.check(err <= GRAD_TOL, f"{name} seed {seed}{branch}: d{p} relative error {err:.2e}")
    if name == "if":
        tl.check(branches == {" (then)", " (else)"}, "if: both branches ran")


run_case("loop", LoopModel, (5, 4), (1, 4), [0, 1], "Loop")
# seeds 0 and 1 give x.sum() > 0 (then branch), 3 and 4 x.sum() < 0 (else branch)
run_case("if", IfModel, (2, 4), (2, 4), [0, 1, 3, 4], "If")
sys.exit(tl.finish("test_control_flow_torch"))
