"""The offline install docs/python.md gives: a venv with Debian's packages visible (numpy, onnx), then
`pip install --no-build-isolation --no-index ./python` (Debian's setuptools builds it; pip never asks PyPI). The
installed package imports from outside the source tree, finds libotter through OTTER_LIB and through
OTTER_BINARY_DIR, and runs a model. Skips (77) only when numpy or onnx is absent."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402

try:
    import numpy  # noqa: F401
    import onnx  # noqa: F401
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

PROBE = '''
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper
import otter_onnx
from otter_onnx.training import api, artifacts  # noqa: F401
g = helper.make_graph([helper.make_node("Mul", ["a", "b"], ["c"])], "g",
                      [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
                       helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
c = otter_onnx.InferenceSession(m).run(None, {"a": np.array([2, 3], np.float32), "b": np.array([4, 5], np.float32)})
print(otter_onnx.__file__)
print(otter_onnx._lib.lib_path())
print(c[0].tolist())
'''


def main():
    work = tl.work_dir("test_python_install")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    src = os.path.join(work, "python")  # a copy: pip builds in the folder it is given
    shutil.copytree(os.path.join(tl.SRC, "python"), src, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    venv = os.path.join(work, "venv")
    r = tl.run([sys.executable, "-m", "venv", "--system-site-packages", venv])
    tl.check(r.returncode == 0, "python3 -m venv --system-site-packages")
    py = os.path.join(venv, "bin", "python")
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", src], env=env,
                       capture_output=True, text=True, cwd=work)
    print(r.stdout + r.stderr, end="")
    tl.check(r.returncode == 0, "pip install --no-build-isolation --no-index ./python")
    probe = os.path.join(work, "probe.py")
    open(probe, "w").write(PROBE)
    lib = os.path.join(tl.BIN, "libotter.so.0")
    for var, value in [("OTTER_LIB", lib), ("OTTER_BINARY_DIR", tl.BIN)]:
        e = {k: v for k, v in env.items() if k not in ("OTTER_LIB", "OTTER_BINARY_DIR")}
        e[var] = value
        r = subprocess.run([py, probe], env=e, capture_output=True, text=True, cwd=work)
        print(r.stdout + r.stderr, end="")
        lines = r.stdout.split("\n")
        tl.check(r.returncode == 0 and lines[0].startswith(venv) and os.path.realpath(lines[1]) ==
                 os.path.realpath(lib) and lines[2] == "[8.0, 15.0]",
                 f"installed otter_onnx runs a model with {var}")
    e = dict(env, OTTER_LIB=os.path.join(work, "no-libotter.so"))
    r = subprocess.run([py, "-c", "import otter_onnx; otter_onnx.InferenceSession(b'')"], env=e,
                       capture_output=True, text=True, cwd=work)
    tl.check(r.returncode != 0 and "libotter not found" in r.stderr and "no-libotter.so" in r.stderr,
             "a wrong OTTER_LIB is an ImportError naming the path: " + (r.stderr.strip().splitlines() or [""])[-1])
    return tl.finish("test_python_install")


if __name__ == "__main__":
    sys.exit(main())
