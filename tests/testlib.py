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


# ---- libotter.so through ctypes: the one mirror of include/otter/tensor.h's otter_tensor ------------

MAX_RANK = 16  # OTTER_MAX_RANK
DT_FLOAT, DT_INT64, DT_BOOL = 1, 7, 9  # otter_dtype (ONNX's TensorProto.DataType numbers)
NP_OF = {DT_FLOAT: "float32", DT_INT64: "int64", DT_BOOL: "bool"}  # otter_dtype -> numpy dtype name
DT_OF = {name: dt for dt, name in NP_OF.items()}


class Tensor(ctypes.Structure):  # include/otter/tensor.h: otter_tensor
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("dims", ctypes.c_int64 * MAX_RANK), ("data", ctypes.c_void_p), ("owns_data", ctypes.c_bool),
                ("extra", ctypes.c_void_p)]


TP = ctypes.POINTER(Tensor)


class TrainingOptions(ctypes.Structure):  # include/otter/training.h: otter_training_options
    _fields_ = [("n_threads", ctypes.c_int), ("seed_set", ctypes.c_bool), ("seed", ctypes.c_uint64)]


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
