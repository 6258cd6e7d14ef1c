"""Real architectures end to end through the CLI, against PyTorch: tools/export_torch_models.py's REAL_MODELS
(torchvision's resnet18, mobilenet_v2, mobilenet_v3_small, efficientnet_b0, shufflenet_v2_x0_5, squeezenet1_0; GRU
and LSTM text classifiers; a dynamic-batch TransformerEncoder classifier; an Embedding + MLP on int64 tokens), as a
user runs them:

  export (training mode, opset 17, dynamic batch axis, Dropout p = 0)
  otter artifacts --loss CrossEntropyLoss --optimizer SGD | AdamW (torch.optim.AdamW's formula: adam_mode 0)
  otter train --data npy:X.npy,Y.npy --no-shuffle, 3 steps, one step per invocation (--steps t --resume), so
              each step's loss is printed; the transformer's third batch is a partial one (N = 2.5 batches)
  otter checkpoint dump (the state before step 1 and after each step), otter export, otter run

Reference: PyTorch's step t (torch.optim.SGD / AdamW, the same batch) in float32 and in float64 from otter's state
before it (weights, and AdamW's moments), so a step's comparison holds only that step's rounding: a free-running
float32 trajectory is chaotic (a ReLU decision taken the other way moves every later step). PyTorch float32's own
distance to float64 is the yardstick: otter passes where its distance to float64 is at most K times PyTorch
float32's (K = 8 below):
  - the losses: max over the steps of |otter - torch64|, less half a unit of the 6 decimals `otter train` prints,
    against max(max |torch32 - torch64|, U32 x loss) (a float32 loss is a rounding from exact at best);
  - the weights after each step: ||w - w64||, the L2 norm over every parameter, on all steps but the worst (below).
    Not per tensor, whose worst ratio
    is printed only: a ReLU6 or MaxPool decision at an input within rounding of its threshold (BatchNorm over
    batch 8 at 1x1 spatial size makes them frequent) moves that channel's gradient by ~1e-3 where PyTorch float32
    happens to take float64's side (measured: mobilenet_v2's features.18.1.bias, 75000x PyTorch float32's
    distance in one SGD step); and AdamW divides each element's step by that element's own gradient scale, so an
    element whose gradient is a sum that cancels (a BatchNorm bias: the sum of dY over batch x H x W) carries
    that sum's rounding error relative to its own size, where PyTorch's float32 sums are more accurate than
    otter's (mobilenet_v3_small's features.0.1.bias at 64x64 images, 3 AdamW steps: 168x). A decision near the
    output moves every parameter's gradient: resnet18's last ReLU took an input of -2.4e-5 the other way in one SGD
    step on AMD Zen 3 (PyTorch float32's own errors there reach 6.0e-5, median 5.6e-6, and it happened to take
    float64's side): 458x over all parameters, where the other steps were 1.0x. Such a step says nothing of
    otter's rounding, and a wrong gradient is wrong on every step, so one step of the three may exceed K.
  - the exported model, fed a fresh batch: max |otter run - torch64| of PyTorch's eval-mode forward on the last
    checkpoint's tensors (otter's trained weights and BatchNorm running statistics).

Models that cannot work yet are listed in EXPECTED_FAILURES with the CLI's exact error; the list is enforced both
ways: such a model failing with another message fails the test, and so does it passing (remove it from the list).
Prints, per model and optimizer, the worst distance ratio of each kind. Exit 77 (skipped) when torch or torchvision
is absent.
"""
import json
import math
import os
import shutil
import sys
import warnings

try:
    import numpy as np
    import torch
    import torchvision  # noqa: F401  (the vision models)
