"""otter-onnx, the WebAssembly build (tools/build-web.sh), under Node.

1. tests/web/ort_training_script.js, written for onnxruntime-web 1.19.2's training API (npm, under <build>/npm), runs
   unchanged against onnxruntime-web and against require('<repo>/web') on FLAT's ORT-made MNIST artifacts: 20 steps
   whose losses equal native otter's (libotter.so through ctypes, one thread) to 1e-6 and onnxruntime-web's to 1e-5.
2. tests/web/otter_api_script.js: otter-made CIFAR-10 CNN artifacts train in wasm as natively; saveCheckpoint's bytes
   load with `otter checkpoint info`; exportModelForInferencing + InferenceSession equal `otter run`;
   generateArtifacts in wasm trains like `otter artifacts`' files natively; learning-rate schedules; bad inputs
   reject with otter's messages.
3. MaxPool 2x2 stride 2 with its Indices output (the SIMD128 path of training's pooling) against a float64-free
   reference: the first maximum of each window in scan order, ties, NaNs and a width that leaves a scalar tail.
Registered by tests/CMakeLists.txt when web/dist/otter.cjs exists (tools/test.sh builds it first).
"""
import ctypes
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib as tl  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(tl.SRC, "web")
STEPS, BATCH = 20, 32


def node(*args):
    r = tl.run(["node", *args], echo="fail")
    tl.check(r.returncode == 0, "node " + os.path.basename(args[0]) + " ran")
    return r.returncode == 0


def load_training_lib():
    """libotter.so with the signatures native_losses calls."""
    lib = tl.load_lib()
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.otter_training_session_create_from_dir.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p, ctypes.c_char_p,
                                                           ctypes.c_char_p, ctypes.POINTER(tl.TrainingOptions)]
    lib.otter_training_train_step.argtypes = [vp, sz, vp, ctypes.POINTER(tl.TP), sz, ctypes.POINTER(tl.TP)]
    for f in ("otter_training_optimizer_step", "otter_training_lazy_reset_grad"):
        getattr(lib, f).argtypes = [vp]
    lib.otter_training_session_free.argtypes, lib.otter_training_session_free.restype = [vp], None
    return lib


def native_losses(lib, artifacts, x, y, batch, steps):
    """Losses of `steps` train + optimizer steps of libotter.so on consecutive batches, one thread."""
    s = ctypes.c_void_p()
    opts = tl.TrainingOptions(n_threads=1)
    if lib.otter_training_session_create_from_dir(ctypes.byref(s), artifacts.encode(), None, None,
                                                  ctypes.byref(opts)) != 0:
        raise RuntimeError(tl.last_error(lib))
    losses = []
    try:
        for i in range(steps):
            xs = tl.tensor_from_array(lib, x[i * batch:(i + 1) * batch])
            ys = tl.tensor_from_array(lib, y[i * batch:(i + 1) * batch])
            out = (tl.TP * 1)()
            st = lib.otter_training_train_step(s, 2, None, (tl.TP * 2)(xs, ys), 1, out)
            lib.otter_tensor_free(xs)
            lib.otter_tensor_free(ys)
            if st != 0 or lib.otter_training_optimizer_step(s) != 0 or lib.otter_training_lazy_reset_grad(s) != 0:
                raise RuntimeError(tl.last_error(lib))
            losses.append(float(tl.tensor_to_array(out[0]).reshape(-1)[0]))
            lib.otter_tensor_free(out[0])
    finally:
        lib.otter_training_session_free(s)
    return losses


