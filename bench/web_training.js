// Training throughput in the browser builds, otter-web (the web/ package) against ONNX Runtime's web training
// build (onnxruntime-web 1.19.2), both in this one Node process, single-threaded, for bench/bench_web.sh:
//   node bench/web_training.js NPM_PREFIX OTTER_WEB_DIR ARTIFACTS_DIR ROUNDS STEPS BATCH D0 [D1 ...]
// One script drives both through onnxruntime-web's TrainingSession API (otter-web mirrors it): each step is
// runTrainStep, runOptimizerStep, lazyResetGrad on synthetic data (4 batches of uniform [0, 1) inputs, int64 labels
// in [0, 10), cycled), as bench/ort_train.js. WARMUP steps each first (V8 tiers hot wasm code up in the background:
// with 3, ORT against itself measured 0.46x, with 10 0.98x), then ROUNDS rounds that alternate the two runtimes
// (STEPS timed steps each per round), since the machine's speed drifts. Prints one JSON line: each
// runtime's samples/s from its median step over all rounds, the ratio otter/ort, and both final losses.
const path = require('path'), fs = require('fs');
const [npm, otterDir, dir, roundsArg, stepsArg, batchArg, ...dimArgs] = process.argv.slice(2);
const ort = require(path.resolve(npm, 'node_modules/onnxruntime-web/dist/ort.training.wasm.min.js'));
const otter = require(path.resolve(otterDir));
for (const rt of [ort, otter]) {
  rt.env.wasm.numThreads = 1;
  rt.env.logLevel = 'error';
}
const rounds = Number(roundsArg), steps = Number(stepsArg), batch = Number(batchArg);
const dims = [batch, ...dimArgs.map(Number)];
const rd = (f) => new Uint8Array(fs.readFileSync(path.join(dir, f)));

async function open(rt) {
  const sess = await rt.TrainingSession.create({checkpointState: rd('checkpoint'),
    trainModel: rd('training_model.onnx'), evalModel: rd('eval_model.onnx'), optimizerModel: rd('optimizer_model.onnx')});
  const n = dims.reduce((a, b) => a * b, 1), data = [];
  for (let k = 0; k < 4; k++) {
    const x = new Float32Array(n), y = new BigInt64Array(batch);
    for (let i = 0; i < n; i++) x[i] = Math.random();
    for (let i = 0; i < batch; i++) y[i] = BigInt(Math.floor(Math.random() * 10));
    const feeds = {};
    feeds[sess.trainingInputNames[0]] = new rt.Tensor('float32', x, dims);
    feeds[sess.trainingInputNames[1]] = new rt.Tensor('int64', y, [batch]);
    data.push(feeds);
  }
  return {sess, data, k: 0, ms: [], loss: NaN};
}

// count steps on r; timed ones go to r.ms.
async function run(r, count, timed) {
  for (let i = 0; i < count; i++, r.k++) {
    const t0 = process.hrtime.bigint();
    const res = await r.sess.runTrainStep(r.data[r.k % 4]);
    await r.sess.runOptimizerStep();
    await r.sess.lazyResetGrad();
    const t1 = process.hrtime.bigint();
    r.loss = Number(res[r.sess.trainingOutputNames[0]].data[0]);
    if (timed) r.ms.push(Number(t1 - t0) / 1e6);
  }
}

const WARMUP = 10;
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

(async () => {
  const o = await open(otter), p = await open(ort);
  await run(o, WARMUP, false);
  await run(p, WARMUP, false);
  for (let r = 0; r < rounds; r++) {
    await run(o, steps, true);
    await run(p, steps, true);
  }
  const os = 1e3 * batch / median(o.ms), ps = 1e3 * batch / median(p.ms);
  console.log(JSON.stringify({otter_samples_per_s: os, ort_samples_per_s: ps, ratio: os / ps,
    otter_median_ms: median(o.ms), ort_median_ms: median(p.ms), otter_loss: o.loss, ort_loss: p.loss}));
  await o.sess.release();
  await p.sess.release();
})().catch((e) => { console.error(e); process.exit(1); });
