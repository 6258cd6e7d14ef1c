// otter's browser federated client: joins the rounds of `otter fl serve --web` over the same HTTP API and
// binary messages as `otter fl client` (src/fl/protocol.h), training with the onnxruntime-web training API
// that ort.mjs provides. Settings come from the form or the URL fragment (#token=T&batch=64&epochs=1&lr=0.001
// &shape=784): the fragment never reaches a server, and the token is never logged nor shown.
import * as ort from './ort.mjs';

const HEADER = 64;
const KIND_PARAMS = 1;
const KIND_UPDATE = 2;
const $ = (id) => document.getElementById(id);

// What a test (or a curious user) reads from the console: the state and one entry per round trained.
const status = { state: 'idle', error: null, clientId: null, rounds: [] };
window.otterClient = status;

function log(text) {
  const line = `[${new Date().toLocaleTimeString()}] ${text}\n`;
  $('log').textContent += line;
  $('log').scrollTop = $('log').scrollHeight;
}

function setState(state, text) {
  status.state = state;
  $('status').textContent = text;
  $('status').className = state === 'failed' ? 'failed' : state === 'done' ? 'done' : '';
}

async function request(path, token, init = {}) {
  const r = await fetch(path, { ...init, headers: { Authorization: `Bearer ${token}`, ...(init.headers || {}) } });
  if (!r.ok) throw new Error(`${init.method || 'GET'} ${path}: HTTP ${r.status} ${(await r.text()).trim()}`);
  return r;
}
const bytes = async (path, token) => new Uint8Array(await (await request(path, token)).arrayBuffer());
// "key value" lines, as /register and /round answer.
const fields = (text) => Object.fromEntries(text.trim().split('\n').map((l) => l.split(' ')));

// An IDX file (MNIST): big-endian dims after a 4-byte magic whose last byte is the rank.
function parseIdx(buf, what) {
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  if (buf.length < 4 || dv.getUint16(0) !== 0 || buf[2] !== 0x08) throw new Error(`${what}: not an unsigned-byte IDX file`);
  const rank = buf[3];
  const dims = Array.from({ length: rank }, (_, i) => dv.getUint32(4 + 4 * i));
  const data = buf.subarray(4 + 4 * rank);
  if (data.length !== dims.reduce((a, b) => a * b, 1)) throw new Error(`${what}: ${data.length} bytes for dims [${dims}]`);
  return { dims, data };
}

// Examples [start, end) of an IDX pair as float32 pixels scaled to [0, 1] (as otter's mnist: loader) and int64 labels.
function examples(images, labels, start, end) {
  const size = images.data.length / images.dims[0];
  const x = new Float32Array((end - start) * size);
  for (let i = 0; i < x.length; i++) x[i] = images.data[start * size + i] / 255;
  const y = BigInt64Array.from(labels.data.subarray(start, end), (v) => BigInt(v));
  return { x, y, n: end - start, size };
}

function shuffled(n) {
  const p = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [p[i], p[j]] = [p[j], p[i]];
  }
  return p;
}

// One batch of the examples at perm[from, from + b) as feeds of the training model's two inputs.
function batch(set, perm, from, b, shape, names) {
  const x = new Float32Array(b * set.size);
  const y = new BigInt64Array(b);
  for (let i = 0; i < b; i++) {
    const k = perm[from + i];
    x.set(set.x.subarray(k * set.size, (k + 1) * set.size), i * set.size);
    y[i] = set.y[k];
  }
  return { [names[0]]: new ort.Tensor('float32', x, [b, ...shape]), [names[1]]: new ort.Tensor('int64', y, [b]) };
}

// The index of the largest of each row of a [b, classes] output.
function correct(logits, labels) {
  const classes = logits.data.length / labels.length;
  let hits = 0;
  for (let i = 0; i < labels.length; i++) {
    let best = 0;
    for (let c = 1; c < classes; c++) if (logits.data[i * classes + c] > logits.data[i * classes + best]) best = c;
    hits += BigInt(best) === labels[i];
  }
  return hits;
}

function updateMessage(round, numExamples, loss, values, layoutHash) {
  const buf = new ArrayBuffer(HEADER + 4 * values.length);
  const dv = new DataView(buf);
  new Uint8Array(buf, 0, 4).set([0x4f, 0x54, 0x46, 0x4c]); // "OTFL"
  dv.setUint16(4, 1, true);
  dv.setUint16(6, KIND_UPDATE, true);
  dv.setBigInt64(8, BigInt(round), true);
  dv.setBigInt64(16, BigInt(numExamples), true);
  dv.setFloat64(24, loss, true);
  dv.setBigUint64(32, BigInt(values.length), true);
  dv.setBigUint64(40, layoutHash, true);
  dv.setUint32(48, 1, true); // loss present
  new Float32Array(buf, HEADER).set(values); // little-endian hosts: every browser's wasm target
  return buf;
}

