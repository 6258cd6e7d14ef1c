"""otter train / eval / export / params end to end on a small synthetic classification task (npy data).

- train 3 epochs in one run vs 1 epoch + `--resume` to 3: identical per-epoch table rows and byte-identical
  checkpoints (same trajectory: batch order, optimizer state, step, properties);
- eval prints the same loss/accuracy as train's last epoch row; the task is learnable (accuracy > 80%);
- export: inputs/outputs, initializers equal to the trained checkpoint (otter checkpoint dump), and onnx's
  the exported graph evaluated in NumPy gives otter eval's accuracy; without --outputs, artifacts made without
  --additional-output export the forward model's output;
- artifacts: the summary and --help print AdamW's hyperparameters (ONNX Runtime's defaults) and torch.optim.AdamW's;
- params --shapes-json on the ORT fixture equals its shapes.json;
- an explicit --normalize is saved in the checkpoint (otter.normalize): eval without --normalize and --resume
  without it feed the inputs the same way (uint8 data trained with --normalize none, not eval's default x / 255);
- --profile prints the training step's time per operator (rows adding up to the per-step total) and the slowest
  nodes, over the batches after the first two;
- --grad-accum, --schedule, --plot (valid SVG) run; bad input fails with exit 1 and a message naming the fault
  (sample size, label range, mixed artifacts, unwritable checkpoint path leaves the previous file intact).
"""
import json
import os
import shutil
import sys
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import onnx.numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import check, otter  # noqa: E402

FIX = tl.ORT_FIXTURE
WORK = tl.work_dir("training_cli")


def numpy_run(m, x):
    """Evaluate the exported MNIST DNN (Gemm, Relu, Identity) in NumPy."""
    env = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    env[m.graph.input[0].name] = x
    for n in m.graph.node:
        a = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
        i = [env[k] for k in n.input]
        if n.op_type == "Gemm":
            A = i[0].T if a.get("transA", 0) else i[0]
            B = i[1].T if a.get("transB", 0) else i[1]
            y = a.get("alpha", 1.0) * (A @ B)
            if len(i) > 2:
                y = y + a.get("beta", 1.0) * i[2]
        elif n.op_type == "Relu":
            y = np.maximum(i[0], 0)
        elif n.op_type == "Identity":
            y = i[0]
        else:
            raise ValueError("unexpected op " + n.op_type)
        env[n.output[0]] = y
    return env[m.graph.output[0].name]


