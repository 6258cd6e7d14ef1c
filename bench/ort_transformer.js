// ONNX Runtime (onnxruntime-node) latency of the transformer benchmark model: the peer of
// bench_runtime for bench_transformer.sh. The one input is float [batch, seq, dim] as the model
// declares it (static shapes). Prints one JSON line like bench_runtime's.
//   node ort_transformer.js NPM_PREFIX MODEL THREADS [RUNS]
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
const [npm, model, threadsS, runsS] = process.argv.slice(2);
const ort = require(path.resolve(npm, 'node_modules/onnxruntime-node'));
(async () => {
  const threads = +threadsS, runs = +(runsS || 100);
  const s = await ort.InferenceSession.create(model, {intraOpNumThreads: threads, interOpNumThreads: 1,
                                                      executionMode: 'sequential', graphOptimizationLevel: 'all'});
  const dims = s.inputMetadata[0].shape;
  const n = dims.reduce((a, b) => a * b, 1), x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = ((i * 7919) % 1000) / 1000;
  const feeds = {[s.inputNames[0]]: new ort.Tensor('float32', x, dims)};
  for (let i = 0; i < 3; i++) await s.run(feeds);
  const ms = [];
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint();
    await s.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  ms.sort((a, b) => a - b);
  console.log(JSON.stringify({median_ms: ms[runs >> 1], min_ms: ms[0], p90_ms: ms[Math.floor(runs * 0.9)],
                              peak_rss_kb: peakRssKb()}));
})().catch(e => { console.error(e); process.exit(1); });
