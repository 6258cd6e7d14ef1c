"""otter's artifacts of PyTorch-exported models in ONNX Runtime's training runtime (onnxruntime-web 1.19.2 under Node).

Models: tools/export_torch_models.py's mnist_dnn, cifar_cnn, bn_dropout_cnn_p0 (BatchNorm2d + Dropout p = 0),
transformer (opset 15, LayerNorm decomposed) and transformer_ln17 (opset 17, LayerNormalization), each with
`otter artifacts` CrossEntropyLoss + AdamW and MSELoss + SGD; also mnist_dnn with BCEWithLogitsLoss + AdamW
(adam_mode 0, weight_decay 0.01) and L1Loss + AdamW (eps 1e-8, where Adam amplifies rounding noise most),
transformer_ln17 with L1Loss + AdamW (adam_mode 0, weight_decay 0.01). For each set:

1. ORT loads the four artifacts (ort.TrainingSession.create). When it refuses, ORT's exact message is printed
   (the training build lets C++ exceptions escape as a bare heap address; the message is read from the wasm
   heap through a copy of ort.training.wasm.js that exposes its module), and the files are tried with the
   checkpoint and training model alone, + eval, + optimizer, to say which one it refuses.
   ORT registers MaxPoolGrad and AveragePoolGrad in the ai.onnx domain (opset 9), not com.microsoft: for a
   training model with com.microsoft MaxPoolGrad/AveragePoolGrad nodes, a copy with those nodes moved to
   ai.onnx is also run in ORT ("[domain-fixed]") and compared with otter running the original files, so the
   numbers of the CNNs are checked while the load failure stays a failure.
2. otter trains STEPS = 10 steps (train step, optimizer step, lazy reset; lr 0.001, the web API's fixed learning
   rate) on fixed batches through its training session API (libotter.so via ctypes, one thread), keeping its
   parameters before each step and its gradient of each step. ORT then runs each step from otter's parameters of
   that step (loadParametersBuffer, all parameters) on the same float32/int64 bytes; its optimizer state is its
   own, from its own gradients.
3. Checked: getParametersSize(true/false) = otter's params_size = the sum of the float parameters' sizes in
   the training graph's parameter-input order; the contiguous buffers (trainable and all) bit-identical before
   training (same order); then each step, from the same parameters:
   - the loss of both runtimes against PyTorch float64 (tools/export_torch_models.py's module with otter's
     parameters of the step), within loss_bound's float32 error;
   - otter's update of every trainable element against the optimizer's formula (hyperparameters read from
     optimizer_model.onnx) applied to otter's own gradient in float64: only the update arithmetic's rounding;
   - ORT's update of every element against the same formula, for a gradient within 2 GAMMA of otter's (both
     float32 gradients within testlib's GAMMA of the exact one), through testlib's UpdateReference, which
     carries the moments' error through AdamW's m/(sqrt(v) + eps) (see gradient_scales for a gradient that is
     zero in exact arithmetic); a ReLU/MaxPool decision ORT took the other way from otter is found as in
     test_training_torch (explain_flips);
   - the frozen parameters (BatchNorm running statistics, which ORT's BatchNormInternal updates in place):
     each step's change within frozen_bound.
   Prints the worst error/bound of each kind per case; a ratio > 1 fails.

Why each step starts from otter's parameters: ten free-running float32 steps are chaotic (a ReLU or MaxPool
decision flipped by a last-bit difference, or Adam turning a gradient that cancels to rounding noise into a step
of +-lr, grows step by step), so the distance of two free-running trajectories depends on the BLAS kernel and has
no bound to derive: mnist_dnn L1Loss+AdamW ended 5e-5 from ORT under OPENBLAS_CORETYPE=Sandybridge.

Dropout with p > 0 (bn_dropout_cnn, p = 0.5): the masks come from each runtime's own generator (ORT's Philox
stream vs otter's seeded stream), so the two can't draw the same masks and nothing is compared across runtimes.
Instead each runtime trains 10 steps on one repeated batch and the loss must decrease (mean of the last 3 steps
below the mean of the first 3) and stay finite (ORT runs free there); the parameter buffer layout is still
compared.

The npm package is installed under the build tree on first use. test_training_ort runs the same per-step
comparison on ORT's own MNIST artifacts and otter's mnist-dnn.
"""
import ctypes
import functools
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from flips import MAX_FLIP_TRIES, MAX_FLIPS, chain_forward, layer_chain  # noqa: E402
from testlib import GAMMA, LIB, TP, U32, TrainingOptions, check, load_exporter, run_cli  # noqa: E402

WORK = tl.work_dir("artifacts_ort")
STEPS = 10
CLASSES = 10
BATCH = {"mnist_dnn": 64, "cifar_cnn": 8, "bn_dropout_cnn": 32, "bn_dropout_cnn_p0": 32, "transformer": 16,
         "transformer_ln17": 16}
