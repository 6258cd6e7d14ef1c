"""A dynamic-batch torch.nn.TransformerEncoder trains from the CLI as PyTorch trains it.

The model: torch.nn.TransformerEncoder (2 layers, d_model 32, 4 heads, feed-forward 64, dropout 0,
batch_first) on [batch, 6, 32] inputs, mean over tokens, Linear to 5 classes; exported with
torch.onnx.export in training mode at opsets 12, 13, 14 and 17 with a dynamic batch axis. Its attention
divides a tensor whose rank shape inference can't tell by a scalar, so the gradient graph reduces
broadcast gradients over axes computed at run time (com.microsoft BroadcastGradientArgs; below opset
13 the sum is com.microsoft ReduceSumTraining, as ONNX Runtime emits it).

For each opset: `otter artifacts --optimizer SGD`, then `otter train` over 10 samples in batches of
4, 4 and 2 (the partial last batch, fed because the batch axis is dynamic), no shuffling, lr 0.05;
PyTorch runs the same three SGD steps in float64 from the same initial weights (the exported
initializers). Checked: the training model holds BroadcastGradientArgs, and every parameter after
the three steps within max|otter - torch| <= 1e-3 max|torch - initial| (what training moved it) +
3 float32 roundings of max|w| (2^-23 each). At opset 17, ONNX Runtime's training runtime
(onnxruntime-web 1.19.2 under Node, from npm; it runs com.microsoft BroadcastGradientArgs) trains the
same artifacts over the same batches at its fixed lr 0.001, and its parameters equal PyTorch's within
the same bound.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_artifacts_ort as ao  # noqa: E402
import testlib as tl  # noqa: E402

WORK = tl.work_dir("dynamic_batch_torch")
SAMPLES, BATCH, LR, CLASSES, TOKENS, D, STEPS = 10, 4, 0.05, 5, 6, 32, 3
TOL = 1e-3


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=D, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


def torch_sgd(model, x, y, batches, lr=LR):
    """float64 SGD steps over the given (start, end) batches; returns the state dict."""
    model = model.double().train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
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
    """Worst max|got - want| / bound over the parameters, bound = TOL * max|want - initial| (what training moved
    it) + one float32 rounding of |w| per step (2^-23 max|w| each: a small lr moves weights by few ulps)."""
    worst, where = 0.0, ""
    for name, w in want.items():
        if name not in got:
            tl.check(False, f"{label}: parameter {name} in the checkpoint")
            continue
        bound = TOL * np.abs(w - initial[name]).max() + STEPS * 2.0**-23 * np.abs(w).max()
        err = np.abs(got[name].astype(np.float64) - w).max() / max(bound, 1e-30)
        if tl.worse(worst, err) != worst:
            worst, where = tl.worse(worst, err), name
    tl.check(worst <= 1, f"{label}: 3 SGD steps (batches 4, 4, 2) equal PyTorch's, worst error/bound {worst:.2f} "
             f"({where})")


# ONNX Runtime's training runtime (onnxruntime-web, npm) on otter's artifacts: 3 train + optimizer steps
# over batches of 4, 4 and 2 at its fixed learning rate; prints the trained parameters (contiguous).
ORT_SCRIPT = r"""
const fs = require('fs');
const [ortJs, dir, xFile, yFile, samples, batch, out] = process.argv.slice(2);
const ort = require(ortJs);
ort.env.wasm.numThreads = 1;
ort.env.logLevel = 'error';
const rd = (f) => new Uint8Array(fs.readFileSync(f));
const ab = (f) => { const b = fs.readFileSync(f); return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength); };
(async () => {
  const sess = await ort.TrainingSession.create({checkpointState: rd(dir + '/checkpoint'),
    trainModel: rd(dir + '/training_model.onnx'), optimizerModel: rd(dir + '/optimizer_model.onnx')});
  const x = new Float32Array(ab(xFile)), y = new BigInt64Array(ab(yFile)), per = x.length / samples;
  for (let lo = 0; lo < samples; lo += +batch) {
    const n = Math.min(+batch, samples - lo);
    await sess.runTrainStep({input: new ort.Tensor('float32', x.slice(lo * per, (lo + n) * per), [n, 6, 32]),
                             labels: new ort.Tensor('int64', y.slice(lo, lo + n), [n])});
    await sess.runOptimizerStep();
    await sess.lazyResetGrad();
  }
  const p = await sess.getContiguousParameters(true);
  fs.writeFileSync(out, Buffer.from(p.data.buffer, p.data.byteOffset, p.data.byteLength));
})().catch(e => { console.error(typeof e === 'number' ? 'C++ exception ' + e : e); process.exit(1); });
"""
ORT_LR = 0.001  # onnxruntime-web's TrainingSession can't change it


def check_ort(art, x, y, module):
    """ORT trains otter's artifacts (BroadcastGradientArgs included) over batches 4, 4, 2 as PyTorch does."""
    ort_js = ao.ensure_ort()
    for name, a in (("x.bin", x), ("y.bin", y)):
        a.tofile(os.path.join(art, name))
    script, out = os.path.join(art, "ort.js"), os.path.join(art, "ort_params.bin")
    with open(script, "w") as f:
        f.write(ORT_SCRIPT)
    r = subprocess.run(["node", script, ort_js, art, os.path.join(art, "x.bin"), os.path.join(art, "y.bin"),
                        str(SAMPLES), str(BATCH), out], capture_output=True, text=True, timeout=600)
    tl.check(r.returncode == 0, "ONNX Runtime trains otter's artifacts over batches 4, 4, 2" +
             ("" if r.returncode == 0 else f": {r.stderr.strip()[-500:]}"))
    if r.returncode != 0:
        return
    graph = onnx.load(os.path.join(art, "training_model.onnx")).graph
    names = [i.name for i in graph.input if i.name in dict(module.state_dict())]
    got = np.fromfile(out, dtype=np.float32)
    want = torch_sgd(_copy(module), x, y, [(0, 4), (4, 8), (8, 10)], lr=ORT_LR)
    initial = {k: v.detach().double().numpy() for k, v in module.state_dict().items()}
    sizes = [want[n].size for n in names]
    tl.check(got.size == sum(sizes), f"ONNX Runtime's parameters: {got.size} floats, {sum(sizes)} expected")
    if got.size != sum(sizes):
        return
    parts = np.split(got, np.cumsum(sizes)[:-1])
    compare("ONNX Runtime, opset 17", {n: p.reshape(want[n].shape) for n, p in zip(names, parts)}, initial,
            {n: want[n] for n in names})


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
    for opset in (12, 13, 14, 17):
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
        tl.check("BroadcastGradientArgs" in ops and (opset >= 13 or "ReduceSumTraining" in ops),
                 f"opset {opset}: broadcast gradients reduced at run time ({ops.count('BroadcastGradientArgs')} "
                 f"BroadcastGradientArgs, {ops.count('ReduceSumTraining')} ReduceSumTraining)")
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
        if opset == 17:
            check_ort(art, x, y, module)
    return tl.finish("test_dynamic_batch_torch")


def _copy(module):
    c = Classifier()
    c.load_state_dict(module.state_dict())
    return c


if __name__ == "__main__":
    sys.exit(main())
