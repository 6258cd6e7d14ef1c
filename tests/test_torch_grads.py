"""otter's gradients of PyTorch-exported models against torch.autograd.

For each model of tools/export_torch_models.py (the seeds' MNIST DNN and CIFAR-10 CNN, a CNN with
BatchNorm2d and Dropout, a small transformer encoder layer at opset 15 and 17) and each of the four
losses (MSELoss, CrossEntropyLoss, BCEWithLogitsLoss, L1Loss; reduction mean):

1. `otter artifacts MODEL -o DIR --loss L` makes the artifacts; the training, eval and optimizer
   models pass onnx.checker.check_model(full_check=True) and `otter check`.
2. otter's runtime (libotter.so through ctypes) runs training_model.onnx once on fixed inputs, with the
   parameters, zeroed `<p>_grad.accumulation.buffer`s and lazy_reset_grad = true; the buffers then hold
   the gradients. A second run with lazy_reset_grad = false must double them (InPlaceAccumulatorV2
   accumulates), a third with true must give the gradients again.
3. The same module in PyTorch (train() mode: BatchNorm uses batch statistics), in float64, with the
   weights of the ONNX file and the same inputs, gives the reference loss and gradients.

Norm: for each parameter, err = max|otter - torch| / max|torch|, tolerance 1e-4; the loss to 1e-5
relative. A gradient that is zero in exact arithmetic (a conv bias followed by BatchNorm: torch's
float64 max is ~1e-17) has no relative error; there max|otter| <= 1e-6 * G is required instead, G the
largest |torch gradient| over the model's parameters (listed as "zero gradients", not in the worst).

Dropout: the p = 0 model compares directly (the mask keeps everything, DropoutGrad scales by 1). The
p = 0.5 model runs a copy of the training model that also outputs each Dropout's mask; torch then
applies exactly that mask (x * mask / (1 - p)), so the loss checks that the forward applied the mask
and every gradient checks that DropoutGrad applied the same mask. The masks must keep 30-70%.
"""
import ctypes
import os
import subprocess
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import LIB, TP, check, load_exporter, run_cli  # noqa: E402

WORK = tl.work_dir("torch_grads")

GRAD_TOL = 1e-4
LOSS_TOL = 1e-5
ZERO = 1e-10  # a torch gradient below ZERO * G is zero in exact arithmetic
ZERO_ABS = 1e-6  # ... and otter's must then be below ZERO_ABS * G
LOSSES = ["MSELoss", "CrossEntropyLoss", "BCEWithLogitsLoss", "L1Loss"]
BATCH = {"mnist_dnn": 8, "cifar_cnn": 4, "bn_dropout_cnn": 8, "bn_dropout_cnn_p0": 8, "transformer": 4,
         "transformer_ln17": 4}
CLASSES = 10

worst = {"grad": (0.0, ""), "loss": (0.0, "")}


def note_worst(kind, err, where):
    if err > worst[kind][0] or not np.isfinite(err):
        worst[kind] = (err, where)


# ---- otter's runtime through ctypes -------------------------------------------------------------

class Otter:
    def __init__(self, path):
        lib = tl.load_lib(path)
        P = ctypes.c_void_p
        lib.otter_session_create_from_file.argtypes = [ctypes.POINTER(P), ctypes.c_char_p, P]
        lib.otter_session_free.argtypes = [P]
        lib.otter_session_input_count.argtypes = [P]
        lib.otter_session_input_count.restype = ctypes.c_size_t
        lib.otter_session_input_name.argtypes = [P, ctypes.c_size_t]
        lib.otter_session_input_name.restype = ctypes.c_char_p
        lib.otter_session_output_count.argtypes = [P]
        lib.otter_session_output_count.restype = ctypes.c_size_t
        lib.otter_session_output_name.argtypes = [P, ctypes.c_size_t]
        lib.otter_session_output_name.restype = ctypes.c_char_p
        lib.otter_session_run.argtypes = [P, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                                          ctypes.POINTER(TP), ctypes.c_size_t,
                                          ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(TP)]
        self.lib = lib

    def error(self):
        return tl.last_error(self.lib)

    def tensor(self, arr):
        return tl.tensor_from_array(self.lib, arr)

    to_numpy = staticmethod(tl.tensor_to_array)