LR = 1e-3  # onnxruntime-web's training API has no setter: the optimizer model's initial learning rate


def loss_bound(logits, dlogits, loss):
    """|a float32 runtime's loss - float64's| for the same parameters and batch: each logit within GAMMA max|z|
    (testlib's error model applied to the forward sums) moves the loss by at most ||dL/dz||_1 GAMMA max|z|, plus
    float32 rounding of the loss itself."""
    return GAMMA * float(np.max(np.abs(logits))) * float(np.sum(np.abs(dlogits))) + 4 * U32 * abs(loss)


def frozen_bound(old, new):
    """|ORT's - otter's change of a BatchNorm running statistic| in one step: running = mom running + (1 - mom) s
    with the batch statistic s a float32 sum within GAMMA max|s| of the exact one in each runtime, and
    (1 - mom) max|s| <= max|new| + max|old|; plus float32 rounding of the update in both runtimes."""
    return 2 * GAMMA * (float(np.max(np.abs(new))) + float(np.max(np.abs(old)))) + 8 * U32 * np.abs(old)


# (model, loss, optimizer, extra `otter artifacts` arguments)
CASES = [(m, "CrossEntropyLoss", "AdamW", []) for m in
         ("mnist_dnn", "transformer", "transformer_ln17", "cifar_cnn", "bn_dropout_cnn_p0")]
CASES += [(m, "MSELoss", "SGD", []) for m in
          ("mnist_dnn", "cifar_cnn", "bn_dropout_cnn_p0", "transformer", "transformer_ln17")]
CASES += [("mnist_dnn", "BCEWithLogitsLoss", "AdamW", ["--lr-hparams", "adam_mode=0,weight_decay=0.01"]),
          ("mnist_dnn", "L1Loss", "AdamW", ["--lr-hparams", "eps=1e-8"]),
          ("transformer_ln17", "L1Loss", "AdamW", ["--lr-hparams", "adam_mode=0,weight_decay=0.01"]),
          ("bn_dropout_cnn", "CrossEntropyLoss", "AdamW", [])]
RANDOM_DROPOUT = {"bn_dropout_cnn"}
# Batch seed per case: 1000 + the case's index in CASES.


def ensure_ort():
    """Installs onnxruntime-web under the build tree (<build>/npm); returns the path of a copy of its (unminified) training
    build whose wasm module is reachable from the test script, to read the message of a C++ exception."""
    dist = os.path.join(tl.ensure_ort(), "dist")
    js = open(os.path.join(dist, "ort.training.wasm.js")).read()
    hook = "getInstance = () => {"
    if js.count(hook) != 1:
        raise RuntimeError("ort.training.wasm.js: can't find getInstance to expose the wasm module")
    out = os.path.join(dist, "ort.training.wasm.otter-test.js")  # next to the .wasm it loads
    open(out, "w").write(js.replace(hook, "getInstance = globalThis.__otterOrtWasm = () => {"))
    return out


# ORT registers these gradient kernels in the ai.onnx domain (opset 9), not com.microsoft
# (orttraining/core/graph/training_op_defs.cc: no SetDomain; cpu_training_kernels.cc: kOnnxDomain, 9).
ONNX_DOMAIN_GRADS = ("MaxPoolGrad", "AveragePoolGrad")


def domain_fixed_copy(d):
    """If the training model has com.microsoft MaxPoolGrad/AveragePoolGrad nodes: a copy of the artifacts
    folder with those nodes moved to the ai.onnx domain (what ORT registers); else None."""
    m = onnx.load(os.path.join(d, "training_model.onnx"))
    moved = [n for n in m.graph.node if n.op_type in ONNX_DOMAIN_GRADS and n.domain == "com.microsoft"]
    if not moved:
        return None
    for n in moved:
        n.domain = ""
    c = d + "-ort-domain"
    shutil.copytree(d, c)
    onnx.save(m, os.path.join(c, "training_model.onnx"))
    return c


# ---- ORT under Node --------------------------------------------------------------------------------

