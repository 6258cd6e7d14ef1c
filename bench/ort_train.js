// Training throughput of one artifacts folder in ONNX Runtime's web training build (onnxruntime-web 1.19.2
// under Node, numThreads = 1: the build runs single-threaded there), for bench/bench_training.sh.
//   node bench/ort_train.js NPM_PREFIX ARTIFACTS_DIR STEPS BATCH D0 [D1 ...]
// Synthetic data as bench_training.c (4 batches of uniform [0, 1) inputs, int64 labels in [0, 10), cycled);
// each step runTrainStep, runOptimizerStep, lazyResetGrad. 3 warm-up steps, then STEPS timed steps.
// Prints one JSON line: samples/s from the median step, median/min/mean ms, final loss, peak RSS.
const path = require('path'), fs = require('fs');
// Peak resident set in KiB: /proc/self/status's VmHWM starts afresh at exec, where resourceUsage().maxRSS keeps the
// high-water mark of the process that forked this one.
function peakRssKb() {
  try {
    const m = /VmHWM:\s*(\d+)/.exec(require('fs').readFileSync('/proc/self/status', 'utf8'));
    if (m) return +m[1];
  } catch (e) { /* not Linux */ }
  return process.resourceUsage().maxRSS;
}
const [npm, dir, stepsArg, batchArg, ...dimArgs] = process.argv.slice(2);
const ort = require(path.resolve(npm, 'node_modules/onnxruntime-web/dist/ort.training.wasm.min.js'));
ort.env.wasm.numThreads = 1;
ort.env.logLevel = 'error';
const steps = Number(stepsArg), batch = Number(batchArg), dims = [batch, ...dimArgs.map(Number)];
const rd = (f) => new Uint8Array(fs.readFileSync(path.join(dir, f)));
(async () => {
  const sess = await ort.TrainingSession.create({checkpointState: rd('checkpoint'), trainModel: rd('training_model.onnx'),
    evalModel: rd('eval_model.onnx'), optimizerModel: rd('optimizer_model.onnx')});
  const n = dims.reduce((a, b) => a * b, 1);
  const data = [];
  for (let k = 0; k < 4; k++) {
    const x = new Float32Array(n), y = new BigInt64Array(batch);
    for (let i = 0; i < n; i++) x[i] = Math.random();
    for (let i = 0; i < batch; i++) y[i] = BigInt(Math.floor(Math.random() * 10));
    data.push([new ort.Tensor('float32', x, dims), new ort.Tensor('int64', y, [batch])]);
  }
  const ms = [];
  let loss = 0;
  for (let k = 0; k < 3 + steps; k++) {
    const feeds = {};
    feeds[sess.trainingInputNames[0]] = data[k % 4][0];
    feeds[sess.trainingInputNames[1]] = data[k % 4][1];
    const t0 = process.hrtime.bigint();
    const res = await sess.runTrainStep(feeds);
    await sess.runOptimizerStep();
    await sess.lazyResetGrad();
    const t1 = process.hrtime.bigint();
    loss = res[sess.trainingOutputNames[0]].data[0];
    if (k >= 3) ms.push(Number(t1 - t0) / 1e6);
  }
  const mean = ms.reduce((a, b) => a + b, 0) / ms.length;
  ms.sort((a, b) => a - b);
  const med = ms[Math.floor(ms.length / 2)];
  console.log(JSON.stringify({samples_per_s: 1e3 * batch / med, median_ms: med, min_ms: ms[0], mean_ms: mean, loss,
    peak_rss_kb: peakRssKb()}));
  await sess.release();
})().catch(e => { console.error(e); process.exit(1); });