class Session:
    def __init__(self, otter, path):
        self.o = otter
        self.s = ctypes.c_void_p()
        if otter.lib.otter_session_create_from_file(ctypes.byref(self.s), path.encode(), None) != 0:
            raise RuntimeError(f"otter_session_create_from_file({path}): {otter.error()}")
        lib = otter.lib
        self.inputs = [lib.otter_session_input_name(self.s, i).decode()
                       for i in range(lib.otter_session_input_count(self.s))]
        self.outputs = [lib.otter_session_output_name(self.s, i).decode()
                        for i in range(lib.otter_session_output_count(self.s))]

    def run(self, feeds, output_names):
        """Runs with feeds {name: otter tensor} (read, and updated in place by in-place kernels);
        returns the named outputs as numpy arrays."""
        names = list(feeds)
        c_names = (ctypes.c_char_p * len(names))(*[n.encode() for n in names])
        c_in = (TP * len(names))(*[feeds[n] for n in names])
        c_onames = (ctypes.c_char_p * len(output_names))(*[n.encode() for n in output_names])
        c_out = (TP * len(output_names))()
        s = self.o.lib.otter_session_run(self.s, len(names), c_names, c_in, len(output_names), c_onames, c_out)
        if s != 0:
            raise RuntimeError("otter_session_run: " + self.o.error())
        out = [Otter.to_numpy(c_out[i]) for i in range(len(output_names))]
        for i in range(len(output_names)):
            self.o.lib.otter_tensor_free(c_out[i])
        return out

    def free(self):
        self.o.lib.otter_session_free(self.s)


# ---- one case -------------------------------------------------------------------------------------

def make_data(name, loss, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    b = shape[0]
    if loss == "CrossEntropyLoss":
        return x, "labels", rng.integers(0, CLASSES, size=(b,)).astype(np.int64)
    if loss == "BCEWithLogitsLoss":
        return x, "target", rng.uniform(0.0, 1.0, size=(b, CLASSES)).astype(np.float32)
    return x, "target", rng.standard_normal((b, CLASSES)).astype(np.float32)


class FixedMaskDropout(nn.Module):
    """Dropout that applies a given mask (otter's), scaled by 1 / (1 - p), as ONNX's Dropout does."""

    def __init__(self, mask, p):
        super().__init__()
        self.mask, self.p = mask, p

    def forward(self, x):
        return x * self.mask.to(x.dtype) / (1.0 - self.p)


def torch_module(exporter, name, onnx_model):
    """The float64 module with the ONNX file's weights (and BatchNorm running statistics)."""
    model = exporter.build_model(name)
    inits = {t.name: numpy_helper.to_array(t) for t in onnx_model.graph.initializer}
    state = model.state_dict()
    loaded = {}
    for k, v in state.items():
        if k in inits:
            loaded[k] = torch.from_numpy(inits[k].copy()).to(v.dtype)
        else:
            loaded[k] = v  # e.g. num_batches_tracked, which the export leaves out
    model.load_state_dict(loaded)
    return model.double()


def torch_loss(model, loss, x, target):
    out = model(torch.from_numpy(x).double())
    if loss == "CrossEntropyLoss":
        return nn.CrossEntropyLoss()(out, torch.from_numpy(target))
    fn = {"MSELoss": nn.MSELoss(), "BCEWithLogitsLoss": nn.BCEWithLogitsLoss(), "L1Loss": nn.L1Loss()}[loss]
    return fn(out, torch.from_numpy(target).double())


def torch_reference(exporter, name, onnx_model, loss, x, target, masks):
    """float64 loss and gradients {param: array} in train() mode; Dropout applies `masks` when given."""
    model = torch_module(exporter, name, onnx_model).train()
    if masks is not None:
        drops = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Dropout)]
        assert len(drops) == len(masks), (len(drops), len(masks))
        for (attr, child), mask in zip(drops, masks):
            setattr(model, attr, FixedMaskDropout(torch.from_numpy(mask), child.p))
    value = torch_loss(model, loss, x, target)
    model.zero_grad()
    value.backward()
    grads = {n: p.grad.detach().numpy().copy() for n, p in model.named_parameters()}
    return float(value), grads


