"""otter's artifacts of PyTorch-exported models in ONNX Runtime's training runtime (onnxruntime-web 1.19.2 under Node).

Models: tools/export_torch_models.py's mnist_dnn, cifar_cnn, bn_dropout_cnn_p0 (BatchNorm2d + Dropout p = 0),
transformer (opset 15, LayerNorm decomposed) and transformer_ln17 (opset 17, LayerNormalization), each with
`otter artifacts` CrossEntropyLoss + AdamW and MSELoss + SGD; also mnist_dnn with BCEWithLogitsLoss + AdamW
(adam_mode 0, weight_decay 0.01) and L1Loss + AdamW (eps 1e-3), transformer_ln17 with L1Loss + AdamW (adam_mode 0,
weight_decay 0.01). For each set:

1. ORT loads the four artifacts (ort.TrainingSession.create). When it refuses, ORT's exact message is printed
   (the training build lets C++ exceptions escape as a bare heap address; the message is read from the wasm
   heap through a copy of ort.training.wasm.js that exposes its module), and the files are tried with the
   checkpoint and training model alone, + eval, + optimizer, to say which one it refuses.
   ORT registers MaxPoolGrad and AveragePoolGrad in the ai.onnx domain (opset 9), not com.microsoft: for a
   training model with com.microsoft MaxPoolGrad/AveragePoolGrad nodes, a copy with those nodes moved to
   ai.onnx is also run in ORT ("[domain-fixed]") and compared with otter running the original files, so the
   numbers of the CNNs are checked while the load failure stays a failure.
2. Both runtimes train STEPS = 10 steps (train step, optimizer step, lazy reset; lr 0.001, the web API's fixed
   learning rate) on the same fixed batches: otter through its training session API (libotter.so via ctypes,
   one thread), ORT from the same float32/int64 bytes.
3. Checked: getParametersSize(true/false) = otter's params_size = the sum of the float parameters' sizes in
   the training graph's parameter-input order; the contiguous buffers (trainable and all) bit-identical before
   training (same order); every step's loss to LOSS_TOL relative; the trained parameters per tensor (sliced
   out of the buffers in graph order): ||otter - ORT||_2 / ||ORT||_2 <= PARAM_TOL (max|otter - ORT| /
   max|ORT| is printed too). Under AdamW a tensor with a zero gradient in exact arithmetic (the conv bias
   before BatchNorm: float32 noise of ~1e-9, which Adam normalizes, moves it) is compared by movement (see
   compare_params). The frozen parameters (BatchNorm running statistics) after training are compared apart:
   ORT's BatchNormInternal updates them in place.

Dropout with p > 0 (bn_dropout_cnn, p = 0.5): the masks come from each runtime's own generator (ORT's Philox
stream vs otter's seeded stream), so the two can't draw the same masks and nothing is compared across runtimes.
Instead each runtime trains 10 steps on one repeated batch and the loss must decrease (mean of the last 3 steps
below the mean of the first 3) and stay finite; the parameter buffer layout is still compared.

ReLU + MaxPool CNNs and L1Loss under AdamW are sensitive to float32 kinks: see KINK_ADAM_EPS.

The npm package is installed under the build tree on first use. Prints the worst differences per model.
"""
import ctypes
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import LIB, TP, TrainingOptions, check, load_exporter, run_cli  # noqa: E402

WORK = tl.work_dir("artifacts_ort")
STEPS = 10
LOSS_TOL = 1e-5
PARAM_TOL = 1e-5
FROZEN_TOL = 1e-4  # BatchNorm running statistics: see the frozen-parameter check
ZERO_MOVE = 1e-2
CLASSES = 10
BATCH = {"mnist_dnn": 64, "cifar_cnn": 8, "bn_dropout_cnn": 32, "bn_dropout_cnn_p0": 32, "transformer": 16,
         "transformer_ln17": 16}

# (model, loss, optimizer, extra `otter artifacts` arguments)
# ReLU + MaxPool CNNs under AdamW: a pre-activation within float32 rounding of 0 (ReLU(conv) = 1.1e-8 in one
# runtime, 0 in the other) makes MaxPool route a gradient entry differently; with eps 1e-6, Adam turns such
# entries (and a conv bias before BatchNorm, whose exact gradient is 0) into lr-sized steps and two correct runtimes
# drift ~1e-4 apart in 10 steps. A larger epsilon keeps AdamW's math and the comparison exact while not amplifying
# gradient entries that are rounding noise; ORT and otter run the same optimizer model either way.
KINK_ADAM_EPS = 1e-3
CASES = [(m, "CrossEntropyLoss", "AdamW", []) for m in ("mnist_dnn", "transformer", "transformer_ln17")]
# ReLU + MaxPool CNNs under AdamW: see KINK_ADAM_EPS.
CASES += [(m, "CrossEntropyLoss", "AdamW", ["--lr-hparams", f"eps={KINK_ADAM_EPS}"]) for m in
          ("cifar_cnn", "bn_dropout_cnn_p0")]
