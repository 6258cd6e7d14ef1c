"""otter's training session against ONNX Runtime's training runtime (onnxruntime-web 1.19.2 under Node) on the
MNIST DNN 784-200-200-10, with test_artifacts_ort's per-step comparison (see its docstring: otter trains, ORT runs
each step from otter's parameters of that step, and every step's losses and updates are checked against bounds
derived from float32 rounding). Three artifact sets, 10 steps each on fixed batches of 64, lr 0.001 (the web
API can't change it):
  - fixture: tests/data/ort-flat-mnist (ORT 1.18's Python tool; CrossEntropyLoss + AdamW), so ORT's own
    artifacts train in otter as in ORT;
  - otter-ce-adamw: `otter models mnist-dnn` + `otter artifacts --loss CrossEntropyLoss --optimizer AdamW`;
  - otter-mse-sgd: the same model + `otter artifacts --loss MSELoss --optimizer SGD` (one-hot float targets).
Also checked: getParametersSize(true) = 199,210 = otter's, and the contiguous buffers bit-identical before training
(same order). The npm package is installed under the build tree on first use.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_artifacts_ort as ao  # noqa: E402
import testlib as tl  # noqa: E402
from testlib import check  # noqa: E402

WORK = tl.work_dir("training_ort")
SIZE = 199210


def main():
    if not os.path.exists(tl.LIB):
        print(f"FAIL {tl.LIB} was not built")
        return 1
    ort_js = ao.ensure_ort()
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    exporter = tl.load_exporter()
    otter = ao.Otter(tl.LIB)
    model = os.path.join(WORK, "mnist_dnn.onnx")
    check(tl.otter("models", "mnist-dnn", "-o", model, "--seed", "3", echo="fail").returncode == 0,
          "otter models mnist-dnn")
    fixture = os.path.join(WORK, "fixture")
    shutil.copytree(tl.ORT_FIXTURE, fixture)  # otter_train writes otter's parameters of each step next to them
    sets = {"fixture": (fixture, "CrossEntropyLoss", "AdamW"),
            "otter-ce-adamw": (os.path.join(WORK, "ce_adamw"), "CrossEntropyLoss", "AdamW"),
            "otter-mse-sgd": (os.path.join(WORK, "mse_sgd"), "MSELoss", "SGD")}
    for name, (d, loss, opt) in sets.items():
        if d != fixture:
            check(tl.otter("artifacts", model, "-o", d, "--loss", loss, "--optimizer", opt, echo="fail").returncode
                  == 0, f"otter artifacts {loss} + {opt}")
    jobs, runs = [], {}
    for i, (name, (d, loss, opt)) in enumerate(sets.items()):
        bd = os.path.join(d, "batches")
        feeds = ao.make_batches(bd, exporter, "mnist_dnn", loss, 100 + i)
        try:
            runs[name] = ao.otter_train(otter, d, bd, feeds)
        except RuntimeError as e:
            check(False, f"{name}: otter: {e}")
            continue
        jobs.append({"name": name, "loss": loss, "opt": opt, "dir": d, "batches": bd, "feeds": feeds,
                     "steps": ao.STEPS, "out": os.path.join(d, "ort"), "sync": os.path.join(d, "otter")})
    job_file = os.path.join(WORK, "jobs.json")
    json.dump(jobs, open(job_file, "w"))
    script = os.path.join(WORK, "ort_train.js")
    open(script, "w").write(ao.NODE_SCRIPT)
    r = subprocess.run(["node", script, ort_js, job_file], capture_output=True, text=True, timeout=900)
    sys.stderr.write(r.stderr[-4000:])
    check(r.returncode == 0, "node ran ORT's training")
    res = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}

    module = exporter.build_model("mnist_dnn").double().train()  # the float64 loss reference
    for job in jobs:
        name, run = job["name"], runs[job["name"]]
        o = res.get(name, {})
        check(o.get("ok", False), f"{name}: ORT trained {ao.STEPS} steps {o.get('error', '')}")
        if not o.get("ok"):
            continue
        p0o, p0r = run["params"][0], np.fromfile(job["out"] + ".params0", "<f4")
        check(o["size"] == SIZE and p0o.size == SIZE, f"{name}: parameter buffer size otter {p0o.size}, ORT "
                                                      f"{o['size']} (want {SIZE})")
        same = p0o.size == p0r.size and np.array_equal(p0o.view("<u4"), p0r.view("<u4"))
        check(same, f"{name}: contiguous buffers bit-identical before training (same order)")
        if not same:
            continue
        layout = ao.float_params(os.path.join(job["dir"], "training_model.onnx"), True)
        job["ort_losses"] = o["losses"]
        ao.compare_steps(name, job, module, run, layout, layout)
    return tl.finish("test_training_ort")


if __name__ == "__main__":
    sys.exit(main())
