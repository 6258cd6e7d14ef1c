"""otter_onnx's ONNX Runtime training API: Module/Optimizer training FLAT's ORT fixture (the MNIST DNN's artifacts
made by ORT's Python tool) on the same batches in the same order as `otter train`, giving the same epoch loss and
the same trained weights; CheckpointState parameters/properties round trips; LinearLRScheduler against ORT's
formula; InferenceSession on the exported model; generate_artifacts from a ModelProto; otter's errors as Python
exceptions. Skips (77) only when numpy or onnx is absent."""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402

try:
    import numpy as np
    import onnx  # noqa: F401
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.join(tl.SRC, "python"))
import otter_onnx  # noqa: E402
from otter_onnx.training import api, artifacts  # noqa: E402

check = tl.check
BATCH, STEPS = 16, 6


def ort_linear_lr(step, warmup, total, initial):
    """ONNX Runtime's LinearLRScheduler (orttraining/training_api/lr_scheduler.cc): linear warm-up from 0, then
    linear decay to 0 at total."""
    if step < warmup:
        return initial * step / max(1, warmup)
    return initial * max(0.0, (total - step) / max(1, total - warmup))


def check_conversions():
    """numpy -> otter_tensor -> numpy keeps dtype, shape and values for every numpy type otter has, strings,
    0-d and empty arrays; bfloat16 travels as its uint16 bits."""
    from otter_onnx import _lib as L
    arrays = [np.arange(6).astype(t).reshape(2, 3) for t in (np.uint8, np.int8, np.uint16, np.int16, np.int32,
                                                               np.int64, np.uint32, np.uint64, np.float16,
                                                               np.float32, np.float64, np.bool_, np.complex64,
                                                               np.complex128)]
    arrays += [np.array(3.5), np.zeros((0, 4), np.float32), np.arange(12.0).reshape(3, 4)[:, ::2],
               np.array([b"ab", b"c\x00d", b""], dtype=object)]
    bad = []
    for a in arrays:
        t = L.tensor_from_array(a)
        b = L.array_from_tensor(t)
        L.lib().otter_tensor_free(t)
        if b.dtype != a.dtype or b.shape != a.shape or not np.array_equal(a, b):
            bad.append(f"{a.dtype}{a.shape}")
    t = L.tensor_from_array(np.array([0x3F80], np.uint16), dtype=16)
    name = L.lib().otter_dtype_name(t.contents.dtype).decode()
    bits = L.array_from_tensor(t)
    L.lib().otter_tensor_free(t)
    check(not bad and name == "bfloat16" and bits.tolist() == [0x3F80],
          f"{len(arrays) + 1} numpy <-> otter_tensor round trips" + (f"; wrong: {bad}" if bad else ""))


