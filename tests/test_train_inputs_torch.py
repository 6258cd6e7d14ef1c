"""Training inputs of any element type and number from the CLI: `otter train --data npy:A.npy,B.npy,...`.

The model: an nn.Embedding(50, 16) over int64 token ids [batch, 7], mean over tokens, times a float32
per-sample scale [batch, 1], Linear to 4 classes; three inputs (tokens, scale, labels), exported with
torch.onnx.export in training mode at opset 17, once with a dynamic batch axis and once with a fixed
batch of 4. `otter artifacts --optimizer SGD`, then `otter train --data npy:tokens.npy,scale.npy,labels.npy`
over 10 samples in batches of 4 (no shuffling, lr 0.1), against PyTorch's SGD in float64 from the same
initial weights. Checked:
  - dynamic batch: the three arrays feed the three inputs in order (the summary names each input and
    file), the token ids as int64, and the 3 steps (batches 4, 4, 2) equal PyTorch's within 1e-3 of the
    update (err = max|otter - torch| / max|torch - initial|);
  - int32 token ids are refused with an error naming the input, the file and both element types;
  - too few arrays are refused naming the count;
  - `otter export` without --outputs keeps the forward model's output (logits, with its dynamic batch
    axis), and the exported model's logits equal PyTorch's with the trained weights;
  - fixed batch: without --drop-last the run fails before training, saying to use --drop-last; with it,
    the 2 full batches equal PyTorch's 2 steps.
"""
import json
import os
import shutil
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402

WORK = tl.work_dir("train_inputs_torch")
SAMPLES, BATCH, LR, VOCAB, TOKENS, CLASSES = 10, 4, 0.1, 50, 7, 4
TOL = 1e-3


class TokenClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.fc = nn.Linear(16, CLASSES)

    def forward(self, tokens, scale):
        return self.fc(self.emb(tokens).mean(dim=1) * scale)


def copy_of(module):
    c = TokenClassifier()
    c.load_state_dict(module.state_dict())
    return c


def torch_sgd(module, arrays, batches):
    model = copy_of(module).double().train()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    tokens, scale, labels = arrays
    for lo, hi in batches:
        opt.zero_grad()
        out = model(torch.from_numpy(tokens[lo:hi]), torch.from_numpy(scale[lo:hi]).double())
        nn.CrossEntropyLoss()(out, torch.from_numpy(labels[lo:hi])).backward()
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def otter_params(ckpt):
    out = ckpt + "_npy"
    if tl.otter("checkpoint", "dump", ckpt, "--npy-dir", out, echo=False).returncode != 0:
        return {}
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    return {name: np.load(os.path.join(out, e["file"])) for name, e in manifest.items() if "/" not in name}


def compare(label, got, initial, want):
    worst = 0.0
    for name, w in want.items():
        if name not in got:
            tl.check(False, f"{label}: parameter {name} in the checkpoint")
            return
        moved = np.abs(w - initial[name]).max()
        worst = tl.worse(worst, np.abs(got[name].astype(np.float64) - w).max() / max(moved, 1e-12))
    tl.check(worst <= TOL, f"{label}: equal to PyTorch's SGD steps, worst {worst:.2e}")


def check_export(art, ckpt, arrays):
    """`otter export` without --outputs: the forward model's output (logits, [batch, 4]), computing what
    PyTorch computes with the trained weights."""
    path = os.path.join(WORK, "exported.onnx")
    r = tl.otter("export", art, "--checkpoint", ckpt, "-o", path)
    outs = [(o.name, [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim])
            for o in onnx.load(path).graph.output] if r.returncode == 0 else []
    tl.check(outs == [("logits", ["batch", CLASSES])], f"otter export keeps the forward output by default: {outs}")
    if not outs:
        return
    model = TokenClassifier()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in otter_params(ckpt).items()})
    want = model(torch.from_numpy(arrays[0]), torch.from_numpy(arrays[1])).detach().numpy()
    out_dir = os.path.join(WORK, "exported_out")
    files = [os.path.join(WORK, n + ".npy") for n in ("tokens", "scale")]
    r = tl.otter("run", path, "-q", "-o", out_dir, *files)
    got = np.load(os.path.join(out_dir, "output_0.npy")) if r.returncode == 0 else np.zeros_like(want)
    err = float(np.abs(got - want).max())
    tl.check(err <= 1e-5, f"the exported model's logits equal PyTorch's with the trained weights, err {err:.2e}")