function readParams(buf, round) {
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const magic = String.fromCharCode(...buf.subarray(0, 4));
  if (buf.length < HEADER || magic !== 'OTFL' || dv.getUint16(6, true) !== KIND_PARAMS)
    throw new Error('GET /params: not a params message');
  if (dv.getBigInt64(8, true) !== BigInt(round)) throw new Error(`GET /params: weights for another round than ${round}`);
  const n = Number(dv.getBigUint64(32, true));
  if (buf.length !== HEADER + 4 * n) throw new Error(`GET /params: ${buf.length} bytes for ${n} values`);
  return { n, layoutHash: dv.getBigUint64(40, true), values: buf.subarray(HEADER) };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function loadData(cfg, settings, regToken, clientId) {
  if (settings.source === 'files') {
    const read = async (input, what) => {
      if (!input.files[0]) throw new Error(`pick the ${what} IDX file`);
      return parseIdx(new Uint8Array(await input.files[0].arrayBuffer()), input.files[0].name);
    };
    const images = await read($('images'), 'images'), labels = await read($('labels'), 'labels');
    const n = Math.min(images.dims[0], labels.dims[0]);
    const test = Math.min(1000, Math.floor(n / 10)); // the last tenth (at most 1000) checks accuracy
    return { train: examples(images, labels, 0, n - test), test: examples(images, labels, n - test, n), what: 'local files' };
  }
  const d = cfg.data;
  if (!d || d.format !== 'mnist') throw new Error('the server hands out no data (start it with --web-data mnist:DIR)');
  const [images, labels, timages, tlabels] = await Promise.all(
    [d.train_images, d.train_labels, d.test_images, d.test_labels].map(async (p) => parseIdx(await bytes(p, regToken), p)));
  // Shard (ID - 1) mod shards: consecutive slices of the training split, as the server's shard count cuts it.
  const shard = (clientId - 1) % d.shards, per = Math.floor(images.dims[0] / d.shards);
  return {
    train: examples(images, labels, shard * per, (shard + 1) * per),
    test: examples(timages, tlabels, 0, Math.min(1000, timages.dims[0])),
    what: `MNIST shard ${shard + 1} of ${d.shards} (${per} examples)`,
  };
}

async function trainRound(session, data, settings, round) {
  const names = session.trainingInputNames;
  let lossSum = 0, steps = 0, seen = 0;
  const total = settings.epochs * Math.floor(data.train.n / settings.batch);
  for (let e = 0; e < settings.epochs; e++) {
    const perm = shuffled(data.train.n);
    for (let from = 0; from + settings.batch <= data.train.n; from += settings.batch) {
      const out = await session.runTrainStep(batch(data.train, perm, from, settings.batch, settings.shape, names));
      await session.runOptimizerStep();
      await session.lazyResetGrad();
      lossSum += Number(out[session.trainingOutputNames[0]].data[0]);
      steps++, seen += settings.batch;
      if (steps % 20 === 0 || steps === total) {
        $('progress').value = steps / total;
        await sleep(0); // let the page repaint
      }
    }
  }
  if (!steps) throw new Error(`batch size ${settings.batch} is larger than the ${data.train.n} training examples`);
  // Accuracy of the local model on the test examples, when the eval model outputs the logits after the loss
  // (artifacts made with --additional-output).
  let hits = 0;
  if (session.evalOutputNames.length < 2) return { round, loss: lossSum / steps, examples: seen, accuracy: NaN };
  const evalNames = session.evalInputNames, b = settings.batch;
  const all = Array.from({ length: data.test.n }, (_, i) => i);
  for (let from = 0; from + b <= data.test.n; from += b) {
    const feeds = batch(data.test, all, from, b, settings.shape, evalNames);
    const out = await session.runEvalStep(feeds);
    const logits = out[session.evalOutputNames[1]];
    hits += correct(logits, feeds[evalNames[1]].data);
  }
  const tested = Math.floor(data.test.n / b) * b;
  return { round, loss: lossSum / steps, examples: seen, accuracy: tested ? hits / tested : NaN };
}

async function run(settings) {
  const regToken = settings.token;
  setState('starting', 'loading');
  const cfg = await (await fetch('/web-config')).json();
  const a = cfg.artifacts;
  const [layout, checkpointState, trainModel, evalModel, optimizerModel] = await Promise.all(
    ['/layout', a.checkpointState, a.trainModel, a.evalModel, a.optimizerModel].map((p) => bytes(p, regToken)));
  if (settings.threads) ort.env.wasm.numThreads = settings.threads;
  const session = await ort.TrainingSession.create({ checkpointState, trainModel, evalModel, optimizerModel });
  if (settings.lr > 0) {
    if (!session.setLearningRate) throw new Error('this training API cannot set the learning rate');
    await session.setLearningRate(settings.lr);
  }
  const reg = fields(await (await request('/register', regToken, { method: 'POST', body: layout })).text());
  const token = reg.token;
  status.clientId = Number(reg.client);
  log(`registered as client ${status.clientId}; artifacts loaded`);
  const data = await loadData(cfg, settings, regToken, status.clientId);
  log(`training data: ${data.what}; ${data.test.n} test examples for the local accuracy`);
  let poll = Number(reg.poll_ms) || 200;
  let trained = 0;
  for (;;) {
    const r = fields(await (await request('/round', token)).text());
    poll = Number(r.poll_ms) || poll;
    if (r.done !== undefined) {
      setState('done', `done: the server finished after round ${r.done}`);
      log(`done: ${status.rounds.length} rounds trained here`);
      return;
    }
    const round = Number(r.train);
    if (r.train === undefined || round === trained) {
      setState('waiting', `waiting for round ${Number(r.wait ?? r.train) + 1}`);
      await sleep(poll);
      continue;
    }
    setState('training', `training round ${round}`);
    $('round').textContent = round;
    const params = readParams(await bytes('/params', token), round);
    await session.loadParametersBuffer(params.values, true);
    const res = await trainRound(session, data, settings, round);
    const weights = (await session.getContiguousParameters(true)).data;
    if (weights.length !== params.n) throw new Error(`the session has ${weights.length} parameters, the server ${params.n}`);
    await request('/update', token, {
      method: 'POST',
      headers: { 'Content-Type': 'application/octet-stream' },
      body: updateMessage(round, res.examples, res.loss, weights, params.layoutHash),
    });
    trained = round;
    status.rounds.push(res);
    $('loss').textContent = res.loss.toFixed(4);
    const acc = Number.isNaN(res.accuracy) ? '-' : `${(100 * res.accuracy).toFixed(2)}%`;
    $('accuracy').textContent = acc;
    log(`round ${round}: ${res.examples} examples, train loss ${res.loss.toFixed(4)}, local test accuracy ${acc}; ` +
        'update accepted');
  }
}

function settingsFrom(src) {
  const num = (k, d) => (src[k] !== undefined && src[k] !== '' ? Number(src[k]) : d);
  const s = {
    token: src.token || '',
    batch: num('batch', 64),
    epochs: num('epochs', 1),
    lr: num('lr', 0),
    threads: num('threads', 0),
    shape: String(src.shape || '784').split(',').map(Number),
    source: src.source || 'server',
  };
  if (!s.token) throw new Error('a token is needed');
  if (!(s.batch >= 1 && s.epochs >= 1 && s.lr >= 0 && s.shape.every((d) => d >= 1)))
    throw new Error('batch size, epochs and shape must be positive, the learning rate not negative');
  return s;
}

function start(src) {
  $('start').disabled = true;
  let settings;
  try {
    settings = settingsFrom(src);
  } catch (e) {
    $('start').disabled = false;
    setState('idle', e.message);
    return;
  }
  run(settings).catch((e) => {
    status.error = e.message;
    setState('failed', `failed: ${e.message}`);
    log(`failed: ${e.message}`);
  });
}

$('source').addEventListener('change', () => ($('files').hidden = $('source').value !== 'files'));
$('join').addEventListener('submit', (ev) => {
  ev.preventDefault();
  start(Object.fromEntries(['token', 'batch', 'epochs', 'lr', 'shape', 'source'].map((k) => [k, $(k).value])));
});
// A fragment with a token joins at once; the fragment is dropped from the address bar so the token isn't left there.
const fragment = Object.fromEntries(new URLSearchParams(location.hash.slice(1)));
if (location.hash) history.replaceState(null, '', location.pathname + location.search);
if (fragment.token) start(fragment);