NODE_SCRIPT = r"""
const path = require('path'), fs = require('fs');
const [ortJs, jobFile] = process.argv.slice(2);
const ort = require(ortJs);  // ort.training.wasm.js with its wasm module reachable as globalThis.__otterOrtWasm
ort.env.wasm.numThreads = 1;
ort.env.logLevel = 'error';
const rd = (f) => new Uint8Array(fs.readFileSync(f));
const ab = (f) => { const b = fs.readFileSync(f); return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength); };
const tensor = (t, f) => t.dtype === 'int64' ? new ort.Tensor('int64', new BigInt64Array(ab(f)), t.shape)
                                             : new ort.Tensor('float32', new Float32Array(ab(f)), t.shape);
const save = (f, t) => fs.writeFileSync(f, Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
// The training build lets C++ exceptions escape as a bare number, the address of the exception object in the
// wasm heap: the message is the string one of the object's words points to that holds '[ONNXRuntimeError]'
// (OnnxRuntimeException's what_), else the longest string so pointed to.
const cxxMessage = (ptr) => {
  const H = globalThis.__otterOrtWasm().HEAPU8, U = new Uint32Array(H.buffer);
  let best = '';
  for (let o = ptr; o < ptr + 256 && o + 4 <= H.length; o += 4) {
    const p = U[o >>> 2];
    if (p < 1024 || p >= H.length) continue;
    let e = p;
    while (e < H.length && e - p < 65536 && H[e] >= 9 && H[e] < 127) e++;
    if (H[e] !== 0 || e - p < 8) continue;
    const t = Buffer.from(H.subarray(p, e)).toString();
    if (t.includes('[ONNXRuntimeError]')) return t;
    if (t.length > best.length) best = t;
  }
  return best ? `C++ exception at ${ptr}: ${best}` : `C++ exception at ${ptr}`;
};
const msg = (e) => typeof e === 'number' ? cxxMessage(e) : String(e && e.message ? e.message : e);
(async () => {
  const jobs = JSON.parse(fs.readFileSync(jobFile, 'utf8'));
  const out = {};
  for (const job of jobs) {
    const d = job.dir, r = {losses: [], loaded: false};
    let sess = null;
    try {
      sess = await ort.TrainingSession.create({checkpointState: rd(d + '/checkpoint'),
        trainModel: rd(d + '/training_model.onnx'), evalModel: rd(d + '/eval_model.onnx'),
        optimizerModel: rd(d + '/optimizer_model.onnx')});
    } catch (e) {
      r.error = msg(e);
      // Which file: checkpoint + training model alone, then with the eval model, then with the optimizer.
      r.partial = {};
      const tries = {train: {}, train_eval: {evalModel: rd(d + '/eval_model.onnx')},
                     train_opt: {optimizerModel: rd(d + '/optimizer_model.onnx')}};
      for (const [k, extra] of Object.entries(tries)) {
        try {
          const s = await ort.TrainingSession.create(Object.assign({checkpointState: rd(d + '/checkpoint'),
            trainModel: rd(d + '/training_model.onnx')}, extra));
          r.partial[k] = 'ok';
          await s.release();
        } catch (e2) { r.partial[k] = msg(e2); }
      }
      out[job.name] = r;
      continue;
    }
    r.loaded = true;
    try {
      r.inputs = sess.trainingInputNames;
      r.outputs = sess.trainingOutputNames;
      r.size = await sess.getParametersSize(true);
      r.size_all = await sess.getParametersSize(false);
      save(job.out + '.params0', await sess.getContiguousParameters(true));
      save(job.out + '.all0', await sess.getContiguousParameters(false));
      for (let k = 0; k < job.steps; k++) {
        // Each step from otter's parameters of that step (all of them: BatchNorm's running statistics too).
        if (job.sync) await sess.loadParametersBuffer(rd(`${job.sync}_${k}.all`), false);
        const feeds = {};
        job.feeds.forEach((t, i) => { feeds[t.name] = tensor(t, `${job.batches}/${t.name}_${k}.bin`); });
        const res = await sess.runTrainStep(feeds);
        r.losses.push(Number(res[sess.trainingOutputNames[0]].data[0]));
        await sess.runOptimizerStep();
        await sess.lazyResetGrad();
        if (job.sync) {
          save(`${job.out}.params_${k}`, await sess.getContiguousParameters(true));
          save(`${job.out}.all_${k}`, await sess.getContiguousParameters(false));
        }
      }
      save(job.out + '.params', await sess.getContiguousParameters(true));
      save(job.out + '.all', await sess.getContiguousParameters(false));
      r.ok = true;
    } catch (e) {
      r.ok = false;
      r.error = msg(e);
    }
    try { await sess.release(); } catch (e) {}
    out[job.name] = r;
  }
  console.log(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(1); });
"""


# ---- otter's training session through ctypes -------------------------------------------------------

