"""BatchNormalization's running variance, both conventions, against PyTorch after 3 training steps.

ONNX Runtime's CPU BatchNormalization / BatchNormInternal kernel updates the running variance with the
batch's biased variance (sum (x - mean)^2 / n); PyTorch's BatchNorm uses the unbiased one (/ (n - 1)).
`otter artifacts --bn-running-var biased` (the default) follows ORT, `unbiased` follows PyTorch.

The model: Conv2d(2, 4, 3) -> BatchNorm2d(4) -> ReLU -> mean over space -> Linear(4, 3), exported in
training mode (opset 17, dynamic batch). `otter train` runs 3 SGD steps (lr 0.1, batches of 4, no
shuffling) for each convention; PyTorch runs the same steps in float64 from the same weights, and a
forward hook on the BatchNorm gives each step's batch, from which the biased convention's running
variance follows (running = 0.9 running + 0.1 var). Checked, with err = max|otter - ref| / max|ref|:
  - unbiased: running_var equals PyTorch's within 1e-4, running_mean too;
  - biased: running_var equals the biased reference within 1e-4, and differs from PyTorch's by more
    than 1e-3 (what the option changes is visible at this batch size: n = 4 * 3 * 3 = 36 values a channel);
  - the artifacts' summary names the convention.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402

WORK = tl.work_dir("bn_running_var_torch")
SAMPLES, BATCH, LR, STEPS = 12, 4, 0.1, 3
TOL = 1e-4


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3)))


def torch_run(module, x, y):
    """PyTorch's 3 SGD steps in float64: its running statistics, and the biased convention's running_var."""
    model = ConvBN()
    model.load_state_dict(module.state_dict())
    model = model.double().train()
    batches = []
    model.bn.register_forward_hook(lambda m, inp, out: batches.append(inp[0].detach().clone()))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    biased = model.bn.running_var.detach().clone()
    for s in range(STEPS):
        lo = s * BATCH
        opt.zero_grad()
        out = model(torch.from_numpy(x[lo:lo + BATCH]).double())
        nn.CrossEntropyLoss()(out, torch.from_numpy(y[lo:lo + BATCH])).backward()
        opt.step()
        var = batches[-1].var(dim=(0, 2, 3), unbiased=False)
        biased = 0.9 * biased + 0.1 * var
    return model.bn.running_mean.numpy(), model.bn.running_var.numpy(), biased.numpy()


def otter_stats(ckpt):
    out = ckpt + "_npy"
    if tl.otter("checkpoint", "dump", ckpt, "--npy-dir", out, echo=False).returncode != 0:
        return None, None
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    get = lambda n: np.load(os.path.join(out, manifest[n]["file"])) if n in manifest else None  # noqa: E731
    return get("bn.running_mean"), get("bn.running_var")


def rel(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / np.abs(b).max())


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    torch.manual_seed(0)
    module = ConvBN()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((SAMPLES, 2, 5, 5)) * 2 + 0.5).astype(np.float32)
    y = rng.integers(0, 3, SAMPLES).astype(np.int64)
    np.save(os.path.join(WORK, "x.npy"), x)
    np.save(os.path.join(WORK, "y.npy"), y)
    onnx_path = os.path.join(WORK, "convbn.onnx")
    torch.onnx.export(module, torch.from_numpy(x[:BATCH]), onnx_path, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    t_mean, t_var, b_var = torch_run(module, x, y)
    spec = "npy:" + os.path.join(WORK, "x.npy") + "," + os.path.join(WORK, "y.npy")
    for conv in ("biased", "unbiased"):
        art = os.path.join(WORK, conv)
        r = tl.otter("artifacts", onnx_path, "-o", art, "--optimizer", "SGD", "--bn-running-var", conv)
        tl.check(r.returncode == 0 and f"running variance from the batch's {conv} variance" in r.stdout,
                 f"{conv}: otter artifacts, the summary names the convention")
        ckpt = os.path.join(art, "trained")
        r = tl.otter("train", art, "--data", spec, "--batch-size", str(BATCH), "--steps", str(STEPS), "--lr", str(LR),
                     "--no-shuffle", "--threads", "1", "--save", ckpt)
        tl.check(r.returncode == 0, f"{conv}: otter train, {STEPS} steps")
        mean, var = otter_stats(ckpt)
        if mean is None or var is None:
            tl.check(False, f"{conv}: bn.running_mean and bn.running_var in the checkpoint")
            continue
        tl.check(rel(mean, t_mean) <= TOL, f"{conv}: running_mean equals PyTorch's, err {rel(mean, t_mean):.2e}")
        want = b_var if conv == "biased" else t_var
        tl.check(rel(var, want) <= TOL, f"{conv}: running_var equals the {conv} reference, err {rel(var, want):.2e}")
        if conv == "biased":
            tl.check(rel(var, t_var) > 1e-3, f"biased: running_var differs from PyTorch's by {rel(var, t_var):.2e}")
    return tl.finish("test_bn_running_var_torch")


if __name__ == "__main__":
    sys.exit(main())
