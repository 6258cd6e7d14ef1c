// ONNX Runtime (onnxruntime-node) latency for one model, batch and thread count: the peer of
// bench_runtime. Prints one JSON line like bench_runtime's.
//   node ort_infer.js NPM_PREFIX MODEL BATCH THREADS [RUNS]
const path = require('path');
const [npm, model, batchS, threadsS, runsS] = process.argv.slice(2);
const ort = require(path.resolve(npm, 'node_modules/onnxruntime-node'));
(async () => {
  const batch = +batchS, threads = +threadsS, runs = +(runsS || 100);
  const s = await ort.InferenceSession.create(model, {intraOpNumThreads: threads, interOpNumThreads: 1,
                                                      executionMode: 'sequential', graphOptimizationLevel: 'all'});
  const meta = s.inputMetadata ? s.inputMetadata[0] : null;
  const dims = model.includes('mnist') ? [batch, 784] : [batch, 3, 32, 32];
  const n = dims.reduce((a, b) => a * b, 1), x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = ((i * 7919) % 1000) / 1000;
  const feeds = {[s.inputNames[0]]: new ort.Tensor('float32', x, dims)};
  for (let i = 0; i < 5; i++) await s.run(feeds);
  const ms = [];
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint();
    await s.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  ms.sort((a, b) => a - b);
  const rss = process.resourceUsage().maxRSS;
  console.log(JSON.stringify({median_ms: ms[runs >> 1], min_ms: ms[0], p90_ms: ms[Math.floor(runs * 0.9)],
                              peak_rss_kb: rss, meta: meta ? 1 : 0}));
})().catch(e => { console.error(e); process.exit(1); });