def main():
    check_conversions()
    work = tl.work_dir("test_python_api")
    shutil.rmtree(work, ignore_errors=True)
    art = os.path.join(work, "art")
    shutil.copytree(tl.ORT_FIXTURE, art)
    rng = np.random.default_rng(7)
    x = rng.random((BATCH * STEPS, 784), dtype=np.float32)
    y = rng.integers(0, 10, BATCH * STEPS).astype(np.int64)
    np.save(os.path.join(work, "x.npy"), x)
    np.save(os.path.join(work, "y.npy"), y)

    # ---- `otter train` on the data, in order
    cli_ckpt = os.path.join(work, "cli_checkpoint")
    r = tl.otter("train", art, "--data", f"npy:{work}/x.npy,{work}/y.npy", "--no-shuffle", "--normalize", "none",
                 "--batch-size", str(BATCH), "--steps", str(STEPS), "--save", cli_ckpt)
    check(r.returncode == 0, "otter train on the fixture")
    cli_loss = float(next(line.split()[1] for line in r.stdout.splitlines() if line.strip().startswith("1 ")))

    # ---- the same with the Python API
    state = api.CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    names = list(state.parameters)
    check(names == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"],
          f"parameters {names}")
    w0 = state.parameters["fc1.weight"].data
    check(w0.shape == (200, 784) and w0.dtype == np.float32, f"fc1.weight {w0.shape} {w0.dtype}")
    model = api.Module(os.path.join(art, "training_model.onnx"), state, os.path.join(art, "eval_model.onnx"))
    optimizer = api.Optimizer(os.path.join(art, "optimizer_model.onnx"), model)
    check(model.input_names() == ["input", "labels"], f"training input_names {model.input_names()}")
    check(abs(optimizer.get_learning_rate() - 0.001) < 1e-9, f"default lr {optimizer.get_learning_rate()}")
    model.train()
    losses = []
    for i in range(STEPS):
        loss, logits = model(x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH])  # ORT: every user output
        optimizer.step()
        model.lazy_reset_grad()
        losses.append(float(loss))
    check(logits.shape == (BATCH, 10), f"second output {logits.shape}")
    py_loss = float(np.mean(losses))
    print(f"losses {losses}; mean {py_loss:.6f}, otter train's {cli_loss:.6f}")
    check(abs(py_loss - cli_loss) <= 5e-7 + 1e-6 * abs(cli_loss), "epoch loss equals otter train's")
    cli_state = api.CheckpointState.load_checkpoint(cli_ckpt)
    worst = 0.0
    for name in names:
        worst = tl.worse(worst, float(np.max(np.abs(state.parameters[name].data - cli_state.parameters[name].data))))
    check(worst == 0.0, f"trained weights equal otter train's (worst |diff| {worst:g})")
    check(not np.array_equal(state.parameters["fc1.weight"].data, w0), "the state shows the trained weights")

    # ---- eval, contiguous parameters, export, InferenceSession
    model.eval()
    check(model.output_names() == ["onnx::loss::2", "output"], f"eval output_names {model.output_names()}")
    eval_loss = float(model(x[:BATCH], y[:BATCH])[0])
    check(np.isfinite(eval_loss), f"eval loss {eval_loss:.6f}")
    flat = model.get_contiguous_parameters().numpy()
    check(flat.size == 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10, f"contiguous parameters {flat.size}")
    check(np.array_equal(flat[:200 * 784].reshape(200, 784), state.parameters["fc1.weight"].data),
          "buffer starts with fc1.weight")
    model.copy_buffer_to_parameters(np.zeros_like(flat), trainable_only=True)
    check(not np.any(state.parameters["fc2.bias"].data), "copy_buffer_to_parameters zeroes the weights")
    model.copy_buffer_to_parameters(flat)
    inference = os.path.join(work, "inference.onnx")
    model.export_model_for_inferencing(inference, ["output"])
    sess = otter_onnx.InferenceSession(inference)
    check([i.name for i in sess.get_inputs()] == ["input"] and sess.get_inputs()[0].type == "tensor(float)",
          f"inference inputs {sess.get_inputs()}")
    logits = sess.run(None, {"input": x[:4]})[0]
    w = {n: state.parameters[n].data for n in names}
    h = np.maximum(x[:4] @ w["fc1.weight"].T + w["fc1.bias"], 0)
    h = np.maximum(h @ w["fc2.weight"].T + w["fc2.bias"], 0)
    want = h @ w["fc3.weight"].T + w["fc3.bias"]
    err = float(np.max(np.abs(logits - want)))
    check(logits.shape == (4, 10) and err < 1e-4, f"exported model's logits vs numpy: worst {err:.2e}")

    # ---- properties, save/load
    state.properties["epoch"] = 3
    state.properties["note"] = "pycore"
    state.properties["lr"] = 0.5
    saved = os.path.join(work, "saved_checkpoint")
    api.CheckpointState.save_checkpoint(state, saved, include_optimizer_state=True)
    again = api.CheckpointState.load_checkpoint(saved)
    check(again.properties["epoch"] == 3 and again.properties["note"] == "pycore" and
          again.properties["lr"] == 0.5, f"properties {dict(again.properties.items())}")
    check(np.array_equal(again.parameters["fc3.weight"].data, state.parameters["fc3.weight"].data),
          "saved weights load back")
    again.parameters["fc3.bias"] = np.ones(10, np.float32)
    check(np.array_equal(again.parameters["fc3.bias"].data, np.ones(10, np.float32)), "parameter assignment")

    # ---- LinearLRScheduler against ORT's formula
    optimizer.set_learning_rate(0.25)
    check(abs(optimizer.get_learning_rate() - 0.25) < 1e-9, "set_learning_rate")
    model.train()
    sched = api.LinearLRScheduler(optimizer, warmup_step_count=3, total_step_count=10, initial_lr=0.1)
    worst = 0.0
    for _ in range(8):
        model(x[:BATCH], y[:BATCH])
        optimizer.step()
        sched.step()
        model.lazy_reset_grad()
        step = STEPS + _ + 1  # the optimizer's step count (the state's, restored from the fixture's 0)
        worst = tl.worse(worst, abs(optimizer.get_learning_rate() - ort_linear_lr(step, 3, 10, 0.1)))
    check(worst < 1e-7, f"LinearLRScheduler follows ORT's formula (worst {worst:.1e})")

    # ---- errors carry otter's messages
    try:
        model(x[:BATCH].astype(np.float64), y[:BATCH])
        check(False, "float64 input refused")
    except otter_onnx.InvalidModelError as e:
        check("input" in str(e), f"float64 input: {type(e).__name__}: {e}")
    try:
        api.CheckpointState.load_checkpoint(os.path.join(work, "missing"))
        check(False, "missing checkpoint refused")
    except FileNotFoundError as e:
        check("missing" in str(e) and isinstance(e, otter_onnx.OtterError), f"missing checkpoint: {e}")
    try:
        state.parameters["nope"]
        check(False, "unknown parameter refused")
    except KeyError as e:
        check("nope" in str(e), f"unknown parameter: {e}")

    # ---- generate_artifacts from a ModelProto (the fixture's forward model, exported above)
    fwd = onnx.load(inference)
    out = os.path.join(work, "gen")
    artifacts.generate_artifacts(fwd, requires_grad=[n for n in names], loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=out, prefix="p_")
    made = sorted(os.listdir(out))
    check(all(f in made for f in ["p_training_model.onnx", "p_eval_model.onnx", "p_optimizer_model.onnx",
                                  "p_checkpoint"]), f"generate_artifacts wrote {made}")
    for kwargs, what in [({"ort_format": True}, "ort_format"), ({"custom_op_library": "x.so"}, "custom_op_library")]:
        try:
            artifacts.generate_artifacts(fwd, loss=artifacts.LossType.MSELoss, artifact_directory=out, **kwargs)
            check(False, f"{what} refused")
        except NotImplementedError as e:
            check(what in str(e), f"{what}: {e}")
    try:
        artifacts.generate_artifacts(fwd, requires_grad=["no_such_weight"], loss=artifacts.LossType.MSELoss,
                                     artifact_directory=out)
        check(False, "unknown requires_grad refused")
    except otter_onnx.OtterError as e:
        check("no_such_weight" in str(e), f"unknown requires_grad: {type(e).__name__}: {e}")
    # ---- a loss given as an onnxblock Block trains as the same LossType: the block's constants stay constants
    from otter_onnx.training import onnxblock
    target = np.zeros((BATCH, 10), np.float32)
    runs = {}
    for what, loss in [("LossType.MSELoss", artifacts.LossType.MSELoss), ("onnxblock.loss.MSELoss()",
                                                                          onnxblock.loss.MSELoss())]:
        d = os.path.join(work, "mse-" + what[:4])
        artifacts.generate_artifacts(fwd, loss=loss, optimizer=artifacts.OptimType.SGD, artifact_directory=d)
        st = api.CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
        m = api.Module(os.path.join(d, "training_model.onnx"), st, os.path.join(d, "eval_model.onnx"))
        opt = api.Optimizer(os.path.join(d, "optimizer_model.onnx"), m)
        runs[what] = (sorted(st.parameters), [])
        for _ in range(3):
            runs[what][1].append(float(m(x[:BATCH], target)))
            opt.step()
            m.lazy_reset_grad()
    (p1, l1), (p2, l2) = runs.values()
    check(p1 == p2 and l1 == l2 and l1[2] < l1[0], f"Block loss trains as LossType: parameters {p2}, losses {l2}")
    return tl.finish("test_python_api")


if __name__ == "__main__":
    sys.exit(main())