def maxpool_2x2_reference(x):
    """MaxPool 2x2 stride 2 and its flat row-major indices, the first maximum in scan order ('>' only, as the
    kernels: a NaN never wins, a NaN first tap stays)."""
    n, c, h, w = x.shape
    y = np.empty((n, c, h // 2, w // 2), np.float32)
    ind = np.empty(y.shape, np.int64)
    for i, j, oh, ow in np.ndindex(y.shape):
        taps = [(2 * oh + dh, 2 * ow + dw) for dh in (0, 1) for dw in (0, 1)]
        best = taps[0]
        for t in taps[1:]:
            if x[i, j][t] > x[i, j][best]:
                best = t
        y[i, j, oh, ow] = x[i, j][best]
        ind[i, j, oh, ow] = ((i * c + j) * h + best[0]) * w + best[1]
    return y, ind


def check_maxpool(work):
    """MaxPool 2x2 stride 2 with Indices and com.otter's MaxPoolGrad (dY scattered to the indices; with MaxPool's Y,
    only where Y > 0), whose SIMD128 paths training reaches, against references, bit for bit."""
    import onnx
    from onnx import TensorProto, helper
    dims = [2, 3, 6, 22]  # 11 windows a row: two SIMD128 blocks of 4 and a scalar tail of 3
    ydims = [2, 3, 3, 11]
    f32 = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "indices"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Shape", ["x"], ["x_shape"]),
             helper.make_node("MaxPoolGrad", ["dy", "indices", "x_shape"], ["dx"], domain="com.otter"),
             helper.make_node("MaxPoolGrad", ["dy", "indices", "x_shape", "y"], ["dx_relu"], domain="com.otter")]
    graph = helper.make_graph(nodes, "maxpool", [f32("x", dims), f32("dy", ydims)],
                              [f32("y", ydims), helper.make_tensor_value_info("indices", TensorProto.INT64, ydims),
                               f32("dx", dims), f32("dx_relu", dims)])
    path = os.path.join(work, "maxpool.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.otter", 1)]),
              path)
    rng = np.random.default_rng(3)
    x = rng.integers(-2, 3, dims).astype(np.float32)  # few levels: many ties
    x.reshape(-1)[rng.choice(x.size, 12, replace=False)] = np.nan
    x.reshape(-1)[rng.choice(x.size, 12, replace=False)] = -0.0
    dy = rng.standard_normal(ydims).astype(np.float32)
    dy.reshape(-1)[rng.choice(dy.size, 8, replace=False)] = -0.0  # the scatter's 0 + dY makes them +0
    x.tofile(os.path.join(work, "pool_x.f32"))
    dy.tofile(os.path.join(work, "pool_dy.f32"))
    out = os.path.join(work, "pool")
    if not node(os.path.join(HERE, "maxpool_script.js"), PACKAGE, path, out,
                os.path.join(work, "pool_x.f32") + ":" + ",".join(map(str, dims)),
                os.path.join(work, "pool_dy.f32") + ":" + ",".join(map(str, ydims))):
        return
    want_y, want_ind = maxpool_2x2_reference(x)
    want_dx, want_dx_relu = np.zeros(x.size, np.float32), np.zeros(x.size, np.float32)
    want_dx[want_ind.reshape(-1)] = np.float32(0) + dy.reshape(-1)
    want_dx_relu[want_ind.reshape(-1)] = np.float32(0) + np.where(want_y > 0, dy, np.float32(0)).reshape(-1)
    got = {name: np.fromfile(f"{out}.{name}.bin", np.int64 if name == "indices" else np.float32)
           for name in ("y", "indices", "dx", "dx_relu")}
    for name, want in (("indices", want_ind), ("y", want_y), ("dx", want_dx), ("dx_relu", want_dx_relu)):
        bits = np.uint64 if name == "indices" else np.uint32
        want = want.reshape(-1)
        same = got[name].view(bits) == want.view(bits)
        tl.check(got[name].size == want.size and bool(np.all(same)),
                 f"MaxPool 2x2 {dims} in wasm, {name}: {int(np.sum(~same))} of {want.size} differ from the "
                 "reference (bitwise: NaN, -0 and ties included)")


def compare(what, got, want, tol):
    worst = 0.0
    for a, b in zip(got, want):
        worst = tl.worse(worst, abs(a - b))
    tl.check(len(got) == len(want) and worst <= tol,
             f"{what}: {len(got)} losses, worst |difference| {worst:.3g} <= {tol:g}")