except ImportError as e:
    print(f"SKIP test_real_models: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import U32, check  # noqa: E402

WORK = tl.work_dir("real_models")
STEPS = 3
BATCH = 8
# K: how many times PyTorch float32's distance to float64 otter's may be. The worst ratio of each kind is printed at
# the end; measured (2 threads, 32x32 images): losses 2.1 (shufflenet_v2_x0_5 SGD), weights 3.7 (mobilenet_v2 SGD),
# export 2.2 (resnet18 AdamW).
K = 8
LOSS_PRINT_UNIT = 0.5e-6  # `otter train` prints the epoch loss with 6 decimals
SGD_LR, ADAMW_LR = 0.01, 1e-3
ADAMW_HP = dict(beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)
ADAMW_FLAG = ",".join(f"{k}={v}" for k, v in ADAMW_HP.items()) + ",correct_bias=1,adam_mode=0"
PARTIAL_LAST_BATCH = {"transformer_encoder"}  # dynamic batch axis: the third batch holds BATCH / 2 samples

# model -> the CLI's error (a substring of its output) while a gradient rule or CLI feature it needs is missing.
EXPECTED_FAILURES = {}

worst = {}  # kind -> (ratio, where)


class CliError(Exception):
    """A CLI command failed; the message is the command and its output."""


def otter(*args):
    """Runs the CLI; returns its stdout, raises CliError with its output when it fails."""
    r = tl.run([tl.CLI, *args], echo="fail")
    if r.returncode != 0:
        raise CliError((r.stdout + r.stderr).strip())
    return r.stdout


def note(kind, ratio, where):
    if kind not in worst or not ratio <= worst[kind][0]:
        worst[kind] = (ratio, where)


def ratio_of(err, ref_err):
    """err / ref_err, 0 when both are 0 (exact where PyTorch float32 is exact too)."""
    if err == 0:
        return 0.0
    return err / ref_err if ref_err > 0 else math.inf


def torch_step(module, state, t, batch, optimizer, dtype):
    """PyTorch's step t in dtype from otter's state before it (weights, and AdamW's moments after step t - 1):
    (loss, {name: weights after the step as float64 numpy})."""
    model = module.to(dtype).train()
    params = dict(model.named_parameters())
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(torch.from_numpy(state[k][0]))
    if optimizer == "SGD":
        opt = torch.optim.SGD(model.parameters(), lr=SGD_LR)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=ADAMW_LR, betas=(ADAMW_HP["beta1"], ADAMW_HP["beta2"]),
                                eps=ADAMW_HP["eps"], weight_decay=ADAMW_HP["weight_decay"])
        if t > 1:  # ORT's checkpoint: momentum0 = exp_avg, momentum1 = exp_avg_sq
            for k, p in params.items():
                opt.state[p] = {"step": torch.tensor(float(t - 1)),
                                "exp_avg": torch.from_numpy(state[f"group0/{k}/momentum0"][0]).to(dtype),
                                "exp_avg_sq": torch.from_numpy(state[f"group0/{k}/momentum1"][0]).to(dtype)}
    x, y = batch
    xt = torch.from_numpy(x)
    opt.zero_grad()
    loss = torch.nn.CrossEntropyLoss()(model(xt.to(dtype) if xt.is_floating_point() else xt), torch.from_numpy(y))
    loss.backward()
    opt.step()
    return float(loss), {k: p.detach().double().numpy().copy() for k, p in params.items()}


def printed_loss(stdout):
    """The train loss of the epoch row `otter train` printed (the mean over the batches of this invocation)."""
    for line in stdout.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] == "1" and f[1][0].isdigit():
            return float(f[1])
    raise CliError("no epoch row in otter train's output:\n" + stdout)


def dump(ckpt, d):
    """{name: (array, kind)} of every tensor in checkpoint ckpt (otter checkpoint dump)."""
    otter("checkpoint", "dump", ckpt, "--npy-dir", d)
    manifest = json.load(open(os.path.join(d, "manifest.json")))
    state = {k: (np.load(os.path.join(d, v["file"])), v["kind"]) for k, v in manifest.items()}
    shutil.rmtree(d)
    return state


def otter_train(name, d, data, optimizer):
    """Artifacts and 3 steps through the CLI, one step per invocation: (artifacts, last checkpoint, losses, states:
    the checkpoint's tensors before step 1 and after each step)."""
    art = os.path.join(d, "artifacts")
    args = ["artifacts", f"{name}.onnx", "-o", art, "--loss", "CrossEntropyLoss", "--optimizer", optimizer,
            "--additional-output", "output"]
    if optimizer == "AdamW":
        args += ["--lr-hparams", ADAMW_FLAG]
    otter(*args)
    lr = SGD_LR if optimizer == "SGD" else ADAMW_LR
    common = ["train", art, "--data", data, "--batch-size", str(BATCH), "--no-shuffle", "--normalize", "none",
              "--lr", str(lr), "--threads", "2"]
    ckpt = os.path.join(art, "checkpoint")
    losses, states = [], [dump(ckpt, os.path.join(d, "dump"))]
    for t in range(1, STEPS + 1):
        out = os.path.join(d, f"step{t}")
        resume = ["--resume", ckpt] if t > 1 else []
        losses.append(printed_loss(otter(*common, "--steps", str(t), *resume, "--save", out)))
        ckpt = out
        states.append(dump(ckpt, os.path.join(d, "dump")))
    return art, ckpt, losses, states


