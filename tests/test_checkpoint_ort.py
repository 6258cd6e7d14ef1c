"""ONNX Runtime's training runtime accepts the checkpoints otter writes.

The fixture tests/data/ort-flat-mnist (ORT 1.18's Python tool, MNIST DNN 784-200-200-10) is re-written by
`otter checkpoint convert` (sorted by name, order kept, nominal, version 1) and each file is loaded by
onnxruntime-web 1.19.2's training build under Node with the fixture's training, eval and optimizer models.
Compared with ORT loading its own file:
  - getContiguousParameters(true) is bit-identical (199,210 floats) for the sorted and kept-order files;
  - one train step + one AdamW step from each gives bit-identical parameters and the same loss;
  - the nominal file loads, and after loadParametersBuffer(original, trainableOnly=false) gives the same values;
  - version 1 is refused by ORT 1.19 (it reads version 2 only), as the spec says;
  - the .npy files of `otter checkpoint dump`, concatenated in shapes.json order, equal ORT's buffer.
The npm package is installed under the build tree on first use (the registry is reachable in CI).
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

FIX = tl.ORT_FIXTURE
WORK = tl.work_dir("checkpoint_ort")


NODE_SCRIPT = r"""
const path = require('path'), fs = require('fs');
const [npm, fix, jobFile] = process.argv.slice(2);
const ort = require(path.resolve(npm, 'node_modules/onnxruntime-web/dist/ort.training.wasm.min.js'));
ort.env.wasm.numThreads = 1;
const rd = (f) => new Uint8Array(fs.readFileSync(f));
(async () => {
  const jobs = JSON.parse(fs.readFileSync(jobFile, 'utf8'));
  const models = {trainModel: rd(fix + '/training_model.onnx'), evalModel: rd(fix + '/eval_model.onnx'),
                  optimizerModel: rd(fix + '/optimizer_model.onnx')};
  // Deterministic batch of 64: inputs in [0, 1), labels 0..9.
  const B = 64, x = new Float32Array(B * 784), y = new BigInt64Array(B);
  let s = 12345;
  const rnd = () => { s = (s * 1103515245 + 12345) % 2147483648; return s / 2147483648; };
  for (let i = 0; i < x.length; i++) x[i] = rnd();
  for (let i = 0; i < B; i++) y[i] = BigInt(i % 10);
  const out = {};
  for (const job of jobs) {
    const r = {};
    try {
      const sess = await ort.TrainingSession.create({checkpointState: rd(job.ckpt), ...models});
      if (job.load) await sess.loadParametersBuffer(rd(job.load), false);
      const p = await sess.getContiguousParameters(true);
      fs.writeFileSync(job.out + '.params', Buffer.from(p.data.buffer, p.data.byteOffset, p.data.byteLength));
      const feeds = {input: new ort.Tensor('float32', x, [B, 784]), labels: new ort.Tensor('int64', y, [B])};
      const res = await sess.runTrainStep(feeds);
      r.loss = res[sess.trainingOutputNames[0]].data[0];
      await sess.runOptimizerStep();
      const q = await sess.getContiguousParameters(true);
      fs.writeFileSync(job.out + '.stepped', Buffer.from(q.data.buffer, q.data.byteOffset, q.data.byteLength));
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


def main():
    tl.ensure_ort()
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    orig = os.path.join(FIX, "checkpoint")
    files = {"ort": orig}
    for name, extra in [("sorted", []), ("keep", ["--keep-order"]), ("nominal", ["--nominal"]),
                        ("v1", ["--version", "1"])]:
        files[name] = os.path.join(WORK, name + ".ckpt")
        check(tl.otter("checkpoint", "convert", orig, "-o", files[name], *extra).returncode == 0,
              f"otter wrote {name}.ckpt")
    npy_dir = os.path.join(WORK, "npy")
    check(tl.otter("checkpoint", "dump", orig, "--npy-dir", npy_dir).returncode == 0, "otter checkpoint dump")

    jobs = [{"name": n, "ckpt": f, "out": os.path.join(WORK, n)} for n, f in files.items() if n != "nominal"]
    jobs.append({"name": "nominal", "ckpt": files["nominal"], "out": os.path.join(WORK, "nominal"),
                 "load": os.path.join(WORK, "ort.params")})
    job_file = os.path.join(WORK, "jobs.json")
    json.dump(jobs, open(job_file, "w"))
    script = os.path.join(WORK, "ort_check.js")
    open(script, "w").write(NODE_SCRIPT)
    r = subprocess.run(["node", script, tl.NPM, FIX, job_file], capture_output=True, text=True, timeout=600)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, "node ran the ORT checks")
    res = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    for n in res:
        print(f"ORT {n}: {res[n]}")

    def arr(name, kind):
        p = os.path.join(WORK, f"{name}.{kind}")
        return np.fromfile(p, dtype="<f4") if os.path.exists(p) else np.zeros(0, "<f4")

    ref = arr("ort", "params")
    ref_step = arr("ort", "stepped")
    check(res.get("ort", {}).get("ok") and ref.size == 199210,
          f"ORT loads its own checkpoint: {ref.size} trainable floats (want 199210)")
    for n in ["sorted", "keep", "nominal"]:
        got = res.get(n, {})
        check(got.get("ok", False), f"ORT loads otter's {n} checkpoint {got.get('error', '')}")
        p, q = arr(n, "params"), arr(n, "stepped")
        same = p.size == ref.size and np.array_equal(p.view("<u4"), ref.view("<u4"))
        diff = float(np.max(np.abs(p - ref))) if p.size == ref.size else float("inf")
        check(same, f"{n}: getContiguousParameters(true) bit-identical to the fixture's ({p.size} floats, "
                    f"max |diff| {diff})")
        same_step = q.size == ref_step.size and np.array_equal(q.view("<u4"), ref_step.view("<u4"))
        moved = float(np.max(np.abs(q - p))) if q.size == p.size and q.size else 0.0
        check(same_step and moved > 0,
              f"{n}: after one train + AdamW step, parameters bit-identical to ORT's from its own file "
              f"(step moved them by up to {moved:.3g}); loss {got.get('loss')} vs {res.get('ort', {}).get('loss')}")
        check(got.get("loss") == res.get("ort", {}).get("loss"), f"{n}: same training loss")
    v1 = res.get("v1", {})
    check(not v1.get("ok", True) and "version" in v1.get("error", "").lower(),
          f"ORT 1.19 refuses a version-1 checkpoint: {v1.get('error', '')[:160]}")

    manifest = json.load(open(os.path.join(npy_dir, "manifest.json")))
    shapes = json.load(open(os.path.join(FIX, "shapes.json")))
    parts = []
    for s in shapes:
        e = manifest.get(s["name"], {})
        a = np.load(os.path.join(npy_dir, e.get("file", "missing.npy"))) if e else np.zeros(0, "<f4")
        check(e.get("shape") == s["shape"] and list(a.shape) == s["shape"] and e.get("dtype") == "float32",
              f"dump {s['name']}: manifest shape {e.get('shape')}, npy shape {list(a.shape)}, want {s['shape']}")
        parts.append(a.ravel())
    flat = np.concatenate(parts) if parts else np.zeros(0)
    check(flat.size == ref.size and np.array_equal(flat.astype("<f4").view("<u4"), ref.view("<u4")),
          f"dumped .npy files in shapes.json order equal ORT's contiguous buffer ({flat.size} floats)")

    return tl.finish("test_checkpoint_ort")


if __name__ == "__main__":
    sys.exit(main())