def check_eval(otter, exporter, name, loss, d, onnx_model, x, target_name, target):
    """eval_model.onnx (BatchNorm on running statistics, no Dropout) against torch's eval() mode."""
    label = f"{name}/{loss}"
    inits = {t.name: numpy_helper.to_array(t) for t in onnx_model.graph.initializer}
    try:
        sess = Session(otter, os.path.join(d, "eval_model.onnx"))
    except RuntimeError as e:
        check(False, f"{label}: eval model: {e}")
        return
    feeds = {"input": otter.tensor(x), target_name: otter.tensor(target)}
    try:
        for n in sess.inputs:
            if n in inits:
                feeds[n] = otter.tensor(inits[n])
        got = float(sess.run(feeds, [sess.outputs[0]])[0])
        with torch.no_grad():
            want = float(torch_loss(torch_module(exporter, name, onnx_model).eval(), loss, x, target))
        err = abs(got - want) / max(abs(want), 1e-12)
        note_worst("loss", err, label + " eval")
        check(err <= LOSS_TOL, f"{label}: eval model loss otter {got:.8g} torch eval() {want:.8g} rel err {err:.2e}")
    except RuntimeError as e:
        check(False, f"{label}: running the eval model: {e}")
    finally:
        for t in feeds.values():
            otter.lib.otter_tensor_free(t)
        sess.free()


def check_models(d, label):
    for f in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        path = os.path.join(d, f)
        try:
            onnx.checker.check_model(onnx.load(path), full_check=True)
            msg = "passes"
        except Exception as e:  # onnx raises ValidationError or InferenceError
            msg = f"fails: {str(e).splitlines()[0][:300]}"
        check(msg == "passes", f"{label}: onnx.checker(full_check=True) {f} {msg}")
        rc, out = run_cli("check", path)
        check(rc == 0, f"{label}: otter check {f} -> exit {rc}" + ("" if rc == 0 else f": {out[-400:]}"))


def with_mask_outputs(training_path, out_path):
    """Copy of the training model that also outputs every Dropout's mask; returns the mask names."""
    m = onnx.load(training_path)
    masks = []
    for n in m.graph.node:
        if n.op_type == "Dropout":
            if len(n.output) < 2 or not n.output[1]:
                raise RuntimeError(f"Dropout node {n.name} has no mask output in the training model")
            masks.append(n.output[1])
            m.graph.output.append(onnx.helper.make_tensor_value_info(n.output[1], onnx.TensorProto.BOOL, None))
    onnx.save(m, out_path)
    return masks