class Otter:
    def __init__(self, path):
        lib = tl.load_lib(path)
        P, S, B = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_bool
        lib.otter_training_session_create_from_dir.argtypes = [ctypes.POINTER(P), ctypes.c_char_p, ctypes.c_char_p,
                                                               ctypes.c_char_p, ctypes.POINTER(TrainingOptions)]
        lib.otter_training_session_free.argtypes = [P]
        lib.otter_training_input_count.argtypes = [P, ctypes.c_int]
        lib.otter_training_input_count.restype = S
        lib.otter_training_input_name.argtypes = [P, ctypes.c_int, S]
        lib.otter_training_input_name.restype = ctypes.c_char_p
        lib.otter_training_output_name.argtypes = [P, ctypes.c_int, S]
        lib.otter_training_output_name.restype = ctypes.c_char_p
        lib.otter_training_train_step.argtypes = [P, S, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(TP), S,
                                                  ctypes.POINTER(TP)]
        lib.otter_training_lazy_reset_grad.argtypes = [P]
        lib.otter_training_optimizer_step.argtypes = [P]
        lib.otter_training_params_size.argtypes = [P, B]
        lib.otter_training_params_size.restype = S
        lib.otter_training_copy_params_to_buffer.argtypes = [P, ctypes.POINTER(ctypes.c_float), S, B]
        lib.otter_training_param_count.argtypes = [P]
        lib.otter_training_param_count.restype = S
        lib.otter_training_param_name.argtypes = [P, S]
        lib.otter_training_param_name.restype = ctypes.c_char_p
        lib.otter_training_set_seed.argtypes = [P, ctypes.c_uint64]
        lib.otter_training_grad_slab.argtypes = [P, ctypes.POINTER(S)]
        lib.otter_training_grad_slab.restype = ctypes.POINTER(ctypes.c_float)
        self.lib = lib

    def error(self):
        return tl.last_error(self.lib)

    def tensor(self, arr):
        return tl.tensor_from_array(self.lib, arr)


class TrainingSession:
    def __init__(self, otter, d, seed=None):
        self.o, lib = otter, otter.lib
        self.s = ctypes.c_void_p()
        opts = TrainingOptions(1, seed is not None, seed or 0)
        if lib.otter_training_session_create_from_dir(ctypes.byref(self.s), d.encode(), None, None,
                                                      ctypes.byref(opts)) != 0:
            raise RuntimeError(f"otter_training_session_create_from_dir({d}): {otter.error()}")
        self.inputs = [lib.otter_training_input_name(self.s, 0, i).decode()
                       for i in range(lib.otter_training_input_count(self.s, 0))]
        self.params = [lib.otter_training_param_name(self.s, i).decode()
                       for i in range(lib.otter_training_param_count(self.s))]

    def size(self, trainable_only):
        return self.o.lib.otter_training_params_size(self.s, trainable_only)

    def buffer(self, trainable_only):
        n = self.size(trainable_only)
        buf = np.zeros(n, np.float32)
        if self.o.lib.otter_training_copy_params_to_buffer(
                self.s, buf.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), n, trainable_only) != 0:
            raise RuntimeError("otter_training_copy_params_to_buffer: " + self.o.error())
        return buf

    def step(self, feeds):
        """Train step on {name: array}, optimizer step, lazy reset; returns the loss and a copy of the step's
        gradient (the trainable buffer's layout)."""
        lib = self.o.lib
        names = list(feeds)
        ts = [self.o.tensor(feeds[n]) for n in names]
        c_names = (ctypes.c_char_p * len(names))(*[n.encode() for n in names])
        c_in = (TP * len(names))(*ts)
        c_out = (TP * 1)()
        try:
            if lib.otter_training_train_step(self.s, len(names), c_names, c_in, 1, c_out) != 0:
                raise RuntimeError("otter_training_train_step: " + self.o.error())
            loss = float(ctypes.cast(c_out[0].contents.data, ctypes.POINTER(ctypes.c_float))[0])
            lib.otter_tensor_free(c_out[0])
            n = ctypes.c_size_t()
            slab = lib.otter_training_grad_slab(self.s, ctypes.byref(n))
            grad = np.ctypeslib.as_array(slab, (n.value,)).copy()
            if lib.otter_training_optimizer_step(self.s) != 0:
                raise RuntimeError("otter_training_optimizer_step: " + self.o.error())
            if lib.otter_training_lazy_reset_grad(self.s) != 0:
                raise RuntimeError("otter_training_lazy_reset_grad: " + self.o.error())
        finally:
            for t in ts:
                lib.otter_tensor_free(t)
        return loss, grad

    def free(self):
        self.o.lib.otter_training_session_free(self.s)


# ---- cases ------------------------------------------------------------------------------------------

def case_name(model, loss, opt, extra):
    return f"{model}/{loss}+{opt}" + ("(" + extra[1] + ")" if extra else "")