def main():
    if not os.path.exists(os.path.join(PACKAGE, "dist", "otter.cjs")):
        print("web/dist/otter.cjs is missing: run tools/build-web.sh")
        return 1
    ort_dir = tl.ensure_ort()  # npm install onnxruntime-web@1.19.2 under <build>/npm
    ort_module = os.path.join(ort_dir, "dist", "ort.training.wasm.min.js")
    work = tl.work_dir("test_web_training")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    lib = load_training_lib()

    rng = np.random.default_rng(0)
    x = rng.random((STEPS * BATCH, 784), dtype=np.float32)
    y = rng.integers(0, 10, STEPS * BATCH).astype(np.int64)
    x.tofile(os.path.join(work, "x.f32"))
    y.tofile(os.path.join(work, "y.i64"))

    # 1. One script, two runtimes, and native otter.
    fixture = tl.ORT_FIXTURE
    results = {}
    for name, module in (("onnxruntime-web", ort_module), ("otter-onnx", PACKAGE)):
        out = os.path.join(work, name + ".json")
        if node(os.path.join(HERE, "ort_training_script.js"), module, fixture, os.path.join(work, "x.f32"),
                os.path.join(work, "y.i64"), str(STEPS), str(BATCH), out):
            results[name] = json.load(open(out))
    if len(results) == 2:
        ort, web = results["onnxruntime-web"], results["otter-onnx"]
        for key in ("trainingInputNames", "trainingOutputNames", "evalInputNames", "evalOutputNames",
                    "parametersSize", "paramsType", "paramsDims", "reloadSame"):
            tl.check(web[key] == ort[key], f"{key}: otter-onnx {web[key]} == onnxruntime-web {ort[key]}")
        native = native_losses(lib, fixture, x, y, BATCH, STEPS)
        print("losses (onnxruntime-web, otter-onnx, native):",
              [f"{a:.6f}/{b:.6f}/{c:.6f}" for a, b, c in zip(ort["losses"], web["losses"], native)][:4], "...")
        compare("FLAT MNIST, otter-onnx vs native otter", web["losses"], native, 1e-6)
        compare("FLAT MNIST, otter-onnx vs onnxruntime-web", web["losses"], ort["losses"], 1e-5)
        tl.check(abs(web["evalLoss"] - ort["evalLoss"]) <= 1e-5,
                 f"eval loss after training: {web['evalLoss']:.7f} vs onnxruntime-web's {ort['evalLoss']:.7f}")
        worst = max(abs(a - b) for a, b in zip(web["paramsHead"], ort["paramsHead"]))
        tl.check(worst <= 1e-5, f"trained parameters (first 8) vs onnxruntime-web's: worst {worst:.3g} <= 1e-5")

    # 2. otter's additions.
    cnn = os.path.join(work, "cnn")
    tl.otter("models", "cifar10-cnn", "-o", os.path.join(work, "cnn.onnx"), echo="fail")
    tl.otter("artifacts", os.path.join(work, "cnn.onnx"), "-o", cnn, echo="fail")
    mnist = os.path.join(work, "mnist_dnn.onnx")
    tl.otter("models", "mnist-dnn", "-o", mnist, echo="fail")
    tl.otter("artifacts", mnist, "-o", os.path.join(work, "mnist_art"), echo="fail")
    cx = np.random.default_rng(1).standard_normal((12, 3, 32, 32), dtype=np.float32)
    cy = np.random.default_rng(2).integers(0, 10, 12).astype(np.int64)
    cx.tofile(os.path.join(work, "cnn_x.f32"))
    cy.tofile(os.path.join(work, "cnn_y.i64"))
    if not node(os.path.join(HERE, "otter_api_script.js"), PACKAGE, work):
        return tl.finish("test_web_training")
    api = json.load(open(os.path.join(work, "api.json")))

    compare("CIFAR-10 CNN (otter artifacts), otter-onnx vs native otter", api["cnnLosses"],
            native_losses(lib, cnn, cx, cy, 4, 3), 1e-5)
    tl.check(api["stepCount"] == 3 and api["resumedStepCount"] == 3 and api["resumedSame"],
             "a session resumed from saveCheckpoint()'s bytes has the step count (3) and the parameters")
    r = tl.otter("checkpoint", "info", os.path.join(work, "web_checkpoint"), echo="fail")
    tl.check(r.returncode == 0 and "momentum" in r.stdout + r.stderr,
             "otter checkpoint info reads the wasm checkpoint (with its optimizer state)")

    np.save(os.path.join(work, "ix.npy"), cx[:2])
    outdir = os.path.join(work, "run_out")
    r = tl.otter("run", os.path.join(work, "web_exported.onnx"), "-t", "1", "-q", "-o", outdir,
                 f"{api['inferenceInputNames'][0]}={os.path.join(work, 'ix.npy')}", echo="fail")
    if r.returncode == 0:
        want = np.load(os.path.join(outdir, "output_0.npy"))
        got = np.fromfile(os.path.join(work, "web_logits.f32"), dtype=np.float32).reshape(api["inferenceDims"])
        err = float(np.max(np.abs(got - want)))
        tl.check(list(want.shape) == api["inferenceDims"] and err <= 1e-5,
                 f"InferenceSession on the exported model vs otter run: shape {list(want.shape)}, "
                 f"worst |difference| {err:.3g} <= 1e-5")
    else:
        tl.check(False, "otter run on the exported model")

    compare("generateArtifacts in wasm vs `otter artifacts` trained natively", api["generatedLosses"],
            native_losses(lib, os.path.join(work, "mnist_art"), x, y, BATCH, 5), 1e-6)

    tl.check(abs(api["lrSet"] - 0.01) < 1e-9, f"setLearningRate(0.01): getLearningRate() {api['lrSet']}")
    # linear decay from 0.1 over 13 steps: 0.1 * (13 - t) / 13 at optimizer step t
    tl.check(abs(api["lrAtStep3"] - 0.1 * 10 / 13) < 1e-7 and abs(api["lrAtStep4"] - 0.1 * 9 / 13) < 1e-7,
             f"linear schedule: lr {api['lrAtStep3']:.7f} at step 3, {api['lrAtStep4']:.7f} after one more step")

    expected = {  # each rejection names what is at fault
        "truncatedModel": "training model", "truncatedCheckpoint": "checkpoint state (100 bytes): ",
        "wrongDtype": "input 'input': element type float64", "wrongShape": "input 'input': dimension 2 is 16",
        "unknownInput": "no_such_input", "missingInput": "input 'input' is missing",
        "badParameterBuffer": "1147466 float32 values", "missingFile": "no_such_model.onnx",
    }
    for key, words in expected.items():
        msg = api["errors"].get(key)
        tl.check(msg is not None and words in msg, f"{key} rejects: {msg!r}")
    tl.check(api["afterRelease"] == "this TrainingSession was released", "a released session rejects calls")
    tl.check("HingeLoss" in (api["generateErrors"]["badLoss"] or ""), "generateArtifacts rejects an unknown loss")
    tl.check("no_such_initializer" in (api["generateErrors"]["badFrozen"] or ""),
             "generateArtifacts rejects an unknown requiresGrad name")

    # 3. Kernels with a SIMD128 path that training models reach.
    check_maxpool(work)
    return tl.finish("test_web_training")


if __name__ == "__main__":
    sys.exit(main())
