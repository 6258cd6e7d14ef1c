// ONNX Runtime (onnxruntime-node) latency for one model, batch and thread count: the peer of
// bench_runtime. Prints one JSON line like bench_runtime's.
//   node ort_infer.js NPM_PREFIX MODEL BATCH THREADS [RUNS [float32|int64 D1,D2,...]]
// Without a type and sample dims, the model's name picks them (the MNIST DNN or a 3x32x32 image). Inputs are
// filled as bench_runtime fills them: floats in [0, 1), int64 token ids in [0, 97) (bench_util.h).
const path = require('path');
// Peak resident set in KiB: /proc/self/status's VmHWM starts afresh at exec, where resourceUsage().maxRSS keeps the
// high-water mark of the process that forked this one.
function peakRssKb() {
  try {
    const m = /VmHWM:\s*(\d+)/.exec(require('fs').readFileSync('/proc/self/status', 'utf8'));
    if (m) return +m[1];
  } catch (e) { /* not Linux */ }
  return process.resourceUsage().maxRSS;
}
const [npm, model, batchS, threadsS, runsS, typeS, sampleDimsS] = process.argv.slice(2);
const ort = require(path.resolve(npm, 'node_modules/onnxruntime-node'));
(async () => {
  const batch = +batchS, threads = +threadsS, runs = +(runsS || 100);
  const s = await ort.InferenceSession.create(model, {intraOpNumThreads: threads, interOpNumThreads: 1,
                                                      executionMode: 'sequential', graphOptimizationLevel: 'all'});
  const meta = s.inputMetadata ? s.inputMetadata[0] : null;
  const type = typeS || 'float32';
  const sampleDims = sampleDimsS ? sampleDimsS.split(',').map(Number) : model.includes('mnist') ? [784] : [3, 32, 32];
  const dims = [batch, ...sampleDims];
  const n = dims.reduce((a, b) => a * b, 1);
  let x;
  if (type === 'int64') {
    x = new BigInt64Array(n);
    for (let i = 0; i < n; i++) x[i] = BigInt((i * 7919) % 97);
  } else {
    x = new Float32Array(n);
    for (let i = 0; i < n; i++) x[i] = ((i * 7919) % 1000) / 1000;
  }
  const feeds = {[s.inputNames[0]]: new ort.Tensor(type, x, dims)};
  for (let i = 0; i < 5; i++) await s.run(feeds);
  const ms = [];
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint();
    await s.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  ms.sort((a, b) => a - b);
  const rss = peakRssKb();
  console.log(JSON.stringify({median_ms: ms[runs >> 1], min_ms: ms[0], p90_ms: ms[Math.floor(runs * 0.9)],
                              peak_rss_kb: rss, meta: meta ? 1 : 0}));
})().catch(e => { console.error(e); process.exit(1); });