def make_batches(d, exporter, model, loss, seed):
    """STEPS batches {input, labels|target}: .npy for otter, raw .bin for Node. Returns the feed specs."""
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    shape = exporter.input_shape(model, BATCH[model])
    tname = "labels" if loss == "CrossEntropyLoss" else "target"
    batch = None
    for k in range(STEPS):
        if batch is None or model not in RANDOM_DROPOUT:  # random dropout: one batch, repeated
            x = rng.standard_normal(shape).astype(np.float32)
            c = rng.integers(0, CLASSES, shape[0])
            if loss == "CrossEntropyLoss":
                y = c.astype(np.int64)
            elif loss == "BCEWithLogitsLoss":
                y = rng.uniform(0.0, 1.0, (shape[0], CLASSES)).astype(np.float32)
            else:
                y = np.eye(CLASSES, dtype=np.float32)[c]
            batch = (x, y)
        for name, a in (("input", batch[0]), (tname, batch[1])):
            np.save(os.path.join(d, f"{name}_{k}.npy"), a)
            a.tofile(os.path.join(d, f"{name}_{k}.bin"))
    return [{"name": "input", "dtype": "float32", "shape": list(shape)},
            {"name": tname, "dtype": "int64" if tname == "labels" else "float32", "shape": list(batch[1].shape)}]


def float_params(training_path, trainable):
    """[(name, numel)] of the float parameter inputs of the training model (trainable ones only, or all: every
    input but the user inputs, the gradient buffers and lazy_reset_grad), in graph order."""
    m = onnx.load(training_path, load_external_data=False)
    suffix = "_grad.accumulation.buffer"
    bufs = {i.name[: -len(suffix)] for i in m.graph.input if i.name.endswith(suffix)}
    out = []
    for i in m.graph.input:
        if i.name in ("input", "labels", "target", "lazy_reset_grad") or i.name.endswith(suffix):
            continue
        tt = i.type.tensor_type
        if (i.name in bufs or not trainable) and tt.elem_type == onnx.TensorProto.FLOAT:
            out.append((i.name, int(np.prod([d.dim_value for d in tt.shape.dim]))))
    return out


def otter_train(otter, d, bd, feeds):
    """otter's run: {losses, params (trainable buffer before step 1, ..., after step STEPS), all (the same for
    all parameters), grads (of each step)}, or raises RuntimeError. Writes the buffer of all parameters before each
    step to d/otter_<k>.all for ORT."""
    s = TrainingSession(otter, d, seed=7)
    try:
        run = {"losses": [], "params": [s.buffer(True)], "all": [s.buffer(False)], "grads": [],
               "names": s.params}
        for k in range(STEPS):
            run["all"][k].tofile(os.path.join(d, f"otter_{k}.all"))
            batch = {f["name"]: np.load(os.path.join(bd, f"{f['name']}_{k}.npy")) for f in feeds}
            loss, grad = s.step(batch)
            run["losses"].append(loss)
            run["grads"].append(grad)
            run["params"].append(s.buffer(True))
            run["all"].append(s.buffer(False))
        return run
    finally:
        s.free()


def split(buf, layout):
    """{name: slice of the contiguous buffer} in graph order."""
    out, off = {}, 0
    for name, n in layout:
        out[name] = buf[off:off + n]
        off += n
    return out


def gradient_scales(g):
    """{name: the scale of tensor name's gradient error}: its largest |g| (testlib's error model), except for a
    tensor whose largest |g| is below GAMMA G, G the model's largest: that is rounding noise of a sum that cancels
    in exact arithmetic (a conv bias before BatchNorm: BatchNorm's gradient sums to 0 over each channel), whose
    terms reach G, so its error is GAMMA G too. Under Adam such noise may become a +-lr step in either runtime."""
    top = max(float(np.max(np.abs(v))) for v in g.values() if v.size)
    scales = {}
    for k, v in g.items():
        m = float(np.max(np.abs(v))) if v.size else 0.0
        scales[k] = m if m >= GAMMA * top else top
    return scales


TORCH_LOSSES = {"CrossEntropyLoss": nn.CrossEntropyLoss(), "MSELoss": nn.MSELoss(),
                "BCEWithLogitsLoss": nn.BCEWithLogitsLoss(), "L1Loss": nn.L1Loss()}


def torch_loss(module, loss, params, x, y):
    """PyTorch float64 (train mode, the module's own loss function) at the given parameters {name: float32}:
    (logits, dloss/dlogits, loss)."""
    with torch.no_grad():
        for k, v in module.state_dict().items():
            if k in params:
                v.copy_(torch.from_numpy(params[k].reshape(v.shape).astype(np.float64)))
    z = module(torch.from_numpy(x).double())
    target = torch.from_numpy(y) if y.dtype == np.int64 else torch.from_numpy(y).double()
    value = TORCH_LOSSES[loss](z, target)
    (dz,) = torch.autograd.grad(value, z)
    return z.detach().numpy(), dz.numpy(), float(value)


