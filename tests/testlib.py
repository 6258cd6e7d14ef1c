"""Scaffolding shared by the Python tests: paths, check() and its counters, the summary line, running the
otter CLI, npm packages under the build tree. Not a test itself (CTest registers tests/test_*.py only).

A test puts this folder first on sys.path and imports it:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import testlib as tl
"""
import importlib.util
import json
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