def compare_step(optimizer, state, ref32, ref64):
    """One step's weights against PyTorch's float32 and float64 steps from the same state: (||otter - torch64|| /
    ||torch32 - torch64|| over all parameters, the worst per-tensor ratio of max|w - w64| and its tensor)."""
    weights = {k: v.astype(np.float64) for k, (v, kind) in state.items() if kind == "trainable"}
    (_, w32), (_, w64) = ref32, ref64
    ratios = {}
    for k in w64:
        err = float(np.max(np.abs(weights[k] - w64[k])))
        ratios[k] = (ratio_of(err, float(np.max(np.abs(w32[k] - w64[k])))), err)
    k = max(ratios, key=lambda n: ratios[n][0])
    err = math.sqrt(sum(float(np.sum((weights[n] - w64[n]) ** 2)) for n in w64))
    ref = math.sqrt(sum(float(np.sum((w32[n] - w64[n]) ** 2)) for n in w64))
    return ratio_of(err, ref), f"{err:.1e}; per tensor, not checked: {ratios[k][0]:.3g} ({k}, |err| {ratios[k][1]:.1e})"


def compare_training(label, name, optimizer, losses, states, batches, exporter):
    """Each step from otter's state before it (a free-running float32 trajectory is chaotic: a ReLU decision taken
    the other way in step 1 moves every later step; from the same state only that step's rounding counts)."""
    trained = {k for k, (_, kind) in states[-1].items() if kind == "trainable"}
    torch_params = {k for k, _ in exporter.build_real_model(name).named_parameters()}
    check(trained == torch_params, f"{label}: otter trains torch's {len(torch_params)} parameters"
          + ("" if trained == torch_params else f" (otter only: {sorted(trained - torch_params)[:5]}, "
                                                f"torch only: {sorted(torch_params - trained)[:5]})"))
    if trained != torch_params:
        return
    steps, l32, l64 = [], [], []  # (weights ratio, where) of each step
    for t in range(1, STEPS + 1):
        refs = [torch_step(exporter.build_real_model(name), states[t - 1], t, batches[t - 1], optimizer, dt)
                for dt in (torch.float32, torch.float64)]
        l32.append(refs[0][0])
        l64.append(refs[1][0])
        wr, what = compare_step(optimizer, states[t], *refs)
        steps.append((wr, f"step {t}: {what}"))
    nan = any(math.isnan(r) for r, _ in steps)  # a NaN weight fails even in the worst step
    steps.sort(key=lambda s: math.inf if math.isnan(s[0]) else s[0])
    (worst_w, where), (kept_w, kept_where) = steps[-1], steps[-2]
    # A float32 loss is one rounding from exact at best; PyTorch's own distance can be 0 by luck.
    d32 = max(max(abs(a - b) for a, b in zip(l32, l64)), U32 * max(l64))
    loss_err = max(abs(a - b) for a, b in zip(losses, l64))
    loss_ratio = max(loss_err - LOSS_PRINT_UNIT, 0.0) / d32
    note("loss", loss_ratio, label)
    note("weights", kept_w, f"{label} {kept_where}")
    check(loss_ratio <= K, f"{label}: {STEPS} losses (otter {', '.join(f'{v:.6f}' for v in losses)}): "
                           f"(max|otter - torch64| ({loss_err:.1e}) - print unit) / max(max|torch32 - torch64|, "
                           f"U32 loss) ({d32:.1e}) = {loss_ratio:.2f} <= {K}")
    check(kept_w <= K and not nan, f"{label}: {STEPS} steps' weights ({len(trained)} tensors): ||otter - torch64||"
                                   f" / ||torch32 - torch64|| over all parameters, all steps but the worst "
                                   f"({worst_w:.3g}, {where}) <= {K}: {kept_w:.2f} ({kept_where})")


