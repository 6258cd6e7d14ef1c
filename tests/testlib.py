"""Scaffolding shared by the Python tests: paths, check() and its counters, the summary line, running the
otter CLI, npm packages under the build tree, otter_tensor through ctypes. Not a test itself (CTest registers
tests/test_*.py only).

A test puts this folder first on sys.path and imports it:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import testlib as tl
"""
import ctypes
import importlib.util
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass

SRC = os.environ.get("OTTER_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.environ.get("OTTER_BINARY_DIR", os.path.join(SRC, "build"))
CLI = os.environ.get("OTTER_CLI", os.path.join(BIN, "otter"))
LIB = os.environ.get("OTTER_LIB", os.path.join(BIN, "libotter.so"))
NPM = os.path.join(BIN, "npm")
# A copy of ORT 1.18's Python tool's artifacts for the MNIST DNN 784-200-200-10.
ORT_FIXTURE = os.path.join(SRC, "tests", "data", "ort-flat-mnist")
ORT_VERSION = "1.19.2"

failures = 0
checks = 0


def work_dir(name):
    """The test's scratch folder under the build tree (not created here)."""
    return os.path.join(BIN, "tests", name)


def check(cond, what):
    """Counts a check; prints `ok   what` or `FAIL what`."""
    global failures, checks
    checks += 1
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures += 1


def worse(worst, err):
    """NaN-safe running maximum for error checks (testutil's tu_worse): NaN from the first NaN on, so a NaN
    result fails the final `worst <= tol`."""
    return math.nan if math.isnan(worst) or math.isnan(err) else max(worst, err)


def finish(name):
    """Prints the summary line; returns the exit code: 1 when a check failed or when no check ran at all (a test
    that compared nothing proves nothing)."""
    print(f"{name}: {checks} checks, {failures} failed", flush=True)
    if checks == 0:
        print(f"FAIL {name}: no check ran", flush=True)
    return 1 if failures or checks == 0 else 0


def run(cmd, echo=True):
    """Runs cmd (a list) with its output captured; returns the CompletedProcess. echo: True prints
    `$ cmd  [exit N]` and the output, "fail" only when the exit code is not 0, False nothing. The CLI's
    path is shown as `otter`."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if echo is True or (echo == "fail" and r.returncode != 0):
        shown = ["otter" if c == CLI else c for c in cmd[:1]] + [str(c) for c in cmd[1:]]
        print("$ " + " ".join(shown) + f"  [exit {r.returncode}]\n" + r.stdout + r.stderr, end="", flush=True)
    return r


def otter(*args, echo=True):
    """Runs the otter CLI (see run)."""
    return run([CLI, *args], echo)


def run_cli(*args):
    """Runs the otter CLI quietly; returns (exit code, stdout + stderr stripped)."""
    r = run([CLI, *args], echo=False)
    return r.returncode, (r.stdout + r.stderr).strip()


def npm_install(package, version):
    """Installs package@version under <build>/npm unless that version is already there (the registry is
    reachable in CI); returns the package's folder. A test that calls this must say "npm" in its own text:
    tests/CMakeLists.txt gives those tests RESOURCE_LOCK npm (parallel installs corrupt node_modules)."""
    folder = os.path.join(NPM, "node_modules", package)
    pkg = os.path.join(folder, "package.json")
    if not (os.path.exists(pkg) and json.load(open(pkg))["version"] == version):
        os.makedirs(NPM, exist_ok=True)
        if not os.path.exists(os.path.join(NPM, "package.json")):  # npm --prefix needs one in a fresh folder
            open(os.path.join(NPM, "package.json"), "w").write('{"private": true}\n')
        subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", "--prefix", NPM,
                        package + "@" + version], check=True)
    return folder


def ensure_ort():
    """onnxruntime-web ORT_VERSION under <build>/npm; returns its folder."""
    return npm_install("onnxruntime-web", ORT_VERSION)


def load_exporter():
    """tools/export_torch_models.py as a module."""
    path = os.path.join(SRC, "tools", "export_torch_models.py")
    spec = importlib.util.spec_from_file_location("export_torch_models", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- libotter.so through ctypes: the struct mirrors are otter_onnx._lib's (python/), the package's one copy -------

sys.path.insert(0, os.path.join(SRC, "python"))
from otter_onnx._lib import MAX_RANK, TP, Tensor, TrainingOptions  # noqa: E402,F401

DT_FLOAT, DT_INT64, DT_BOOL = 1, 7, 9  # otter_dtype (ONNX's TensorProto.DataType numbers)
NP_OF = {DT_FLOAT: "float32", DT_INT64: "int64", DT_BOOL: "bool"}  # otter_dtype -> numpy dtype name
DT_OF = {name: dt for dt, name in NP_OF.items()}


def load_lib(path=LIB):
    """libotter.so with the signatures of otter_last_error, otter_tensor_from_data and otter_tensor_free set;
    a test sets those of the other functions it calls."""
    lib = ctypes.CDLL(path)
    lib.otter_last_error.argtypes, lib.otter_last_error.restype = [], ctypes.c_char_p
    lib.otter_tensor_from_data.argtypes = [ctypes.POINTER(TP), ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                                           ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p]
    lib.otter_tensor_from_data.restype = ctypes.c_int
    lib.otter_tensor_free.argtypes, lib.otter_tensor_free.restype = [TP], None
    return lib


def last_error(lib):
    return lib.otter_last_error().decode(errors="replace")


def tensor_from_array(lib, arr):
    """A new otter tensor holding a copy of the numpy array (float32, int64 or bool); free it with
    lib.otter_tensor_free. Raises RuntimeError with otter's message."""
    import numpy as np
    arr = np.ascontiguousarray(arr)
    t = TP()
    dims = (ctypes.c_int64 * max(arr.ndim, 1))(*arr.shape)
    if lib.otter_tensor_from_data(ctypes.byref(t), None, DT_OF[arr.dtype.name], arr.ndim, dims,
                                  arr.ctypes.data_as(ctypes.c_void_p)) != 0:
        raise RuntimeError("otter_tensor_from_data: " + last_error(lib))
    return t


def tensor_to_array(t):
    """A numpy copy of an otter tensor (a TP)."""
    import numpy as np
    c = t.contents
    shape = tuple(c.dims[i] for i in range(c.rank))
    dt = np.dtype(NP_OF[c.dtype])
    n = int(np.prod(shape)) if shape else 1
    if n == 0:
        return np.zeros(shape, dt)
    buf = (ctypes.c_char * (n * dt.itemsize)).from_address(c.data)
    return np.frombuffer(buf, dtype=dt).reshape(shape).copy()


# ---- the error model of one float32 training step, from given weights ---------------------------------
#
# U32: float32's unit roundoff. A float32 sum of K terms is off its exact value by about sqrt(K) U32 sum|terms|
# (rounding errors of random sign; K U32 in the worst case); a gradient element's terms are bounded by its tensor's
# largest gradient, so each gradient element is taken to be within GAMMA = sqrt(K_MAX) U32 max|g| of the exact one,
# K_MAX = 2^15 covering the longest sum in the tests' models (cifar conv1's weight gradient: 32 images x 32x32
# positions). Measured (PyTorch float32 vs float64, test_training_torch's models, initial weights):
# max|g32 - g64| <= 37 U32 max|g64| in every tensor, 5x under GAMMA = 181 U32.
U32 = 2.0 ** -24
K_MAX = 2 ** 15
GAMMA = math.sqrt(K_MAX) * U32


@dataclass
class AdamW:
    """AdamWOptimizer's attributes (the training-format spec; ORT's defaults). adam_mode 0 is PyTorch's formula,
    1 Hugging Face's (bias correction folded into the step size, weight decay after the step)."""
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.01
    adam_mode: int = 0
    correct_bias: bool = True

    @staticmethod
    def of_optimizer_model(path):
        """The hyperparameters of the AdamWOptimizer node of an optimizer model; None without one."""
        import onnx
        for n in onnx.load(path).graph.node:
            if n.op_type == "AdamWOptimizer":
                a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
                d = AdamW()
                return AdamW(a.get("alpha", d.beta1), a.get("beta", d.beta2), a.get("epsilon", d.eps),
                             a.get("weight_decay", d.weight_decay), int(a.get("adam_mode", d.adam_mode)),
                             bool(a.get("correct_bias", d.correct_bias)))
        return None


class UpdateReference:
    """One step of SGD (adamw None) or AdamW in float64 from given weights and gradient g, and the bound on
    |a float32 runtime's update - this update| per element, for a runtime whose gradient elements are within
    d = grad_err * scale of g (scale: max|g| of the tensor unless given; grad_err GAMMA for float32 against
    float64, 2 GAMMA for two float32 runtimes, 0 for the runtime g came from).

    SGD: the update -lr g is off by lr d. AdamW: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2 and
    u = m^/(sqrt(v^) + eps) turn that into an interval: m within dm = b1 dm_prev + (1 - b1) d, v within
    dv = b2 dv_prev + (1 - b2)(2|g| d + d^2) (the moments carry every earlier step's error), plus 3 U32 |m| and
    3 U32 |v| for the float32 moments' own rounding each step; u, increasing in m and in |u| decreasing in v, is
    furthest from float64's u at a corner of that box; the update is off by lr max|u_corner - u| (times
    1 + lr wd in adam_mode 1, which decays the stepped weight). Where the gradient is near zero (it cancels, or is
    zero by symmetry like an attention key bias's) or v^ ~ eps^2, this is up to a full +-lr step; where it is well
    conditioned, about lr |u| d/|g|. To that, float32 rounding of the update arithmetic: rounding (|w| + lr |u|),
    rounding = 4 U32 for one float32 runtime."""

    def __init__(self, lr, adamw=None, grad_err=GAMMA, rounding=4 * U32):
        self.lr, self.adamw, self.grad_err, self.rounding = lr, adamw, grad_err, rounding
        self.state = {}  # name -> (m, v, dm, dv) after the last committed step

    def u(self, m, v, t):
        """AdamW's normalized step from the moments after step t."""
        import numpy as np
        a = self.adamw
        bc1, bc2 = (1 - a.beta1 ** t, 1 - a.beta2 ** t) if a.correct_bias else (1.0, 1.0)
        v = np.maximum(v, 0)
        if a.adam_mode == 0:
            return (m / bc1) / (np.sqrt(v / bc2) + a.eps)
        return math.sqrt(bc2) / bc1 * m / (np.sqrt(v) + a.eps)

    def step(self, name, t, w, g, scale=None):
        """(update, bound, state after this step) for parameter name at step t."""
        import numpy as np
        lr, a = self.lr, self.adamw
        d = self.grad_err * (float(np.max(np.abs(g))) if scale is None else scale)
        if a is None:
            return -lr * g, lr * d + self.rounding * (np.abs(w) + lr * np.abs(g)), None
        zero = np.zeros_like(g)
        m, v, dm, dv = self.state.get(name, (zero, zero, zero, zero))
        m, v = a.beta1 * m + (1 - a.beta1) * g, a.beta2 * v + (1 - a.beta2) * g * g
        dm = a.beta1 * dm + (1 - a.beta1) * d + 3 * U32 * np.abs(m)
        dv = a.beta2 * dv + (1 - a.beta2) * (2 * np.abs(g) * d + d * d) + 3 * U32 * v
        u = self.u(m, v, t)
        du = np.max([np.abs(self.u(m + sm * dm, v + sv * dv, t) - u) for sm in (-1, 1) for sv in (-1, 1)], axis=0)
        if a.adam_mode == 0:
            update, du = -lr * (u + a.weight_decay * w), lr * du
        else:
            update, du = -lr * u - lr * a.weight_decay * (w - lr * u), lr * du * (1 + lr * a.weight_decay)
        return update, du + self.rounding * (np.abs(w) + lr * np.abs(u)), (m, v, dm, dv)

    def compare(self, t, w, g, got, scales=None):
        """Worst error/bound over the elements, per parameter: {name: (ratio, error/max|update|)}, and the
        states (w, g, got: {name: array}; got the weights after the runtime's step; scales: {name: scale})."""
        import numpy as np
        out, states = {}, {}
        for k in w:
            w64 = w[k].astype(np.float64)
            want, bound, states[k] = self.step(k, t, w64, g[k], None if scales is None else scales[k])
            err = np.abs((got[k] - w64) - want)
            # 0 where the runtime is exact (even against a zero bound); np.max keeps a NaN error
            ratio = float(np.max(np.divide(err, bound, out=np.zeros_like(err), where=err != 0)))
            largest = float(np.max(np.abs(want)))
            out[k] = (ratio, float(np.max(err)) / largest if largest else math.inf)
        return out, states

    def commit(self, states):
        self.state.update({k: s for k, s in states.items() if s is not None})


def check_gradients(label, grads, ref, tol, worst):
    """Checks each gradient grads[p] (numpy) against torch's ref[p]: max|a - b| / max|b| <= tol, or max|a| <= tol
    where torch's is all zero. worst ([error, where]) keeps the largest error over the calls."""
    import numpy as np
    bad, case_worst = [], (0.0, "")
    for p in sorted(set(grads) & set(ref)):
        a, b = grads[p], ref[p]
        if a.shape != b.shape:
            bad.append(f"{p}: shape {a.shape}, torch's {b.shape}")
            continue
        scale = float(np.abs(b).max())
        err = float(np.abs(a - b).max()) / scale if scale > 0 else float(np.abs(a).max())
        if not np.isfinite(err) or err > case_worst[0]:
            case_worst = (err, p)
        if not err <= tol:
            bad.append(f"{p}{list(a.shape)}: err {err:.3e}")
    if not np.isfinite(case_worst[0]) or case_worst[0] > worst[0]:
        worst[:] = [case_worst[0], f"{label} {case_worst[1]}"]
    check(not bad, f"{label}: {len(grads)} gradients vs torch.autograd, worst {case_worst[0]:.2e} ({case_worst[1]})"
          + "".join("\n       " + s for s in bad))