def run_case(otter, exporter, name, loss, model_path, onnx_model, seed):
    label = f"{name}/{loss}"
    d = os.path.join(WORK, f"{name}-{loss}")
    os.makedirs(d, exist_ok=True)
    rc, out = run_cli("artifacts", model_path, "-o", d, "--loss", loss)
    check(rc == 0, f"{label}: otter artifacts -> exit {rc}" + ("" if rc == 0 else f": {out[-600:]}"))
    if rc != 0:
        return
    check_models(d, label)

    dropout_p = name == "bn_dropout_cnn"  # p = 0.5: compare with the mask otter drew
    training_path = os.path.join(d, "training_model.onnx")
    mask_names = []
    if dropout_p:
        masked = os.path.join(d, "training_model_masks.onnx")
        mask_names = with_mask_outputs(training_path, masked)
        training_path = masked

    rng = np.random.default_rng(seed)
    x, target_name, target = make_data(name, loss, exporter.input_shape(name, BATCH[name]), rng)
    inits = {t.name: numpy_helper.to_array(t) for t in onnx_model.graph.initializer}
    check_eval(otter, exporter, name, loss, d, onnx_model, x, target_name, target)
    try:
        sess = Session(otter, training_path)
    except RuntimeError as e:
        check(False, f"{label}: {e}")
        return
    try:
        params = [n for n in sess.inputs if n in inits]
        buffers = {n: n[: -len("_grad.accumulation.buffer")] for n in sess.inputs
                   if n.endswith("_grad.accumulation.buffer")}
        expect = ["input", target_name] + params + list(buffers) + ["lazy_reset_grad"]
        check(sess.inputs == expect, f"{label}: training inputs in ORT's order ({len(sess.inputs)})"
              + ("" if sess.inputs == expect else f": got {sess.inputs}, want {expect}"))
        keep = {}  # otter tensors, alive for the session's runs
        feeds = {"input": otter.tensor(x), target_name: otter.tensor(target)}
        for p in params:
            feeds[p] = otter.tensor(inits[p])
        for b, p in buffers.items():
            feeds[b] = keep[b] = otter.tensor(np.zeros_like(inits[p]))
        reset_true, reset_false = otter.tensor(np.array([True])), otter.tensor(np.array([False]))
        out_names = [sess.outputs[0]] + mask_names
        try:
            feeds["lazy_reset_grad"] = reset_true
            res = sess.run(feeds, out_names)
        except RuntimeError as e:
            check(False, f"{label}: running the training model: {e}")
            return
        loss_otter = float(res[0])
        masks = res[1:] if mask_names else None
        grads = {buffers[b]: Otter.to_numpy(keep[b]) for b in buffers}
        if masks is not None:
            for mn, mk in zip(mask_names, masks):
                frac = float(mk.mean())
                check(0.3 <= frac <= 0.7,
                      f"{label}: Dropout mask {mn} {list(mk.shape)} keeps {frac:.3f} (want 0.3-0.7)")

        loss_ref, ref = torch_reference(exporter, name, onnx_model, loss, x, target, masks)
        lerr = abs(loss_otter - loss_ref) / max(abs(loss_ref), 1e-12)
        note_worst("loss", lerr, label)
        check(lerr <= LOSS_TOL, f"{label}: loss otter {loss_otter:.8g} torch {loss_ref:.8g} rel err {lerr:.2e}")
        trainable = set(buffers.values())
        check(trainable == set(ref), f"{label}: trainable parameters = torch's parameters ({len(trainable)})"
              + ("" if trainable == set(ref) else f": otter {sorted(trainable)}, torch {sorted(ref)}"))
        g_max = max(float(np.abs(v).max()) for v in ref.values())
        case_worst = (0.0, "")
        bad, zeros = [], []
        for p in sorted(trainable & set(ref)):
            a, b = grads[p].astype(np.float64), ref[p]
            if a.shape != b.shape:
                bad.append(f"{p}: shape {a.shape} vs torch {b.shape}")
                continue
            finite = bool(np.all(np.isfinite(a)))
            if float(np.abs(b).max()) <= ZERO * g_max:  # zero in exact arithmetic: float32 rounding allowed
                zmax = float(np.abs(a).max()) if finite else float("inf")
                zeros.append(f"{p} max|otter| {zmax:.1e} (limit {ZERO_ABS * g_max:.1e}), "
                             f"max|torch| {np.abs(b).max():.1e}")
                if not zmax <= ZERO_ABS * g_max:
                    bad.append(f"{p}{list(a.shape)}: torch's gradient is zero, otter's max |value| is {zmax:.3e}")
                continue
            err = float(np.abs(a - b).max()) / float(np.abs(b).max()) if finite else float("inf")
            note_worst("grad", err, f"{label} {p}")
            if err > case_worst[0] or not np.isfinite(err):
                case_worst = (err, p)
            if not err <= GRAD_TOL:
                i = np.unravel_index(int(np.argmax(np.abs(a - b))), a.shape)
                bad.append(f"{p}{list(a.shape)}: err {err:.3e} (max|torch| {np.abs(b).max():.3e}, at {list(i)} "
                           f"otter {a[i]:.6g} torch {b[i]:.6g})")
        check(not bad, f"{label}: {len(trainable)} parameter gradients vs torch.autograd, worst {case_worst[0]:.2e} "
              f"({case_worst[1]})" + (f"; zero gradients: {', '.join(zeros)}" if zeros else "")
              + "".join("\n       " + s for s in bad))

        if masks is None:
            # Accumulation: lazy_reset_grad = false adds, true overwrites.
            feeds["lazy_reset_grad"] = reset_false
            sess.run(feeds, out_names)
            acc = max(float(np.abs(Otter.to_numpy(keep[b]) - 2 * grads[p]).max()) /
                      max(float(np.abs(grads[p]).max()), 1e-30) for b, p in buffers.items())
            feeds["lazy_reset_grad"] = reset_true
            sess.run(feeds, out_names)
            again = max(float(np.abs(Otter.to_numpy(keep[b]) - grads[p]).max()) /
                        max(float(np.abs(grads[p]).max()), 1e-30) for b, p in buffers.items())
            check(acc <= 1e-6 and again <= 1e-6,
                  f"{label}: accumulate (reset false) = 2x grad, rel err {acc:.1e}; reset true = grad, {again:.1e}")
        for t in feeds.values():
            otter.lib.otter_tensor_free(t)
    finally:
        sess.free()