def flipped_grad(module, chain, loss, x, y, flips=()):
    """PyTorch float64's gradient {name: flat array} through the module's layer chain (flips.py) with the
    decisions in flips taken the other way, at the parameters torch_loss loaded; and the ambiguous decisions."""
    logits, ambiguous = chain_forward(chain, torch.from_numpy(x).double(), flips)
    target = torch.from_numpy(y) if y.dtype == np.int64 else torch.from_numpy(y).double()
    names, params = zip(*module.named_parameters())
    grads = torch.autograd.grad(TORCH_LOSSES[loss](logits, target), params)
    return {n: v.numpy().reshape(-1) for n, v in zip(names, grads)}, ambiguous


def worst_ratio(ratios):
    """The worst error/bound of UpdateReference.compare's result (NaN if any)."""
    return functools.reduce(tl.worse, (r for r, _ in ratios.values()), 0.0)


def explain_flips(ort, t, w, g, got, scales, flipped):
    """ORT's update off its bound from otter's gradient g: the ReLU/MaxPool decisions within their float32 error
    that ORT may have taken the other way from otter, closest first, each shifting g by its effect on float64's
    gradient (flipped(flips) -> (gradient, ambiguous)), in either direction (otter itself may have taken float64's
    decision the other way); a shift is kept when it brings g nearer to ORT's update, at most MAX_FLIPS of
    MAX_FLIP_TRIES. Returns (ratios, states, the flips kept as (stage, index))."""
    ratios, states = ort.compare(t, w, g, got, scales)
    kept = []
    if worst_ratio(ratios) <= 1 or flipped is None:
        return ratios, states, kept
    base, ambiguous = flipped(())
    for _, stage, i in ambiguous[:MAX_FLIP_TRIES]:
        if worst_ratio(ratios) <= 1 or len(kept) == MAX_FLIPS:
            break
        one, _ = flipped(((stage, i),))
        for sign in (1, -1):
            g2 = {n: g[n] + sign * (one[n] - base[n]) for n in g}
            r2, s2 = ort.compare(t, w, g2, got, scales)
            if worst_ratio(r2) < worst_ratio(ratios):
                g, ratios, states = g2, r2, s2
                kept.append((stage, i))
                break
    return ratios, states, kept


class Worst:
    """Running worst error/bound of one kind over a case, with where it happened."""

    def __init__(self):
        self.ratio, self.where = 0.0, ""

    def note(self, ratio, where):
        if math.isnan(self.ratio):
            return
        if math.isnan(ratio) or ratio > self.ratio:
            self.ratio, self.where = ratio, where

    def __str__(self):
        return f"{self.ratio:.3g}" + (f" ({self.where})" if self.where else "")


