'use strict';
// The runtime's hot kernels built for WebAssembly with SIMD128 against the same C built without it
// (tests/web/kernels_driver.c; tests/web/test_web_kernels.sh builds both and runs this under Node).
//
// sgemm: the SIMD128 micro-kernel does, per element of C, the same mul-then-add chain over k as the
// scalar one (wasm has no FMA), so the two must agree bit for bit; both must also be within
// 1e-5 * sum_k |alpha a b| + 1e-6 * |beta c| of a float64 reference (float32 accumulation error).
// Shapes cover edge tiles (M not a multiple of 6, N not a multiple of 8 or 32), K over the 256-deep
// slices, M over the 120-row blocks, the few-rows path, and all four transpositions.
// Softmax rows, Swish, AdamW (both modes) and SGD run loops that clang vectorizes with -msimd128;
// those are vectorized lane-wise, in IEEE float, so they too must match the scalar build exactly.
const fs = require('fs');
const path = require('path');

const dir = process.argv[2];
if (!dir) {
  console.error('usage: node test_web_kernels.js <dir with kernels_simd.js and kernels_scalar.js>');
  process.exit(2);
}

async function load(name) {
  const factory = require(path.resolve(dir, name + '.js'));
  // Node's global fetch trips the loader's streaming path: hand it the bytes.
  const mod = await factory({wasmBinary: fs.readFileSync(path.resolve(dir, name + '.wasm'))});
  return mod;
}

let seed = 12345;
function rand() {  // xorshift32 in [-1, 1)
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 2147483648 - 1;
}
function randArray(n, scale = 1) {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = rand() * scale;
  return a;
}

// Runs fn(pointers...) on copies of the arrays in mod's memory; returns the arrays read back.
function withArrays(mod, arrays, fn) {
  const ptrs = arrays.map((a) => {
    const p = mod._malloc(Math.max(4, a.length * 4));
    if (!p) throw new Error('malloc failed');
    mod.HEAPF32.set(a, p >> 2);
    return p;
  });
  const ret = fn(...ptrs);
  const out = arrays.map((a, i) => mod.HEAPF32.slice(ptrs[i] >> 2, (ptrs[i] >> 2) + a.length));
  ptrs.forEach((p) => mod._free(p));
  return {ret, out};
}

let failures = 0, checks = 0;
function fail(msg) {
  failures++;
  console.error('FAIL ' + msg);
}
function sameBits(what, x, y) {
  checks++;
  const bx = new Uint32Array(x.buffer, x.byteOffset, x.length);
  const by = new Uint32Array(y.buffer, y.byteOffset, y.length);
  for (let i = 0; i < x.length; i++) {
    if (bx[i] !== by[i]) {
      fail(`${what}: element ${i} differs: simd ${x[i]} scalar ${y[i]}`);
      return;
    }
  }
}

function gemmCase(simd, scalar, ta, tb, M, N, K, alpha, beta) {
  const lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;  // padded strides
  const A = randArray((ta ? K : M) * lda), B = randArray((tb ? N : K) * ldb), C = randArray(M * ldc);
  const what = `sgemm ta=${ta} tb=${tb} M=${M} N=${N} K=${K} alpha=${alpha} beta=${beta}`;
  const run = (mod) => withArrays(mod, [A, B, C], (pa, pb, pc) =>
    mod._wk_sgemm(ta, tb, M, N, K, alpha, pa, lda, pb, ldb, beta, pc, ldc));
  const rs = run(simd), rc = run(scalar);
  if (rs.ret || rc.ret) return fail(`${what}: returned an error`);
  const cs = rs.out[2], cc = rc.out[2];
  sameBits(what, cs, cc);
  checks++;
  for (let i = 0; i < M; i++) {
    for (let j = 0; j < N; j++) {
      let s = 0, mag = 0;
      for (let k = 0; k < K; k++) {
        const a = ta ? A[k * lda + i] : A[i * lda + k], b = tb ? B[j * ldb + k] : B[k * ldb + j];
        s += a * b;
        mag += Math.abs(a * b);
      }
      const c0 = C[i * ldc + j];
      const want = alpha * s + (beta === 0 ? 0 : beta * c0);
      const tol = 1e-5 * Math.abs(alpha) * mag + 1e-6 * Math.abs(beta * c0) + 1e-30;
      if (!(Math.abs(cs[i * ldc + j] - want) <= tol))
        return fail(`${what}: C[${i},${j}] = ${cs[i * ldc + j]}, float64 reference ${want}`);
    }
  }
  // Padding columns between rows of C are never written.
  for (let i = 0; i < M; i++)
    for (let j = N; j < ldc; j++)
      if (cs[i * ldc + j] !== C[i * ldc + j]) return fail(`${what}: wrote padding C[${i},${j}]`);
}

(async () => {
  const simd = await load('kernels_simd'), scalar = await load('kernels_scalar');
  const bs = simd.UTF8ToString(simd._wk_gemm_backend()), bc = scalar.UTF8ToString(scalar._wk_gemm_backend());
  checks++;
  if (bs !== 'portable-simd128' || bc !== 'portable')
    fail(`gemm backends: simd build says '${bs}', scalar build '${bc}'`);

  const shapes = [
    [1, 1, 1], [2, 5, 10], [3, 40, 17], [5, 7, 3], [6, 8, 1], [6, 32, 4], [7, 33, 9], [12, 64, 31],
    [13, 65, 257], [17, 9, 300], [64, 10, 784], [64, 128, 100], [121, 45, 20], [130, 70, 40], [33, 200, 600],
  ];
  for (const [M, N, K] of shapes)
    for (const ta of [0, 1])
      for (const tb of [0, 1])
        gemmCase(simd, scalar, ta, tb, M, N, K, (M + N) % 2 ? 1 : 0.5, (M + K) % 3 === 0 ? 0 : 1.25);

  for (const n of [1, 3, 4, 7, 8, 31, 100, 1001]) {
    const x = randArray(n, 20);
    const run = (mod) => withArrays(mod, [x], (p) => mod._wk_softmax_row(p, n)).out[0];
    sameBits(`softmax n=${n}`, run(simd), run(scalar));
    const sw = (mod) => withArrays(mod, [x, new Float32Array(n)], (px, py) => mod._wk_swish(1.702, px, py, n)).out[1];
    sameBits(`swish n=${n}`, sw(simd), sw(scalar));
    const g = randArray(n), w = randArray(n), m = randArray(n, 0.1), v = randArray(n, 0.01).map(Math.abs);
    for (const mode of [0, 1]) {
      const ad = (mod) => withArrays(mod, [w, g, m, v], (pw, pg, pm, pv) => mod._wk_adamw(mode, 1e-3, 3, n, pw, pg, pm, pv)).out;
      const os = ad(simd), oc = ad(scalar);
      ['w', 'm', 'v'].forEach((name, i) => sameBits(`adamw mode ${mode} ${name} n=${n}`, os[i === 0 ? 0 : i + 1], oc[i === 0 ? 0 : i + 1]));
    }
    const sg = (mod) => withArrays(mod, [w, g], (pw, pg) => mod._wk_sgd(0.05, n, pw, pg)).out[0];
    sameBits(`sgd n=${n}`, sg(simd), sg(scalar));
  }

  console.log(`${checks} checks, ${failures} failures`);
  process.exit(failures ? 1 : 0);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