CASES += [(m, "MSELoss", "SGD", []) for m in
          ("mnist_dnn", "cifar_cnn", "bn_dropout_cnn_p0", "transformer", "transformer_ln17")]
CASES += [("mnist_dnn", "BCEWithLogitsLoss", "AdamW", ["--lr-hparams", "adam_mode=0,weight_decay=0.01"]),
          # L1Loss's Sign(pred - target) is a kink like ReLU's: see KINK_ADAM_EPS (with eps 1e-8 the two runtimes
          # drift ~1e-3 apart in 10 steps when otter's matrix products sum in another order than OpenBLAS's)
          ("mnist_dnn", "L1Loss", "AdamW", ["--lr-hparams", f"eps={KINK_ADAM_EPS}"]),
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
        const feeds = {};
        job.feeds.forEach((t, i) => { feeds[t.name] = tensor(t, `${job.batches}/${t.name}_${k}.bin`); });
        const res = await sess.runTrainStep(feeds);
        r.losses.push(Number(res[sess.trainingOutputNames[0]].data[0]));
        await sess.runOptimizerStep();
        await sess.lazyResetGrad();
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
        """Train step on {name: array}, optimizer step, lazy reset; returns the loss."""
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
            if lib.otter_training_optimizer_step(self.s) != 0:
                raise RuntimeError("otter_training_optimizer_step: " + self.o.error())
            if lib.otter_training_lazy_reset_grad(self.s) != 0:
                raise RuntimeError("otter_training_lazy_reset_grad: " + self.o.error())
        finally:
            for t in ts:
                lib.otter_tensor_free(t)
        return loss

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


def otter_train(otter, d, bd, feeds, out):
    """Returns (losses, params0, params, all0, all, param names) from otter, or raises RuntimeError."""
    s = TrainingSession(otter, d, seed=7)
    try:
        p0, a0 = s.buffer(True), s.buffer(False)
        losses = []
        for k in range(STEPS):
            batch = {f["name"]: np.load(os.path.join(bd, f"{f['name']}_{k}.npy")) for f in feeds}
            losses.append(s.step(batch))
        return losses, p0, s.buffer(True), a0, s.buffer(False), s.params, s.inputs
    finally:
        s.free()


def compare_params(a, b, b0, layout, adamw, tol=None):
    """Per parameter tensor (slices of the contiguous buffers in graph order): err = ||a - b||_2 / ||b||_2,
    a otter's and b ORT's trained values, b0 the initial ones. Under AdamW, a tensor whose largest movement
    in ORT is below ZERO_MOVE of the model's largest has a zero gradient in exact arithmetic (a conv bias
    followed by BatchNorm) that float32 noise drives (Adam normalizes it): it is compared by movement (otter
    must move it less than ZERO_MOVE of the largest too) and listed apart. Returns (worst err, its tensor,
    worst max|a - b| / max|b|, zero-gradient notes, failures)."""
    tol = PARAM_TOL if tol is None else tol
    spans, off = [], 0
    for name, n in layout:
        spans.append((name, off, off + n))
        off += n
    d = a.astype(np.float64) - b
    move_r = {nm: float(np.abs(b[i:j].astype(np.float64) - b0[i:j]).max()) if j > i else 0.0 for nm, i, j in spans}
    move_o = {nm: float(np.abs(a[i:j].astype(np.float64) - b0[i:j]).max()) if j > i else 0.0 for nm, i, j in spans}
    top = max(move_r.values()) if move_r else 0.0
    worst, where, worst_max, zeros, bad = 0.0, "", 0.0, [], []
    for nm, i, j in spans:
        if adamw and move_r[nm] < ZERO_MOVE * top:
            zeros.append(f"{nm} moved {move_r[nm]:.2g} (ORT) {move_o[nm]:.2g} (otter)")
            if not move_o[nm] < ZERO_MOVE * top:
                bad.append(f"{nm}: ORT barely moved it ({move_r[nm]:.3g}), otter moved it {move_o[nm]:.3g}")
            continue
        nb = float(np.linalg.norm(b[i:j].astype(np.float64)))
        e = float(np.linalg.norm(d[i:j])) / nb if nb > 0 else float(np.linalg.norm(d[i:j]))
        mb = float(np.abs(b[i:j]).max()) if j > i else 0.0
        em = float(np.abs(d[i:j]).max()) / mb if mb > 0 else 0.0
        worst_max = max(worst_max, em) if np.isfinite(em) else float("inf")
        if not np.isfinite(e) or e > worst:
            worst, where = (e if np.isfinite(e) else float("inf")), nm
        if not e <= tol:
            k = i + int(np.argmax(np.abs(d[i:j])))
            bad.append(f"{nm}[{j - i}]: rel L2 {e:.3g}, max|diff| {np.abs(d[i:j]).max():.3g} at {k - i} "
                       f"(otter {a[k]:.8g}, ORT {b[k]:.8g}, initial {b0[k]:.8g}), "
                       f"{int((np.abs(d[i:j]) > PARAM_TOL * mb).sum())} elements off by > {PARAM_TOL:g} max|ORT|")
    return worst, where, worst_max, zeros, bad


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
        jobs.append({"name": name, "model": model, "opt": opt, "dir": d, "batches": bd, "feeds": feeds, "steps": STEPS,
                     "out": os.path.join(d, "ort")})
        fixed = domain_fixed_copy(d)
        if fixed:
            jobs.append({"name": name + " [domain-fixed]", "model": model, "opt": opt, "dir": fixed, "batches": bd,
                         "feeds": feeds, "steps": STEPS, "out": os.path.join(fixed, "ort"), "fixed_of": name})

    job_file = os.path.join(WORK, "jobs.json")
    json.dump(jobs, open(job_file, "w"))
    script = os.path.join(WORK, "ort_artifacts.js")
    open(script, "w").write(NODE_SCRIPT)
    r = subprocess.run(["node", script, ort_js, job_file], capture_output=True, text=True, timeout=3000)
    sys.stderr.write(r.stderr[-4000:])
    check(r.returncode == 0, "node ran ORT's training")
    res = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}

    summary = []
    otter_runs = {}  # artifacts folder -> otter's results (a domain-fixed copy is compared with the original)
    by_name = {j["name"]: j for j in jobs}
    for job in jobs:
        name = job["name"]
        d = by_name[job["fixed_of"]]["dir"] if "fixed_of" in job else job["dir"]
        o = res.get(name, {})
        loaded = o.get("loaded", False)
        err = o.get("error", "")
        detail = ""
        if not loaded and "partial" in o:
            detail = "\n       loaded without some files: " + "; ".join(f"{k}: {v}" for k, v in o["partial"].items())
        what = ("ORT loads the copy with " + "/".join(ONNX_DOMAIN_GRADS) + " moved to the ai.onnx domain "
                "(otter trains the original)") if "fixed_of" in job else "ORT loads the four artifacts"
        check(loaded, f"{name}: {what}" + ("" if loaded else f": {err}{detail}"))
        if loaded:
            check(o.get("ok", False), f"{name}: ORT trained {STEPS} steps" + (f": {err}" if err else ""))
        if d not in otter_runs:
            try:
                otter_runs[d] = otter_train(otter, d, job["batches"], job["feeds"], d)
            except RuntimeError as e:
                check(False, f"{name}: otter: {e}")
                otter_runs[d] = None
        row = {"name": name, "loads": "yes" if loaded else "no: " + err}
        summary.append(row)
        if otter_runs[d] is None:
            continue
        lo, p0o, po, a0o, ao, oparams, oinputs = otter_runs[d]
        lo = np.array(lo, np.float64)
        if not loaded or not o.get("ok"):
            continue
        lr_ = np.array(o["losses"], np.float64)
        layout = float_params(os.path.join(d, "training_model.onnx"), True)
        layout_all = float_params(os.path.join(d, "training_model.onnx"), False)
        want = sum(n for _, n in layout)
        want_all = sum(n for _, n in layout_all)
        check(o["size"] == p0o.size == want and o["size_all"] == a0o.size == want_all,
              f"{name}: parameter buffer sizes ORT {o['size']}/{o['size_all']}, otter {p0o.size}/{a0o.size}, "
              f"training graph {want}/{want_all} (trainable/all, {len(layout)}/{len(layout_all)} tensors)")
        check([p for p in oparams if p in dict(layout_all)] == [p for p, _ in layout_all],
              f"{name}: otter's parameter order = the training graph's parameter inputs")
        p0r = np.fromfile(job["out"] + ".params0", "<f4")
        a0r = np.fromfile(job["out"] + ".all0", "<f4")
        same0 = p0o.size == p0r.size and np.array_equal(p0o.view("<u4"), p0r.view("<u4"))
        same0a = a0o.size == a0r.size and np.array_equal(a0o.view("<u4"), a0r.view("<u4"))
        check(same0 and same0a, f"{name}: contiguous buffers (trainable and all) bit-identical before training")
        pr = np.fromfile(job["out"] + ".params", "<f4")
        ar = np.fromfile(job["out"] + ".all", "<f4")
        moved = float(np.abs(pr.astype(np.float64) - p0r).max()) if pr.size == p0r.size else 0.0
        if job["model"] in RANDOM_DROPOUT:
            for who, ls in (("ORT", lr_), ("otter", lo)):
                ok = ls.size == STEPS and bool(np.all(np.isfinite(ls))) and ls[-3:].mean() < ls[:3].mean()
                check(ok, f"{name}: {who} trains with random Dropout masks on a repeated batch: loss "
                      f"{ls[:3].mean():.5f} (mean of steps 1-3) -> {ls[-3:].mean():.5f} (steps 8-10)")
            check(moved > 0, f"{name}: ORT moved the parameters (max {moved:.3g})")
            row.update(loss="n/a (random masks)", param="n/a",
                       trend=f"ORT {lr_[0]:.4f}->{lr_[-1]:.4f}, otter {lo[0]:.4f}->{lo[-1]:.4f}")
            continue
        rel = (np.abs(lo - lr_) / np.maximum(np.abs(lr_), 1e-12)) if lo.size == lr_.size else np.array([np.inf])
        lworst = float(rel.max())
        check(lo.size == STEPS and lworst <= LOSS_TOL,
              f"{name}: {STEPS} losses, max rel diff {lworst:.3g} at step {int(rel.argmax()) + 1} (<= {LOSS_TOL:g}); "
              f"ORT {lr_[0]:.6f} -> {lr_[-1]:.6f}, otter {lo[0]:.6f} -> {lo[-1]:.6f}")
        if pr.size != po.size or ar.size != ao.size:
            check(False, f"{name}: trained buffer sizes differ: ORT {pr.size}/{ar.size}, otter {po.size}/{ao.size}")
            continue
        adamw = job["opt"] == "AdamW"
        perr, pwhere, pmax, zeros, bad = compare_params(po, pr, p0r, layout, adamw)
        absd = float(np.abs(po.astype(np.float64) - pr).max())
        check(not bad and moved > 0,
              f"{name}: trained parameters, worst per-tensor ||otter-ORT||/||ORT|| {perr:.3g} ({pwhere}) "
              f"(<= {PARAM_TOL:g}); worst per-tensor max|otter-ORT|/max|ORT| {pmax:.3g}, max abs diff {absd:.3g}, "
              f"training moved them up to {moved:.3g}" + (f"; zero-gradient tensors: {', '.join(zeros)}" if zeros else "")
              + "".join("\n       " + x for x in bad))
        frozen = [(n, k) for n, k in layout_all if n not in dict(layout)]
        if frozen:
            # Frozen parameters (BatchNorm running statistics): ORT's BatchNormInternal kernel aliases its
            # running_mean/running_var outputs to inputs 3/4, so training updates them in place
            # (running = momentum * running + (1 - momentum) * batch statistic, biased variance).
            fpos = {n: o for n, o in zip([n for n, _ in layout_all],
                                         np.cumsum([0] + [k for _, k in layout_all])[:-1])}
            fr = np.concatenate([ar[fpos[n]:fpos[n] + k] for n, k in frozen])
            fo = np.concatenate([ao[fpos[n]:fpos[n] + k] for n, k in frozen])
            f0 = np.concatenate([a0r[fpos[n]:fpos[n] + k] for n, k in frozen])
            # They are float32 batch means/variances over N*H*W values that ORT (Eigen, float) and otter
            # (double) sum in different orders; a mean near zero turns that into a relative error above
            # 1e-5 after 10 momentum updates, so they get FROZEN_TOL.
            ferr, fwhere, fmax, _, fbad = compare_params(fo, fr, f0, frozen, False, FROZEN_TOL)
            check(not fbad, f"{name}: frozen parameters after training ({', '.join(n for n, _ in frozen)}): worst "
                  f"||otter-ORT||/||ORT|| {ferr:.3g} ({fwhere}) (<= {FROZEN_TOL:g}); ORT moved them up to "
                  f"{float(np.abs(fr.astype(np.float64) - f0).max()):.3g}, otter up to "
                  f"{float(np.abs(fo.astype(np.float64) - f0).max()):.3g}" + "".join("\n       " + x for x in fbad))
            row["frozen"] = f"{ferr:.2g} ({fwhere})"
        row.update(loss=f"{lworst:.2g}", param=f"{perr:.2g} L2 / {pmax:.2g} max ({pwhere})",
                   trend=f"{lr_[0]:.4f}->{lr_[-1]:.4f}")

    print("---- summary (loads in ORT; worst loss rel diff over the steps; worst per-tensor parameter rel diff)")
    for row in summary:
        print(f"  {row['name']}: loads {row['loads'][:200]}; loss {row.get('loss', '-')}; params "
              f"{row.get('param', '-')}; frozen {row.get('frozen', '-')}; loss {row.get('trend', '-')}")
    return tl.finish("test_artifacts_ort")


if __name__ == "__main__":
    sys.exit(main())
