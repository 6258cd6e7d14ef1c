"""The four built-in losses, with their options, against PyTorch.

For each case `otter artifacts` builds the eval model of a one-layer model (Gemm 6 -> 4) with the
loss; `otter run` evaluates it on fixed inputs, weights and targets (saved as .npy and bound by
name), and the loss must equal torch.nn's on the same values to 1e-5 relative:
  MSELoss and L1Loss (mean, sum), CrossEntropyLoss (mean, sum, class weights, ignore_index, both),
  BCEWithLogitsLoss (mean, sum, pos_weight).
"""
import os
import sys

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402

WORK = tl.work_dir("losses_torch")
os.makedirs(WORK, exist_ok=True)
rng = np.random.default_rng(3)
N, IN, C = 5, 6, 4
W = rng.standard_normal((C, IN)).astype(np.float32)
B = rng.standard_normal(C).astype(np.float32)
X = rng.standard_normal((N, IN)).astype(np.float32)


def model_path():
    p = os.path.join(WORK, "linear.onnx")
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], "linear",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", IN])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", C])],
                          [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), p)
    return p


def otter_loss(name, args, target_name, target):
    out = os.path.join(WORK, name)
    r = tl.otter("artifacts", model_path(), "-o", out, "--optimizer", "none", *args, echo=False)
    if r.returncode:
        raise RuntimeError(r.stderr)
    feeds = {"x": X, "w": W, "b": B, target_name: target}
    files = []
    for k, v in feeds.items():
        f = os.path.join(out, k + ".npy")
        np.save(f, v)
        files.append(f"{k}={f}")
    r = tl.otter("run", os.path.join(out, "eval_model.onnx"), *files, "--outdir", out, "-q", echo=False)
    if r.returncode:
        raise RuntimeError(r.stderr)
    return float(np.load(os.path.join(out, "output_0.npy")))


def check(name, args, target_name, target, torch_loss):
    y = torch.from_numpy(X) @ torch.from_numpy(W).T + torch.from_numpy(B)
    want = float(torch_loss(y))
    try:
        got = otter_loss(name, args, target_name, target)
    except RuntimeError as e:
        tl.check(False, f"{name}: {e}")
        return
    err = abs(got - want) / max(abs(want), 1e-12)
    tl.check(err <= 1e-5, f"{name:<34} otter {got:.7f} torch {want:.7f} rel err {err:.1e}")


def main():
    t_f = rng.standard_normal((N, C)).astype(np.float32)
    t_b = (rng.random((N, C)) > 0.5).astype(np.float32)
    labels = np.array([0, 3, 1, 3, 2], dtype=np.int64)
    cw = np.array([0.5, 2.0, 1.0, 3.0], dtype=np.float32)
    pw = np.array([1.5, 0.5, 2.0, 1.0], dtype=np.float32)
    T = torch.from_numpy
    for red in ["mean", "sum"]:
        check(f"MSELoss {red}", ["--loss", "MSELoss", "--reduction", red], "target", t_f,
              lambda y: torch.nn.MSELoss(reduction=red)(y, T(t_f)))
        check(f"L1Loss {red}", ["--loss", "L1Loss", "--reduction", red], "target", t_f,
              lambda y: torch.nn.L1Loss(reduction=red)(y, T(t_f)))
        check(f"CrossEntropyLoss {red}", ["--loss", "CrossEntropyLoss", "--reduction", red], "labels", labels,
              lambda y: torch.nn.CrossEntropyLoss(reduction=red)(y, T(labels)))
        check(f"BCEWithLogitsLoss {red}", ["--loss", "BCEWithLogitsLoss", "--reduction", red], "target", t_b,
              lambda y: torch.nn.BCEWithLogitsLoss(reduction=red)(y, T(t_b)))
    weights = ",".join(str(v) for v in cw)
    check("CrossEntropyLoss weight", ["--loss", "CrossEntropyLoss", "--ce-weight", weights], "labels", labels,
          lambda y: torch.nn.CrossEntropyLoss(weight=T(cw))(y, T(labels)))
    check("CrossEntropyLoss ignore_index", ["--loss", "CrossEntropyLoss", "--ignore-index", "3"], "labels", labels,
          lambda y: torch.nn.CrossEntropyLoss(ignore_index=3)(y, T(labels)))
    check("CrossEntropyLoss weight+ignore sum",
          ["--loss", "CrossEntropyLoss", "--ce-weight", weights, "--ignore-index", "1", "--reduction", "sum"],
          "labels", labels,
          lambda y: torch.nn.CrossEntropyLoss(weight=T(cw), ignore_index=1, reduction="sum")(y, T(labels)))
    check("BCEWithLogitsLoss pos_weight", ["--loss", "BCEWithLogitsLoss", "--pos-weight", ",".join(map(str, pw))],
          "target", t_b, lambda y: torch.nn.BCEWithLogitsLoss(pos_weight=T(pw))(y, T(t_b)))
    return tl.finish("test_losses_torch")


if __name__ == "__main__":
    sys.exit(main())
