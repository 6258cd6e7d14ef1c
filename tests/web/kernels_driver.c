/* Entry points for tests/web/test_web_kernels.js: the runtime's hot kernels, built once with
 * -msimd128 (the SIMD128 micro-kernel and the loops clang vectorizes) and once without (the
 * portable scalar code), so the test can run both on the same inputs and compare. */
#include <emscripten/emscripten.h>

#include "runtime/ops/gemm.h"
#include "runtime/ops/vec_math.h"
#include "runtime/optim.h"

EMSCRIPTEN_KEEPALIVE const char *wk_gemm_backend(void) { return ot_gemm_backend(); }

/* ot_sgemm without a context (one thread); 0 on success. */
EMSCRIPTEN_KEEPALIVE int wk_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                                  const float *B, int ldb, float beta, float *C, int ldc) {
    return ot_sgemm(NULL, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == OTTER_OK ? 0 : 1;
}

EMSCRIPTEN_KEEPALIVE void wk_softmax_row(float *row, int n) { ot_softmax_row(row, n); }

EMSCRIPTEN_KEEPALIVE void wk_swish(float alpha, const float *x, float *y, int n) {
    ot_vec_activation(OT_VEC_SWISH, alpha, x, NULL, y, n);
}

EMSCRIPTEN_KEEPALIVE void wk_adamw(int mode, float lr, int step, int n, float *w, const float *g, float *m, float *v) {
    ot_adamw_params p;
    ot_adamw_params_default(&p);
    p.adam_mode = mode;
    ot_adamw_update(&p, lr, step, n, w, g, m, v);
}

EMSCRIPTEN_KEEPALIVE void wk_sgd(float lr, int n, float *w, const float *g) { ot_sgd_update(lr, n, w, g); }