def compare_steps(name, job, model_module, run, layout, layout_all):
    """The per-step checks of a synchronized case (see the docstring); returns the summary row's fields."""
    d, loss = job["dir"], job["loss"]
    adamw = None
    if job["opt"] == "AdamW":
        adamw = tl.AdamW.of_optimizer_model(os.path.join(d, "optimizer_model.onnx"))
        check(adamw is not None, f"{name}: optimizer_model.onnx has an AdamWOptimizer node: {adamw}")
    chain = layer_chain(model_module)
    own = tl.UpdateReference(LR, adamw, grad_err=0.0)  # otter: its own gradient, exactly
    ort = tl.UpdateReference(LR, adamw, grad_err=2 * GAMMA)  # ORT: a gradient within 2 GAMMA of otter's
    frozen = [n for n, _ in layout_all if n not in dict(layout)]
    w_loss, w_own, w_ort, w_frozen = Worst(), Worst(), Worst(), Worst()
    flips_used, moved = [], 0.0
    for k in range(STEPS):
        t = k + 1
        w = split(run["params"][k], layout)
        g = {n: v.astype(np.float64) for n, v in split(run["grads"][k], layout).items()}
        got_o = split(run["params"][k + 1], layout)
        pr = np.fromfile(f"{job['out']}.params_{k}", "<f4")
        ar = np.fromfile(f"{job['out']}.all_{k}", "<f4")
        if pr.size != run["params"][k].size or ar.size != run["all"][k].size:
            check(False, f"{name}: step {t}: ORT's buffers hold {pr.size}/{ar.size} floats, otter's "
                         f"{run['params'][k].size}/{run['all'][k].size}")
            return None
        got_r = split(pr, layout)
        batch = {f["name"]: np.load(os.path.join(job["batches"], f"{f['name']}_{k}.npy")) for f in job["feeds"]}
        x, y = batch["input"], batch[job["feeds"][1]["name"]]
        z, dz, loss64 = torch_loss(model_module, loss, split(run["all"][k], layout_all), x, y)
        bound = loss_bound(z, dz, loss64)
        for who, value in (("otter", run["losses"][k]), ("ORT", job["ort_losses"][k])):
            w_loss.note(abs(value - loss64) / bound, f"{who}, step {t}")
        ratios, states = own.compare(t, w, g, got_o)
        own.commit(states)
        for p, (ratio, _) in ratios.items():
            w_own.note(ratio, f"{p}, step {t}")
        flipped = functools.partial(flipped_grad, model_module, chain, loss, x, y) if chain else None
        ratios, states, flips = explain_flips(ort, t, w, g, got_r, gradient_scales(g), flipped)
        ort.commit(states)
        # a decision is named by its kind and the layer before it: "step 3 relu@conv2"
        flips_used += [f"step {t} {chain[st][0]}@{chain[st - (1 if chain[st][0] == 'relu' else 2)][1]}"
                       for st, _ in flips]
        moved = max([moved] + [float(np.max(np.abs(got_r[n].astype(np.float64) - w[n]))) for n in w])
        for p, (ratio, rel) in ratios.items():
            w_ort.note(ratio, f"{p}, step {t}, error {rel:.1e} of its largest update")
        if frozen:
            old = split(run["all"][k], layout_all)
            new_o, new_r = split(run["all"][k + 1], layout_all), split(ar, layout_all)
            for p in frozen:
                err = np.abs((new_r[p].astype(np.float64) - old[p]) - (new_o[p].astype(np.float64) - old[p]))
                b = frozen_bound(old[p].astype(np.float64), new_o[p].astype(np.float64))
                w_frozen.note(float(np.max(np.divide(err, b, out=np.zeros_like(err), where=err != 0))),
                              f"{p}, step {t}")
    lo = run["losses"]
    check(w_loss.ratio <= 1, f"{name}: {STEPS} losses of otter and ORT vs torch float64 from otter's parameters of "
                             f"each step: worst error/bound {w_loss}; otter {lo[0]:.6f} -> {lo[-1]:.6f}")
    check(w_own.ratio <= 1, f"{name}: otter's update of every element = the optimizer model's formula of its "
                            f"gradient: worst error/bound {w_own}")
    check(w_ort.ratio <= 1 and moved > 0,
          f"{name}: ORT's update of every element from otter's parameters vs the formula of otter's gradient: "
          f"worst error/bound {w_ort}; decisions ORT took the other way: {', '.join(flips_used) or 'none'}; "
          f"ORT moved parameters by up to {moved:.3g}")
    row = {"loss": str(w_loss), "update": f"otter {w_own.ratio:.3g}, ORT {w_ort}"}
    if frozen:
        check(w_frozen.ratio <= 1, f"{name}: each step's change of the frozen parameters ({', '.join(frozen)}) in "
                                   f"ORT vs otter: worst error/bound {w_frozen}")
        row["frozen"] = str(w_frozen)
    return row


