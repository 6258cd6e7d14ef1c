/* Dense matrix products for the kernels: one sgemm / dgemm entry point.
 *
 *     C[M x N] = alpha * op(A)[M x K] * op(B)[K x N] + beta * C
 *
 * Row-major; op(X) is X or its transpose; lda / ldb / ldc are row strides in elements of the
 * matrices as stored (A is M x K, or K x M when trans_a). beta == 0 never reads C (so C may hold
 * garbage or NaN). Through OpenBLAS when built with OTTER_HAVE_BLAS (its thread count set to
 * ctx->n_threads; one-row sgemm as sgemv on one OpenBLAS thread per column chunk, split with
 * ot_parallel_for), else a portable cache-blocked kernel (AVX2/FMA micro-kernel chosen at run time
 * on x86-64) parallelized with ot_parallel_for. ctx may be NULL: one thread.
 *
 * Don't call these from inside an ot_parallel_for body with a ctx (no nested parallelism): pass
 * NULL there. */
#ifndef OTTER_RUNTIME_OPS_GEMM_H
#define OTTER_RUNTIME_OPS_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "otter/status.h"
#include "runtime/op.h"
#include "runtime/ops/fused_act.h"

/* Fails only with OTTER_ERR_NOMEM (portable kernel's packing buffers). */
otter_status ot_sgemm(const ot_kernel_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                      int64_t ldc);
otter_status ot_dgemm(const ot_kernel_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                      double alpha, const double *A, int64_t lda, const double *B, int64_t ldb, double beta, double *C,
                      int64_t ldc);

/* The portable kernels, always compiled (tests compare them with OpenBLAS builds' results). */
otter_status ot_sgemm_portable(const ot_kernel_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                               float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                               float *C, int64_t ldc);
otter_status ot_dgemm_portable(const ot_kernel_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                               double alpha, const double *A, int64_t lda, const double *B, int64_t ldb, double beta,
                               double *C, int64_t ldc);

/* What a product does to each tile of C after its last K slice, while the tile is in cache:
 *
 *     C[i][j] = act((C[i][j] + row_bias[i]) + z[i][j]), then with gate: gate[i][j] > 0 ? C[i][j] : +0
 *
 * (a convolution's bias per output channel, fused residual sum and activation; the gate is
 * ReluGrad's, its X the gate). row_bias (M floats), z and gate (M x N, rows ldz and ldg apart) may
 * be NULL (with z but no row_bias, 0 is added first, as conv_epilogue did); act may be NULL. z and
 * gate must not be C: C holds partial sums before the last slice. */
typedef struct ot_sgemm_epilogue {
    const float *row_bias, *z, *gate;
    int64_t ldz, ldg;
    const ot_fused_act *act;
} ot_sgemm_epilogue;

/* C[M x N] = alpha op(A) op(B), then epi (may be NULL) on each tile of C while it is in cache
 * (after OpenBLAS's product, as a pass over C's rows): the bits of ot_sgemm with beta 0 followed by
 * the epilogue over C. */
otter_status ot_sgemm_fused(const ot_kernel_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                            int64_t ldc, const ot_sgemm_epilogue *epi);

/* Products with a B that stays the same over many calls (constant weights): pack it once into
 * ot_sgemm_packed_b_size(K, N) floats with ot_sgemm_pack_b (on ctx's threads; ctx may be NULL),
 * then C = alpha op(A) B + beta C with ot_sgemm_prepacked (the portable cache-blocked kernel, with
 * or without OpenBLAS). With bias (N floats), C is not read: C = alpha op(A) B + beta bias in every
 * row (Gemm's bias, rounded as when C holds copies of it). act (may be NULL): then C = act(C), each
 * block while in cache. */
size_t ot_sgemm_packed_b_size(int64_t K, int64_t N);
void ot_sgemm_pack_b(const ot_kernel_ctx *ctx, bool trans_b, int64_t K, int64_t N, const float *B, int64_t ldb,
                     float *packed);
otter_status ot_sgemm_prepacked(const ot_kernel_ctx *ctx, bool trans_a, int64_t M, int64_t N, int64_t K, float alpha,
                                const float *A, int64_t lda, const float *packed_b, float beta, float *C, int64_t ldc,
                                const float *bias, const ot_fused_act *act);

/* C[M x N] = A[M x K] B[K x N] + beta C with operands that are never stored (im2col of images,
 * strided views): the portable kernel packs them through callbacks, called concurrently on the
 * session's threads. pack_a(arg, i0, mr, p0, kc, dst) writes rows [i0, i0 + mr) of A over columns
 * [p0, p0 + kc) as dst[k * OT_SGEMM_MR + i], zero for rows i in [mr, OT_SGEMM_MR); pack_b(arg,
 * j0, nr, p0, kc, dst) writes columns [j0, j0 + nr) of B over rows [p0, p0 + kc) as
 * dst[k * OT_SGEMM_NR + j], zero for j in [nr, OT_SGEMM_NR). A long K may be split over the
 * threads (partial sums added at the end), so the rounding depends on the thread count. */
#define OT_SGEMM_MR 6
#define OT_SGEMM_NR 32
typedef void (*ot_sgemm_pack_fn)(const void *arg, int64_t i0, int64_t n, int64_t p0, int64_t kc, float *dst);
otter_status ot_sgemm_packing(const ot_kernel_ctx *ctx, int64_t M, int64_t N, int64_t K, ot_sgemm_pack_fn pack_a,
                              ot_sgemm_pack_fn pack_b, const void *arg, float beta, float *C, int64_t ldc);

#if defined(__wasm_simd128__)
/* dst[k * OT_SGEMM_MR + i] = alpha * src[i * ld + k] for the OT_SGEMM_MR rows i and the columns k below kc
 * rounded down to a multiple of 4 (SIMD128 4 x 4 transposes; alpha 1 copies); returns that count. */
int64_t ot_sgemm_pack_rows_wasm(const float *src, int64_t ld, int64_t kc, float alpha, float *dst);
#endif

/* The portable kernel's micro-kernels: the best the CPU runs is used; tests choose each in turn
 * (process-wide, between products; false when the CPU lacks it). On WebAssembly, its SIMD128
 * kernel whatever the choice. */
typedef enum ot_gemm_isa { OT_GEMM_GENERIC, OT_GEMM_AVX2, OT_GEMM_AVX512 } ot_gemm_isa;
ot_gemm_isa ot_gemm_isa_best(void);
bool ot_gemm_use_isa(ot_gemm_isa isa);

/* Called as a session is made. OpenBLAS starts its worker threads when it loads, and each spins on
 * sched_yield for about 0.1 s waiting for work (0.13 s of a core on the 2-core machine here): where
 * otter's own kernel does the float products, that was a core taken from the session's threads in
 * its first runs. Stops them once per process; OpenBLAS starts them again if a product needs them. */
void ot_gemm_session_start(void);

/* Which implementation ot_sgemm uses: "openblas", "portable-avx512", "portable-avx2",
 * "portable-simd128" (WebAssembly) or "portable". */
const char *ot_gemm_backend(void);

#endif
