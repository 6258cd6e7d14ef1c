"""A dynamic-batch torch.nn.TransformerEncoder trains from the CLI as PyTorch trains it.

The model: torch.nn.TransformerEncoder (2 layers, d_model 32, 4 heads, feed-forward 64, dropout 0,
batch_first) on [batch, 6, 32] inputs, mean over tokens, Linear to 5 classes; exported with
torch.onnx.export in training mode at opsets 13, 14 and 17 with a dynamic batch axis. Its attention
divides a tensor whose rank shape inference can't tell by a scalar, so the gradient graph reduces
broadcast gradients over axes computed at run time (com.microsoft BroadcastGradientArgs).

For each opset: `otter artifacts --optimizer SGD`, then `otter train` over 10 samples in batches of
4, 4 and 2 (the partial last batch, fed because the batch axis is dynamic), no shuffling, lr 0.05;
PyTorch runs the same three SGD steps in float64 from the same initial weights (the exported
initializers). Checked: the training model holds BroadcastGradientArgs, and every parameter after
the three steps, err = max|otter - torch| / max|torch - initial| (relative to what training moved
it), within 1e-3.
"""
import json
import os
import shutil
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402

WORK = tl.work_dir("dynamic_batch_torch")
SAMPLES, BATCH, LR, CLASSES, TOKENS, D = 10, 4, 0.05, 5, 6, 32
TOL = 1e-3


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=D, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


def torch_sgd(model, x, y, batches):
    """float64 SGD steps over the given (start, end) batches; returns the state dict."""
    model = model.double().train()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for lo, hi in batches:
        opt.zero_grad()
        loss = nn.CrossEntropyLoss()(model(torch.from_numpy(x[lo:hi]).double()), torch.from_numpy(y[lo:hi]))
        loss.backward()
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def otter_params(ckpt, out_dir):
    r = tl.otter("checkpoint", "dump", ckpt, "--npy-dir", out_dir, echo=False)
    if r.returncode != 0:
        return {}
    with open(os.path.join(out_dir, "manifest.json")) as f:
        manifest = json.load(f)
    return {name: np.load(os.path.join(out_dir, e["file"])) for name, e in manifest.items() if "/" not in name}


def compare(label, got, initial, want):
    worst, where = 0.0, ""
    for name, w in want.items():
        if name not in got:
            tl.check(False, f"{label}: parameter {name} in the checkpoint")
            continue
        moved = np.abs(w - initial[name]).max()
        err = np.abs(got[name].astype(np.float64) - w).max() / max(moved, 1e-12)
        if tl.worse(worst, err) != worst:
            worst, where = tl.worse(worst, err), name
    tl.check(worst <= TOL, f"{label}: 3 SGD steps (batches 4, 4, 2) equal PyTorch's, worst {worst:.2e} ({where})")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    torch.manual_seed(0)
    module = Classifier()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SAMPLES, TOKENS, D)).astype(np.float32)
    y = rng.integers(0, CLASSES, SAMPLES).astype(np.int64)
    np.save(os.path.join(WORK, "x.npy"), x)
    np.save(os.path.join(WORK, "y.npy"), y)
    data = "npy:" + os.path.join(WORK, "x.npy") + "," + os.path.join(WORK, "y.npy")
    initial = {k: v.detach().double().numpy().copy() for k, v in module.state_dict().items()}
    full = torch_sgd(_copy(module), x, y, [(0, 4), (4, 8), (8, 10)])
    for opset in (13, 14, 17):
        d = os.path.join(WORK, f"opset{opset}")
        os.makedirs(d)
        path = os.path.join(d, "encoder.onnx")
        torch.onnx.export(_copy(module).train(), torch.from_numpy(x[:BATCH]), path, input_names=["input"],
                          output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                          opset_version=opset, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False)
        art = os.path.join(d, "artifacts")
        r = tl.otter("artifacts", path, "-o", art, "--optimizer", "SGD")
        tl.check(r.returncode == 0, f"opset {opset}: otter artifacts")
        if r.returncode != 0:
            continue
        ops = [n.op_type for n in onnx.load(os.path.join(art, "training_model.onnx")).graph.node]
        tl.check("BroadcastGradientArgs" in ops,
                 f"opset {opset}: broadcast gradients reduced at run time ({ops.count('BroadcastGradientArgs')} "
                 "BroadcastGradientArgs)")
        inits = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
        tl.check(all(np.array_equal(inits[k], initial[k].astype(np.float32)) for k in full if k in inits),
                 f"opset {opset}: the exported initializers are the module's weights")
        ckpt = os.path.join(d, "checkpoint")
        r = tl.otter("train", art, "--data", data, "--batch-size", str(BATCH), "--epochs", "1", "--lr", str(LR),
                     "--no-shuffle", "--threads", "1", "--save", ckpt)
        tl.check(r.returncode == 0, f"opset {opset}: otter train")
        tl.check("input 'input' <- the samples, float32 [6, 32]" in r.stdout and
                 "input 'labels' <- the class labels (int64" in r.stdout,
                 f"opset {opset}: the summary says which array feeds which input")
        compare(f"opset {opset}", otter_params(ckpt, ckpt + "_npy"), initial, full)
    return tl.finish("test_dynamic_batch_torch")


def _copy(module):
    c = Classifier()
    c.load_state_dict(module.state_dict())
    return c


if __name__ == "__main__":
    sys.exit(main())
