/* The floating-point ceiling of one WebAssembly thread with SIMD128 (no FMA in the wasm that Debian's
 * emscripten 3.1.6 and Node 20 agree on): twelve independent chains of f32x4 multiply then add, enough to
 * hide both latencies, so the loop runs at the engine's vector issue rate. bench/bench_web.sh compiles it
 * with emcc and compares each model's achieved GFLOP/s with it. Prints the best of 5 runs in GFLOP/s. */
#include <emscripten.h>
#include <stdio.h>
#include <wasm_simd128.h>

#define CHAINS 12

static volatile float sink; /* keeps the chains' results alive */

static double peak_gflops(int iters) {
    v128_t acc[CHAINS];
    const v128_t m = wasm_f32x4_splat(0.999999f), c = wasm_f32x4_splat(1e-7f);
    for (int i = 0; i < CHAINS; i++) acc[i] = wasm_f32x4_splat((float)i);
    double t0 = emscripten_get_now();
    for (int k = 0; k < iters; k++)
        for (int i = 0; i < CHAINS; i++) acc[i] = wasm_f32x4_add(wasm_f32x4_mul(acc[i], m), c);
    double ms = emscripten_get_now() - t0;
    for (int i = 0; i < CHAINS; i++) sink += wasm_f32x4_extract_lane(acc[i], 0);
    return (double)iters * CHAINS * 8 / (ms * 1e6);
}

int main(void) {
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double g = peak_gflops(20000000);
        if (g > best) best = g;
    }
    printf("%.1f\n", best);
    return 0;
}