def preload_sanitizer_runtime():
    """A -DOTTER_SANITIZE=ON libotter.so can only be loaded into python with the ASan runtime first in the
    process: re-run this script with it in LD_PRELOAD (leak checking off: CPython and torch keep memory
    until exit by design; otter's leaks are the C tests' job)."""
    if os.environ.get("OTTER_TORCH_GRADS_PRELOADED"):
        return
    ldd = subprocess.run(["ldd", LIB], capture_output=True, text=True).stdout
    asan = [ln.split("=>")[1].split()[0] for ln in ldd.splitlines() if "libasan" in ln and "=>" in ln]
    if not asan:
        return
    # libstdc++ too, or ASan can't intercept __cxa_throw for torch's C++ exceptions (CHECK failed).
    cxx = [ln.split("=>")[1].split()[0] for ln in
           subprocess.run(["ldd", torch._C.__file__], capture_output=True, text=True).stdout.splitlines()
           if "libstdc++" in ln and "=>" in ln]
    env = dict(os.environ, OTTER_TORCH_GRADS_PRELOADED="1",
               LD_PRELOAD=":".join(x for x in [asan[0]] + cxx[:1] + [os.environ.get("LD_PRELOAD", "")] if x),
               ASAN_OPTIONS="detect_leaks=0:" + os.environ.get("ASAN_OPTIONS", "").replace("detect_leaks=1", ""))
    print(f"libotter.so uses AddressSanitizer: re-running with LD_PRELOAD={asan[0]}", flush=True)
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def main():
    if not os.path.exists(LIB):
        print(f"FAIL {LIB} was not built")
        return 1
    preload_sanitizer_runtime()
    exporter = load_exporter()
    otter = Otter(LIB)
    os.makedirs(WORK, exist_ok=True)
    torch.set_num_threads(1)
    only = set(os.environ.get("TORCH_GRADS_ONLY", "").split(",")) - {""}
    seed = 1
    for name in exporter.MODELS:
        if only and name not in only:
            continue
        path = os.path.join(WORK, name + ".onnx")
        exporter.export(name, path)
        m = onnx.load(path)
        ops = sorted({n.op_type for n in m.graph.node})
        print(f"---- {name}: opset {m.opset_import[0].version}, ops {ops}", flush=True)
        for loss in LOSSES:
            seed += 1
            try:
                run_case(otter, exporter, name, loss, path, m, seed)
            except Exception as e:  # a crash in one case must not hide the others
                check(False, f"{name}/{loss}: {type(e).__name__}: {e}")
    print(f"worst gradient error {worst['grad'][0]:.3e} ({worst['grad'][1]}), tolerance {GRAD_TOL:g}")
    print(f"worst loss error {worst['loss'][0]:.3e} ({worst['loss'][1]}), tolerance {LOSS_TOL:g}")
    return tl.finish("test_torch_grads")


if __name__ == "__main__":
    sys.exit(main())
