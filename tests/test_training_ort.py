"""otter's training session against ONNX Runtime's training runtime (onnxruntime-web 1.19.2 under Node).

Three artifact sets, each trained 20 steps (train step, optimizer step, lazy reset) on the same fixed batches
of 64 by both runtimes, learning rate 0.001 (the web API can't change it):
  - fixture: tests/data/ort-flat-mnist (ORT 1.18's Python tool; CrossEntropyLoss + AdamW);
  - otter-ce-adamw: `otter models mnist-dnn` + `otter artifacts --loss CrossEntropyLoss --optimizer AdamW`;
  - otter-mse-sgd: the same model + `otter artifacts --loss MSELoss --optimizer SGD` (one-hot float targets).
Checked: getParametersSize(true) and the contiguous buffer before training (size 199,210 and bit-identical:
same order), every step's loss to 1e-5 relative, and the trained parameters. Prints the worst differences.
The npm package is installed under the build tree on first use.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402
from testlib import check  # noqa: E402

DRIVER = os.path.join(tl.BIN, "tests", "test_training")
FIX = tl.ORT_FIXTURE
WORK = tl.work_dir("training_ort")
STEPS, BATCH = 20, 64


NODE_SCRIPT = r"""
const path = require('path'), fs = require('fs');
const [npm, jobFile] = process.argv.slice(2);
const ort = require(path.resolve(npm, 'node_modules/onnxruntime-web/dist/ort.training.wasm.min.js'));
ort.env.wasm.numThreads = 1;
ort.env.logLevel = 'error';
const rd = (f) => new Uint8Array(fs.readFileSync(f));
const f32 = (f) => { const b = fs.readFileSync(f); return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4); };
const i64 = (f) => { const b = fs.readFileSync(f); return new BigInt64Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength)); };
const save = (f, t) => fs.writeFileSync(f, Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
(async () => {
  const jobs = JSON.parse(fs.readFileSync(jobFile, 'utf8'));
  const out = {};
  for (const job of jobs) {
    const d = job.dir, r = {losses: []};
    try {
      const sess = await ort.TrainingSession.create({checkpointState: rd(d + '/checkpoint'),
        trainModel: rd(d + '/training_model.onnx'), evalModel: rd(d + '/eval_model.onnx'),
        optimizerModel: rd(d + '/optimizer_model.onnx')});
      r.size = await sess.getParametersSize(true);
      r.inputs = sess.trainingInputNames;
      save(job.out + '.params0', await sess.getContiguousParameters(true));
      for (let k = 0; k < job.steps; k++) {
        const x = new ort.Tensor('float32', f32(`${job.batches}/x_${k}.bin`), [job.batch, 784]);
        const y = job.labels === 'int64' ? new ort.Tensor('int64', i64(`${job.batches}/y_${k}.bin`), [job.batch])
                                         : new ort.Tensor('float32', f32(`${job.batches}/y_${k}.bin`), [job.batch, 10]);
        const feeds = {};
        feeds[sess.trainingInputNames[0]] = x;
        feeds[sess.trainingInputNames[1]] = y;
        const res = await sess.runTrainStep(feeds);
        r.losses.push(res[sess.trainingOutputNames[0]].data[0]);
        await sess.runOptimizerStep();
        await sess.lazyResetGrad();
      }
      save(job.out + '.params', await sess.getContiguousParameters(true));
      r.ok = true;
      await sess.release();
    } catch (e) {
      r.ok = false;
      r.error = String(e && e.message ? e.message : e);
    }
    out[job.name] = r;
  }
  console.log(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(1); });
"""


def run(cmd):
    return tl.run(cmd, echo="fail").returncode


def write_batches(d, labels, seed):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    for k in range(STEPS):
        x = rng.random((BATCH, 784), dtype=np.float32)
        c = rng.integers(0, 10, BATCH)
        y = c.astype(np.int64) if labels == "int64" else np.eye(10, dtype=np.float32)[c]
        np.save(os.path.join(d, f"x_{k}.npy"), x)
        np.save(os.path.join(d, f"y_{k}.npy"), y)
        x.tofile(os.path.join(d, f"x_{k}.bin"))
        y.tofile(os.path.join(d, f"y_{k}.bin"))


def main():
    tl.ensure_ort()
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    model = os.path.join(WORK, "mnist_dnn.onnx")
    check(run([tl.CLI, "models", "mnist-dnn", "-o", model, "--seed", "3"]) == 0, "otter models mnist-dnn")
    sets = {"fixture": (FIX, "int64"),
            "otter-ce-adamw": (os.path.join(WORK, "ce_adamw"), "int64"),
            "otter-mse-sgd": (os.path.join(WORK, "mse_sgd"), "float32")}
    check(run([tl.CLI, "artifacts", model, "-o", sets["otter-ce-adamw"][0], "--loss", "CrossEntropyLoss",
               "--optimizer", "AdamW"]) == 0, "otter artifacts CrossEntropyLoss + AdamW")
    check(run([tl.CLI, "artifacts", model, "-o", sets["otter-mse-sgd"][0], "--loss", "MSELoss",
               "--optimizer", "SGD"]) == 0, "otter artifacts MSELoss + SGD")
    jobs = []
    for i, (name, (d, labels)) in enumerate(sets.items()):
        bd = os.path.join(WORK, "batches_" + name)
        write_batches(bd, labels, 100 + i)
        jobs.append({"name": name, "dir": d, "batches": bd, "labels": labels, "steps": STEPS, "batch": BATCH,
                     "out": os.path.join(WORK, "ort_" + name)})
    job_file = os.path.join(WORK, "jobs.json")
    json.dump(jobs, open(job_file, "w"))
    script = os.path.join(WORK, "ort_train.js")
    open(script, "w").write(NODE_SCRIPT)
    r = subprocess.run(["node", script, tl.NPM, job_file], capture_output=True, text=True, timeout=900)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, "node ran ORT's training")
    res = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}

    for job in jobs:
        name = job["name"]
        o = res.get(name, {})
        check(o.get("ok", False), f"{name}: ORT trained {STEPS} steps {o.get('error', '')}")
        prefix = os.path.join(WORK, "otter_" + name)
        rc = run([DRIVER, "--drive", job["dir"], job["batches"], str(STEPS), prefix])
        check(rc == 0, f"{name}: otter trained {STEPS} steps")
        if not o.get("ok") or rc != 0:
            continue
        p0o = np.fromfile(prefix + ".params0", "<f4")
        p0r = np.fromfile(job["out"] + ".params0", "<f4")
        check(o["size"] == 199210 and p0o.size == o["size"],
              f"{name}: parameter buffer size otter {p0o.size}, ORT {o['size']} (want 199210)")
        check(p0o.size == p0r.size and np.array_equal(p0o.view("<u4"), p0r.view("<u4")),
              f"{name}: contiguous buffers bit-identical before training (same order)")
        lo = np.loadtxt(prefix + ".losses", dtype=np.float64).reshape(-1)
        lr_ = np.array(o["losses"], dtype=np.float64)
        rel = np.abs(lo - lr_) / np.maximum(np.abs(lr_), 1e-12) if lo.size == lr_.size else np.array([np.inf])
        check(lo.size == STEPS and float(rel.max()) <= 1e-5,
              f"{name}: {STEPS} losses, max rel diff {float(rel.max()):.3g} (<= 1e-5); "
              f"first {lr_[0]:.6f} -> last {lr_[-1]:.6f} (ORT), {lo[0]:.6f} -> {lo[-1]:.6f} (otter)")
        po = np.fromfile(prefix + ".params", "<f4")
        pr = np.fromfile(job["out"] + ".params", "<f4")
        moved = float(np.max(np.abs(pr - p0r)))
        diff = float(np.max(np.abs(po - pr))) if po.size == pr.size else float("inf")
        check(diff <= 1e-3 * moved and moved > 0,
              f"{name}: trained parameters max |otter - ORT| {diff:.3g} (training moved them up to {moved:.3g})")

    return tl.finish("test_training_ort")


if __name__ == "__main__":
    sys.exit(main())