def export(module, path, dynamic):
    axes = {"tokens": {0: "batch"}, "scale": {0: "batch"}, "logits": {0: "batch"}} if dynamic else None
    torch.onnx.export(copy_of(module).train(), (torch.zeros(BATCH, TOKENS, dtype=torch.int64), torch.ones(BATCH, 1)),
                      path, input_names=["tokens", "scale"], output_names=["logits"], dynamic_axes=axes,
                      opset_version=17, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    art = path[:-5]
    r = tl.otter("artifacts", path, "-o", art, "--optimizer", "SGD")
    tl.check(r.returncode == 0, f"otter artifacts {os.path.basename(path)}")
    return art


def train(art, spec, ckpt, *extra):
    return tl.otter("train", art, "--data", spec, "--batch-size", str(BATCH), "--epochs", "1", "--lr", str(LR),
                    "--no-shuffle", "--threads", "1", "--save", ckpt, *extra)


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    torch.manual_seed(0)
    module = TokenClassifier()
    initial = {k: v.detach().double().numpy().copy() for k, v in module.state_dict().items()}
    rng = np.random.default_rng(0)
    arrays = (rng.integers(0, VOCAB, (SAMPLES, TOKENS)).astype(np.int64),
              rng.uniform(0.5, 2.0, (SAMPLES, 1)).astype(np.float32),
              rng.integers(0, CLASSES, SAMPLES).astype(np.int64))
    files = [os.path.join(WORK, n + ".npy") for n in ("tokens", "scale", "labels")]
    for f, a in zip(files, arrays):
        np.save(f, a)
    tokens32 = os.path.join(WORK, "tokens32.npy")
    np.save(tokens32, arrays[0].astype(np.int32))
    spec = "npy:" + ",".join(files)

    art = export(module, os.path.join(WORK, "dynamic.onnx"), True)
    r = train(art, spec, os.path.join(WORK, "dynamic.ckpt"))
    tl.check(r.returncode == 0, "dynamic batch: otter train on three arrays")
    for name, f, what in (("tokens", files[0], "int64 [7]"), ("scale", files[1], "float32 [1]"),
                          ("labels", files[2], "int64 []")):
        tl.check(f"input '{name}' <- {f}, {what}" in r.stdout, f"the summary says {os.path.basename(f)} feeds '{name}'")
    compare("dynamic batch, batches 4, 4, 2", otter_params(os.path.join(WORK, "dynamic.ckpt")), initial,
            torch_sgd(module, arrays, [(0, 4), (4, 8), (8, 10)]))

    check_export(art, os.path.join(WORK, "dynamic.ckpt"), arrays)

    r = train(art, "npy:" + ",".join([tokens32] + files[1:]), os.path.join(WORK, "int32.ckpt"))
    tl.check(r.returncode != 0 and "input 'tokens' takes int64" in r.stderr and
             f"{tokens32} holds int32" in r.stderr, "int32 token ids: the error names the input, file and both types")
    r = train(art, "npy:" + ",".join(files[:2]), os.path.join(WORK, "two.ckpt"))
    tl.check(r.returncode != 0 and "takes 3 inputs" in r.stderr and "holds 2 arrays" in r.stderr,
             "two arrays for three inputs: refused, naming both counts")

    art = export(module, os.path.join(WORK, "static.onnx"), False)
    r = train(art, spec, os.path.join(WORK, "static.ckpt"))
    tl.check(r.returncode != 0 and "--drop-last" in r.stderr and "holds 2" in r.stderr,
             "fixed batch of 4, 10 samples: the error says to use --drop-last")
    r = train(art, spec, os.path.join(WORK, "static.ckpt"), "--drop-last")
    tl.check(r.returncode == 0 and "partial batch dropped" in r.stdout, "fixed batch: otter train --drop-last")
    compare("fixed batch --drop-last, batches 4, 4", otter_params(os.path.join(WORK, "static.ckpt")), initial,
            torch_sgd(module, arrays, [(0, 4), (4, 8)]))
    return tl.finish("test_train_inputs_torch")


if __name__ == "__main__":
    sys.exit(main())