def check_export(label, name, module, art, ckpt, ckpt_state, d, rng):
    """otter export + otter run on a fresh batch vs PyTorch's eval-mode forward on the checkpoint's tensors
    (trained weights, BatchNorm running statistics). The exported model's initializers are not read by name:
    export may merge equal ones (resnet's bn2.bias and downsample.1.bias get the same gradient, so stay equal)."""
    path = os.path.join(d, "exported.onnx")
    otter("export", art, "-o", path, "--checkpoint", ckpt)
    exporter = tl.load_exporter()
    x = exporter.real_input(name, 4, rng)
    np.save(os.path.join(d, "x_eval.npy"), x)
    outdir = os.path.join(d, "run")
    otter("run", path, os.path.join(d, "x_eval.npy"), "-o", outdir, "-q", "-t", "2")
    got = np.load(os.path.join(outdir, "output_0.npy")).astype(np.float64)
    inits = {k: v for k, (v, _) in ckpt_state.items()}
    state = module.state_dict()
    missing = [k for k in state if k not in inits and not k.endswith("num_batches_tracked")]
    check(not missing, f"{label}: the checkpoint holds every tensor of the module's state"
                       + (f" (missing {missing[:5]})" if missing else ""))
    if missing:
        return
    outs = {}
    for dtype in (torch.float32, torch.float64):
        m = module.to(dtype).eval()
        m.load_state_dict({k: torch.from_numpy(np.array(inits[k])).to(v.dtype) if k in inits else v
                           for k, v in state.items()})
        m.to(dtype)
        xt = torch.from_numpy(x)
        with torch.no_grad():
            outs[dtype] = m(xt.to(dtype) if xt.is_floating_point() else xt).double().numpy()
    ok_shape = got.shape == outs[torch.float64].shape
    err = float(np.max(np.abs(got - outs[torch.float64]))) if ok_shape else math.inf
    ratio = ratio_of(err, float(np.max(np.abs(outs[torch.float32] - outs[torch.float64]))))
    note("export", ratio, label)
    check(ok_shape and ratio <= K, f"{label}: exported model's output {list(got.shape)} vs torch eval-mode on its "
                                   f"initializers: max|otter - torch64| / max|torch32 - torch64| = {ratio:.2f} <= {K}")


def run_model(name, exporter, rng):
    """Every stage for one model and both optimizers; returns the first CLI error (None when all ran)."""
    d = os.path.join(WORK, name)
    os.makedirs(d)
    cwd = os.getcwd()
    os.chdir(d)  # artifacts' messages name the model as the user typed it: NAME.onnx
    try:
        exporter.export_real(name, f"{name}.onnx")
        n = BATCH * STEPS - (BATCH // 2 if name in PARTIAL_LAST_BATCH else 0)
        x = exporter.real_input(name, n, rng)
        y = rng.integers(0, exporter.REAL_CLASSES, n).astype(np.int64)
        np.save("x.npy", x)
        np.save("y.npy", y)
        batches = [(x[i:i + BATCH], y[i:i + BATCH]) for i in range(0, n, BATCH)]
        for optimizer in ("SGD", "AdamW"):
            label = f"{name} {optimizer}"
            od = os.path.join(d, optimizer)
            art, ckpt, losses, states = otter_train(name, od, "npy:x.npy,y.npy", optimizer)
            compare_training(label, name, optimizer, losses, states, batches, exporter)
            check_export(label, name, exporter.build_real_model(name), art, ckpt, states[-1], od, rng)
        return None
    except CliError as e:
        return str(e)
    finally:
        os.chdir(cwd)


def main():
    warnings.filterwarnings("ignore")  # torch.onnx.export's and torchvision's
    torch.set_num_threads(2)
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    exporter = tl.load_exporter()
    only = sys.argv[1:] or exporter.REAL_MODELS
    for i, name in enumerate(only):
        rng = np.random.default_rng(100 + i)
        error = run_model(name, exporter, rng)
        expected = EXPECTED_FAILURES.get(name)
        if expected is None:
            check(error is None, f"{name}: artifacts, {STEPS} training steps (SGD, AdamW) and export through the CLI"
                                 + (f": {error}" if error else ""))
        elif error is None:
            check(False, f"{name}: passes but is listed in EXPECTED_FAILURES: remove it from the list")
        else:
            check(expected in error, f"{name}: fails as expected ({expected})"
                                     + ("" if expected in error else f"; but the error is: {error}"))
    for kind, (ratio, where) in sorted(worst.items()):
        print(f"worst {kind} ratio: {ratio:.3g} ({where})")
    return tl.finish("test_real_models")


if __name__ == "__main__":
    sys.exit(main())