def rows(out):
    """Per-epoch table rows without the time column."""
    res = []
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0].isdigit():
            res.append(" ".join(f[:5]))
    return res


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    w = lambda *p: os.path.join(WORK, *p)
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 1, (10, 784)).astype(np.float32)
    def make(n, seed):
        r = np.random.default_rng(seed)
        y = r.integers(0, 10, n)
        x = (centers[y] + r.normal(0, 8.0, (n, 784))).astype(np.float32)
        return x, y.astype(np.int64)
    x, y = make(1000, 1)
    xe, ye = make(300, 2)
    for name, a in [("x", x), ("y", y), ("xe", xe), ("ye", ye)]:
        np.save(w(name + ".npy"), a)
    np.save(w("x_bad.npy"), x[:, :700])
    np.save(w("y_bad.npy"), np.where(y == 3, 12, y))
    data, edata = f"npy:{w('x.npy')},{w('y.npy')}", f"npy:{w('xe.npy')},{w('ye.npy')}"

    check(otter("models", "mnist-dnn", "-o", w("m.onnx"), "--seed", "1").returncode == 0, "models")
    art = otter("artifacts", w("m.onnx"), "-o", w("art"), "--additional-output", "output")
    check(art.returncode == 0, "artifacts CE + AdamW with 'output' as additional output")
    ort_hp = "beta1=0.9,beta2=0.999,eps=1e-06,weight_decay=0,correct_bias=1,adam_mode=1"
    torch_hp = "beta1=0.9,beta2=0.999,eps=1e-8,weight_decay=0.01,correct_bias=1,adam_mode=0"
    check(f"AdamW: {ort_hp} (ONNX Runtime's defaults; torch.optim.AdamW's: --lr-hparams {torch_hp})" in art.stdout,
          "artifacts' summary: the AdamW hyperparameters, ONNX Runtime's defaults, and how to get PyTorch's")
    hlp = otter("artifacts", "--help", echo=False)
    check(ort_hp in hlp.stdout and f"torch.optim.AdamW's: {torch_hp}" in hlp.stdout,
          "artifacts --help: AdamW's defaults and torch.optim.AdamW's")
    tart = otter("artifacts", w("m.onnx"), "-o", w("art_torch"), "--lr-hparams", torch_hp)
    attrs = {}
    if tart.returncode == 0:
        node = onnx.load(w("art_torch", "optimizer_model.onnx")).graph.node[0]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    check("AdamW: beta1=0.9,beta2=0.999,eps=1e-08,weight_decay=0.01,correct_bias=1,adam_mode=0\n" in tart.stdout and
          attrs.get("adam_mode") == 0 and abs(attrs.get("epsilon", 0) - 1e-8) < 1e-12 and
          abs(attrs.get("weight_decay", 0) - 0.01) < 1e-7,
          f"artifacts --lr-hparams with torch's values: summary and optimizer attributes {attrs}")
    art_plain = otter("artifacts", w("m.onnx"), "-o", w("art_plain"))
    plain = otter("train", w("art_plain"), "--data", data, "--steps", "2", "--threads", "1", "--save",
                  w("plain.ckpt"))
    ex = otter("export", w("art_plain"), "--checkpoint", w("plain.ckpt"), "-o", w("plain.onnx"))
    outs = [o.name for o in onnx.load(w("plain.onnx")).graph.output] if ex.returncode == 0 else []
    check(art_plain.returncode == 0 and plain.returncode == 0 and outs == ["output"],
          f"export of artifacts made without --additional-output keeps the forward output: {outs}")
    # --profile: the training step's time per operator and the slowest nodes over the batches after the first
    # two; the operator rows add up to the per-step total, and their shares to 100%.
    prof = otter("train", w("art_plain"), "--data", data, "--steps", "6", "--batch-size", "32", "--threads", "1",
                 "--profile", "--save", w("prof.ckpt"))
    lines = prof.stdout.splitlines()
    head = [i for i, l in enumerate(lines) if l.startswith("profile: ")]
    per_step, ops = float("nan"), []
    if head:
        per_step = float(lines[head[0]].split()[1])
        for l in lines[head[0] + 2:]:
            if l.startswith("slowest nodes:"):
                break
            f = l.split()
            ops.append((f[0], int(f[1]), float(f[2]), float(f[3].rstrip("%"))))
    slowest = lines.index("slowest nodes:") if "slowest nodes:" in lines else -1
    check(prof.returncode == 0 and " ms per step in " in (lines[head[0]] if head else "") and
          any("Gemm" in o[0] for o in ops) and abs(sum(o[2] for o in ops) - per_step) <= 0.01 * per_step + 0.01 and
          abs(sum(o[3] for o in ops) - 100) < 1 and slowest > 0 and lines[slowest + 1].strip().endswith("ms/step") and
          "includes the first two" not in prof.stdout,
          f"train --profile: {len(ops)} operator rows summing to {per_step} ms a step, the slowest nodes")
    short = otter("train", w("art_plain"), "--data", data, "--steps", "2", "--threads", "1", "--profile", "--save",
                  w("prof2.ckpt"))
    check(short.returncode == 0 and "(the profile includes the first two batches, which plan memory)" in
          short.stdout and "profile: " in short.stdout, "train --profile on 2 batches says they include the warm-up")
    # A mixed set (issue 18, finding 8): art_plain's optimizer model beside art's other files, or a folder
    # whose manifest records an interrupted write, is refused before training; the intact folders train.
    shutil.copytree(w("art"), w("mixed_runs"))
    shutil.copy(w("art_plain/optimizer_model.onnx"), w("mixed_runs/optimizer_model.onnx"))
    mixed = otter("train", w("mixed_runs"), "--data", data, "--steps", "1", "--threads", "1")
    check(mixed.returncode != 0 and "optimizer model comes from another `otter artifacts` run" in mixed.stderr,
          "train refuses artifacts mixed from two runs")
    shutil.copytree(w("art"), w("interrupted"))
    manifest = open(w("interrupted/otter_artifacts.txt")).read()
    check(manifest.startswith("otter artifacts ") and manifest.endswith(" complete\n"), f"manifest: {manifest!r}")
    open(w("interrupted/otter_artifacts.txt"), "w").write(manifest.replace("complete", "writing"))
    stopped = otter("train", w("interrupted"), "--data", data, "--steps", "1", "--threads", "1")
    check(stopped.returncode != 0 and "write into this folder was interrupted" in stopped.stderr,
          "train refuses a folder whose artifacts write was interrupted")
    tight = otter("train", w("art"), "--data", data, "--steps", "1", "--threads", "1", "--max-memory", "64K",
                  "--save", w("tight.ckpt"))
    check(tight.returncode != 0 and "past the session's memory budget of 65.5 kB" in tight.stderr and
          not os.path.exists(w("tight.ckpt")), "train --max-memory 64K: a clean error naming the budget")
    for d in ["full", "part"]:
        shutil.copytree(w("art"), w(d))
    common = ["--data", data, "--eval-data", edata, "--batch-size", "32", "--seed", "7", "--threads", "1"]
    full = otter("train", w("full"), *common, "--epochs", "3", "--save", w("full.ckpt"), "--plot", w("p.svg"))
    check(full.returncode == 0 and len(rows(full.stdout)) == 3, "train 3 epochs: 3 table rows")
    part = otter("train", w("part"), *common, "--epochs", "1", "--save", w("part.ckpt"))
    check(part.returncode == 0 and rows(part.stdout) == rows(full.stdout)[:1], "1 epoch: same first row")
    res = otter("train", w("part"), *common, "--epochs", "3", "--resume", w("part.ckpt"), "--save", w("res.ckpt"))
    check(res.returncode == 0 and rows(res.stdout) == rows(full.stdout)[1:],
          f"resume to 3 epochs: rows 2-3 identical to the uninterrupted run {rows(res.stdout)}")
    same = open(w("res.ckpt"), "rb").read() == open(w("full.ckpt"), "rb").read()
    check(same, "resumed checkpoint byte-identical to the uninterrupted run's")
    try:
        svg = ET.parse(w("p.svg")).getroot()
        polys = [e for e in svg.iter() if e.tag.endswith("polyline")]
        check(len(polys) >= 3, f"--plot: SVG parses, {len(polys)} curves")
    except Exception as e:  # noqa: BLE001
        check(False, f"--plot SVG: {e}")

    last = rows(full.stdout)[-1].split()
    ev = otter("eval", w("full"), "--data", edata, "--checkpoint", w("full.ckpt"))
    got = ev.stdout.split("loss ")[-1].replace(",", "").replace("%", "").split() if ev.returncode == 0 else []
    acc = float(got[2]) if len(got) >= 3 else -1
    check(ev.returncode == 0 and len(got) >= 3 and abs(float(got[0]) - float(last[2])) < 1e-5 and
          abs(acc - float(last[3].rstrip("%"))) < 1e-9, f"eval: loss/accuracy equal train's last row {last}")
    check(acc > 50.0, f"the task is learned: eval accuracy {acc}% (chance 10%)")

    ex = otter("export", w("full"), "--checkpoint", w("full.ckpt"), "-o", w("inf.onnx"))
    check(ex.returncode == 0, "export")
    if ex.returncode == 0:
        m = onnx.load(w("inf.onnx"))
        onnx.checker.check_model(m)
        check([i.name for i in m.graph.input] == ["input"] and [o.name for o in m.graph.output] == ["output"],
              "export: input 'input', output 'output'")
        otter("checkpoint", "dump", w("full.ckpt"), "--npy-dir", w("dump"))
        man = json.load(open(w("dump", "manifest.json")))
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
        eq = all(np.array_equal(inits.get(n), np.load(w("dump", e["file"]))) for n, e in man.items() if n in inits)
        check(len(inits) == 6 and eq, f"export: {len(inits)} initializers equal the checkpoint's values")
        out = numpy_run(m, xe)
        ref_acc = 100.0 * float(np.mean(out.argmax(1) == ye))
        check(abs(ref_acc - acc) < 0.006, f"NumPy on the exported graph: accuracy {ref_acc:.2f}% = eval's")

    # uint8 samples, trained on the raw values (--normalize none) instead of the default x / 255
    xu = np.clip(x * 8 + 128, 0, 255).astype(np.uint8)
    np.save(w("xu.npy"), xu)
    udata = ["--data", f"npy:{w('xu.npy')},{w('y.npy')}", "--batch-size", "32", "--seed", "3", "--threads", "1",
             "--lr", "1e-4"]
    nfull = otter("train", w("art"), *udata, "--epochs", "2", "--normalize", "none", "--save", w("n2.ckpt"))
    npart = otter("train", w("art"), *udata, "--epochs", "1", "--normalize", "none", "--save", w("n1.ckpt"))
    info = otter("checkpoint", "info", w("n1.ckpt"))
    check(nfull.returncode == 0 and npart.returncode == 0 and "otter.normalize" in info.stdout and
          "none" in info.stdout, "--normalize none is saved as the checkpoint property otter.normalize")
    nres = otter("train", w("art"), *udata, "--epochs", "2", "--resume", w("n1.ckpt"), "--save", w("nr.ckpt"))
    check(nres.returncode == 0 and rows(nres.stdout) == rows(nfull.stdout)[1:] and
          open(w("nr.ckpt"), "rb").read() == open(w("n2.ckpt"), "rb").read(),
          "--resume without --normalize follows the checkpoint's (same row, byte-identical checkpoint)")
    ueval = ["--data", f"npy:{w('xu.npy')},{w('y.npy')}", "--checkpoint", w("n2.ckpt")]
    e_saved = otter("eval", w("art"), *ueval)
    e_none = otter("eval", w("art"), *ueval, "--normalize", "none")
    e_scale = otter("eval", w("art"), *ueval, "--normalize", "scale")
    check(e_saved.returncode == 0 and e_saved.stdout == e_none.stdout and e_scale.stdout != e_none.stdout,
          f"eval without --normalize uses the checkpoint's: {e_saved.stdout.split(': ')[-1].strip()} "
          f"(x / 255 would give {e_scale.stdout.split(': ')[-1].strip()})")

    pr = otter("params", FIX, "--shapes-json", w("shapes.json"))
    check(pr.returncode == 0 and json.load(open(w("shapes.json"))) == json.load(open(os.path.join(FIX, "shapes.json"))),
          "params --shapes-json on the ORT fixture equals its shapes.json")

    ga = otter("train", w("art"), "--data", data, "--steps", "40", "--batch-size", "16", "--grad-accum", "4",
               "--schedule", "cosine:warmup=2", "--lr", "0.01", "--save", w("ga.ckpt"), "--threads", "1")
    check(ga.returncode == 0 and "(10 optimizer steps)" in ga.stdout, "--steps 40 --grad-accum 4: 10 optimizer steps")

    bad = otter("train", w("art"), "--data", f"npy:{w('x_bad.npy')},{w('y.npy')}", "--save", w("bad.ckpt"))
    check(bad.returncode == 1 and "700" in bad.stderr and "'input'" in bad.stderr, "sample size mismatch named")
    bad = otter("train", w("art"), "--data", f"npy:{w('x.npy')},{w('y_bad.npy')}", "--save", w("bad.ckpt"))
    check(bad.returncode == 1 and "12" in bad.stderr, "label out of range named")
    shutil.copytree(w("art"), w("mixed"))
    otter("models", "cifar10-cnn", "-o", w("c.onnx"))
    otter("artifacts", w("c.onnx"), "-o", w("cart"))
    shutil.copy(w("cart", "eval_model.onnx"), w("mixed", "eval_model.onnx"))
    bad = otter("train", w("mixed"), "--data", data)
    check(bad.returncode == 1 and "eval model" in bad.stderr, "mixed artifacts refused")
    before = open(w("full.ckpt"), "rb").read()
    shutil.copy(w("full.ckpt"), w("keep.ckpt"))
    bad = otter("train", w("full"), "--data", data, "--steps", "3", "--epochs", "4")
    check(bad.returncode == 2 and "not both" in bad.stderr, "--steps with --epochs is a usage error")
    bad = otter("train", w("full"), "--data", data, "--epochs", "5", "--resume", w("keep.ckpt"), "--save", w("x.ckpt"))
    check(bad.returncode == 1 and "--batch-size 32" in bad.stderr, "resume with another batch size refused")
    bad = otter("train", w("full"), *common, "--epochs", "5", "--resume", w("keep.ckpt"),
                "--save", w("no", "such", "dir", "c.ckpt"))
    check(bad.returncode == 1 and "c.ckpt" in bad.stderr and open(w("keep.ckpt"), "rb").read() == before,
          "save into a missing folder fails naming it; the resumed checkpoint is intact")

    return tl.finish("test_training_cli")


if __name__ == "__main__":
    sys.exit(main())