def main():
    if not os.path.exists(LIB):
        print(f"FAIL {LIB} was not built")
        return 1
    ort_js = ensure_ort()
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    exporter = load_exporter()
    otter = Otter(LIB)
    only = set(os.environ.get("ARTIFACTS_ORT_ONLY", "").split(",")) - {""}
    cases = [c for c in CASES if not only or c[0] in only]

    exported = {}
    jobs = []
    otter_runs = {}  # artifacts folder -> otter's run (a domain-fixed copy is compared with the original's)
    for model, loss, opt, extra in cases:
        i = CASES.index((model, loss, opt, extra))
        name = case_name(model, loss, opt, extra)
        if model not in exported:
            path = os.path.join(WORK, model + ".onnx")
            exporter.export(model, path)
            exported[model] = path
        d = os.path.join(WORK, f"{model}-{loss}-{opt}-{i}")
        rc, out = run_cli("artifacts", exported[model], "-o", d, "--loss", loss, "--optimizer", opt, *extra)
        check(rc == 0, f"{name}: otter artifacts -> exit {rc}" + ("" if rc == 0 else f": {out[-600:]}"))
        if rc != 0:
            continue
        bd = os.path.join(d, "batches")
        feeds = make_batches(bd, exporter, model, loss, 1000 + i)
        try:
            otter_runs[d] = otter_train(otter, d, bd, feeds)
        except RuntimeError as e:
            check(False, f"{name}: otter: {e}")
            continue
        # Random Dropout masks can't be the same in both runtimes: ORT trains on its own there.
        sync = None if model in RANDOM_DROPOUT else os.path.join(d, "otter")
        job = {"name": name, "model": model, "loss": loss, "opt": opt, "dir": d, "batches": bd, "feeds": feeds,
               "steps": STEPS, "out": os.path.join(d, "ort"), "sync": sync, "otter_dir": d}
        jobs.append(job)
        fixed = domain_fixed_copy(d)
        if fixed:
            jobs.append(dict(job, name=name + " [domain-fixed]", dir=fixed, out=os.path.join(fixed, "ort"),
                             fixed=True))

    job_file = os.path.join(WORK, "jobs.json")
    json.dump(jobs, open(job_file, "w"))
    script = os.path.join(WORK, "ort_artifacts.js")
    open(script, "w").write(NODE_SCRIPT)
    r = subprocess.run(["node", script, ort_js, job_file], capture_output=True, text=True, timeout=3000)
    sys.stderr.write(r.stderr[-4000:])
    check(r.returncode == 0, "node ran ORT's training")
    res = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}

    summary = []
    modules = {}  # model -> its PyTorch module in float64 (the loss reference)
    for job in jobs:
        name, d = job["name"], job["otter_dir"]
        o = res.get(name, {})
        loaded = o.get("loaded", False)
        err = o.get("error", "")
        detail = ""
        if not loaded and "partial" in o:
            detail = "\n       loaded without some files: " + "; ".join(f"{k}: {v}" for k, v in o["partial"].items())
        what = ("ORT loads the copy with " + "/".join(ONNX_DOMAIN_GRADS) + " moved to the ai.onnx domain "
                "(otter trains the original)") if job.get("fixed") else "ORT loads the four artifacts"
        check(loaded, f"{name}: {what}" + ("" if loaded else f": {err}{detail}"))
        if loaded:
            check(o.get("ok", False), f"{name}: ORT trained {STEPS} steps" + (f": {err}" if err else ""))
        row = {"name": name, "loads": "yes" if loaded else "no: " + err}
        summary.append(row)
        run = otter_runs[d]
        if not loaded or not o.get("ok"):
            continue
        p0o, a0o = run["params"][0], run["all"][0]
        layout = float_params(os.path.join(d, "training_model.onnx"), True)
        layout_all = float_params(os.path.join(d, "training_model.onnx"), False)
        want = sum(n for _, n in layout)
        want_all = sum(n for _, n in layout_all)
        check(o["size"] == p0o.size == want and o["size_all"] == a0o.size == want_all,
              f"{name}: parameter buffer sizes ORT {o['size']}/{o['size_all']}, otter {p0o.size}/{a0o.size}, "
              f"training graph {want}/{want_all} (trainable/all, {len(layout)}/{len(layout_all)} tensors)")
        check([p for p in run["names"] if p in dict(layout_all)] == [p for p, _ in layout_all],
              f"{name}: otter's parameter order = the training graph's parameter inputs")
        p0r = np.fromfile(job["out"] + ".params0", "<f4")
        a0r = np.fromfile(job["out"] + ".all0", "<f4")
        same0 = p0o.size == p0r.size and np.array_equal(p0o.view("<u4"), p0r.view("<u4"))
        same0a = a0o.size == a0r.size and np.array_equal(a0o.view("<u4"), a0r.view("<u4"))
        check(same0 and same0a, f"{name}: contiguous buffers (trainable and all) bit-identical before training")
        if not (same0 and same0a and o["size"] == want and o["size_all"] == want_all):
            continue
        lr_, lo = np.array(o["losses"], np.float64), np.array(run["losses"], np.float64)
        if job["sync"] is None:
            pr = np.fromfile(job["out"] + ".params", "<f4")
            moved = float(np.abs(pr.astype(np.float64) - p0r).max()) if pr.size == p0r.size else 0.0
            for who, ls in (("ORT", lr_), ("otter", lo)):
                ok = ls.size == STEPS and bool(np.all(np.isfinite(ls))) and ls[-3:].mean() < ls[:3].mean()
                check(ok, f"{name}: {who} trains with random Dropout masks on a repeated batch: loss "
                      f"{ls[:3].mean():.5f} (mean of steps 1-3) -> {ls[-3:].mean():.5f} (steps 8-10)")
            check(moved > 0, f"{name}: ORT moved the parameters (max {moved:.3g})")
            row.update(loss="n/a (random masks)", trend=f"ORT {lr_[0]:.4f}->{lr_[-1]:.4f}, "
                                                        f"otter {lo[0]:.4f}->{lo[-1]:.4f}")
            continue
        if job["model"] not in modules:
            modules[job["model"]] = exporter.build_model(job["model"]).double().train()
        job["ort_losses"] = o["losses"]
        fields = compare_steps(name, job, modules[job["model"]], run, layout, layout_all)
        if fields:
            row.update(fields, trend=f"{lo[0]:.4f}->{lo[-1]:.4f}")

    print("---- summary (loads in ORT; worst error/bound over the steps: loss, update, frozen parameters)")
    for row in summary:
        print(f"  {row['name']}: loads {row['loads'][:200]}; loss {row.get('loss', '-')}; update "
              f"{row.get('update', '-')}; frozen {row.get('frozen', '-')}; loss {row.get('trend', '-')}")
    return tl.finish("test_artifacts_ort")


if __name__ == "__main__":
    sys.exit(main())
