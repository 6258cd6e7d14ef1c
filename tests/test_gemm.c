/* ot_sgemm / ot_dgemm (and the portable kernels and the prepacked-B product, in every build, with each
 * micro-kernel the CPU runs: generic C, AVX2, AVX-512) against a naive double-precision reference: many shapes around
 * the blocking sizes, all four transpose combinations, alpha/beta, padded leading dimensions, and beta == 0 over a
 * NaN-filled C (which must not leak). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/ops/gemm.h"
#include "runtime/session.h"
#include "runtime/threadpool.h"
#include "testutil.h"

static double worst;
static const ot_kernel_ctx *run_ctx; /* the products under test run on it (NULL: one thread) */

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

typedef otter_status (*sgemm_fn)(const ot_kernel_ctx *, bool, bool, int64_t, int64_t, int64_t, float, const float *,
                                 int64_t, const float *, int64_t, float, float *, int64_t);
typedef otter_status (*dgemm_fn)(const ot_kernel_ctx *, bool, bool, int64_t, int64_t, int64_t, double, const double *,
                                 int64_t, const double *, int64_t, double, double *, int64_t);

static void check_one(sgemm_fn sf, dgemm_fn df, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      float beta, int64_t pad) {
    unsigned seed = (unsigned)(M * 7919 + N * 104729 + K * 31 + ta * 2 + tb);
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    size_t na = (size_t)(ar * lda) + 1, nb = (size_t)(br * ldb) + 1, nc = (size_t)(M * ldc) + 1;
    float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B), *C = malloc(nc * sizeof *C);
    double *Ad = malloc(na * sizeof *Ad), *Bd = malloc(nb * sizeof *Bd), *Cd = malloc(nc * sizeof *Cd);
    double *R = malloc(nc * sizeof *R);
    for (size_t i = 0; i < na; i++) Ad[i] = A[i] = frand(&seed);
    for (size_t i = 0; i < nb; i++) Bd[i] = B[i] = frand(&seed);
    for (size_t i = 0; i < nc; i++) Cd[i] = C[i] = beta == 0.0f ? NAN : frand(&seed);
    float *C0 = malloc(nc * sizeof *C0);
    memcpy(C0, C, nc * sizeof *C0);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
            R[i * ldc + j] = alpha * s + (beta == 0.0f ? 0.0 : beta * (double)C[i * ldc + j]);
        }
    CHECK_OK(sf(run_ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
    CHECK_OK(df(NULL, ta, tb, M, N, K, alpha, Ad, lda, Bd, ldb, beta, Cd, ldc));
    double err = 0, errd = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double r = R[i * ldc + j];
            err = tu_worse(err, fabs(C[i * ldc + j] - r) / (1.0 + fabs(r)));
            errd = tu_worse(errd, fabs(Cd[i * ldc + j] - r) / (1.0 + fabs(r)));
        }
    /* padding between rows must be untouched */
    for (int64_t i = 0; i < M && pad; i++)
        CHECK(memcmp(&C[i * ldc + N], &C0[i * ldc + N], (size_t)pad * sizeof(float)) == 0);
    double tol = 1e-5 * (1.0 + sqrt((double)K));
    if (!(err <= tol) || !(errd <= 1e-12 * (1.0 + K))) {
        fprintf(stderr, "mismatch: ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g pad=%lld: err %g (double %g)\n",
                ta, tb, (long long)M, (long long)N, (long long)K, alpha, beta, (long long)pad, err, errd);
    }
    CHECK(err <= tol);
    CHECK(errd <= 1e-12 * (1.0 + K));
    worst = tu_worse(worst, err);
    free(A), free(B), free(C), free(Ad), free(Bd), free(Cd), free(R), free(C0);
}

static void sweep(const char *name, sgemm_fn sf, dgemm_fn df) {
    static const int64_t sizes[] = {1, 2, 3, 5, 6, 7, 16, 17, 31, 121, 130};
    static const int64_t ks[] = {0, 1, 4, 7, 33, 255, 257, 300};
    int n0 = tu_checks;
    worst = 0;
    for (int t = 0; t < 4; t++)
        for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
            for (size_t b = 0; b < sizeof sizes / sizeof *sizes; b += 2)
                for (size_t c = 0; c < sizeof ks / sizeof *ks; c += 1 + (a + b) % 3) {
                    float alpha = (a + c) % 3 == 0 ? 1.0f : -0.75f;
                    float beta = (b + c) % 3 == 0 ? 0.0f : ((b + c) % 3 == 1 ? 1.0f : 0.5f);
                    check_one(sf, df, t & 1, t >> 1, sizes[a], sizes[(b + t) % 11], ks[c], alpha, beta,
                              (a + b + c) % 2 ? 3 : 0);
                }
    /* larger than one block in every dimension */
    for (int t = 0; t < 4; t++) check_one(sf, df, t & 1, t >> 1, 1930, 70, 260, 1.0f, 0.0f, 1);
    for (int t = 0; t < 4; t++) check_one(sf, df, t & 1, t >> 1, 37, 4100, 20, 0.5f, 1.0f, 0);
    printf("%s: %d checks over shapes up to 1930x4100x300, all transposes; worst relative error %.3g\n", name,
           tu_checks - n0, worst);
}

static void speed(const char *name, sgemm_fn sf, int64_t n) {
    float *A = calloc((size_t)(n * n), sizeof *A), *B = calloc((size_t)(n * n), sizeof *B);
    float *C = calloc((size_t)(n * n), sizeof *C);
    unsigned s = 1;
    for (int64_t i = 0; i < n * n; i++) A[i] = frand(&s), B[i] = frand(&s);
    struct timespec t0, t1;
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK_OK(sf(NULL, false, false, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (dt < best) best = dt;
    }
    printf("%s: %lldx%lldx%lld sgemm, 1 thread: %.1f GFLOP/s (not a timed test)\n", name, (long long)n, (long long)n,
           (long long)n, 2.0 * (double)n * (double)n * (double)n / best * 1e-9);
    free(A), free(B), free(C);
}

/* ot_sgemm_pack_b + ot_sgemm_prepacked (B packed once, as Gemm does for constant weights) in the
 * sgemm signature, so that sweep checks it on every shape. */
static otter_status prepacked(const ot_kernel_ctx *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                              const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                              int64_t ldc) {
    float *p = malloc(ot_sgemm_packed_b_size(K, N) * sizeof(float) + 1);
    if (!p) return OTTER_ERR_NOMEM;
    ot_sgemm_pack_b(ctx, tb, K, N, B, ldb, p);
    otter_status s = ot_sgemm_prepacked(ctx, ta, M, N, K, alpha, A, lda, p, beta, C, ldc, NULL, NULL);
    free(p);
    return s;
}

/* ot_sgemm_fused: C = A B with the epilogue (row bias, sum input Z, activation, gate) on each tile
 * as it is stored, bitwise as the product followed by conv_epilogue's pass, (c + row_bias) + z, the
 * activation and then ReluGrad's gate (G > 0 ? c : +0, G with NaN, -0 and +0) over all of C. The reference product
 * takes B transposed, so it packs B where the fused one may read B's rows where they are stored: the two must agree bit
 * for bit too (beyond 4 rows, where both are the blocked product). Shapes around the tiles (6 x 32), more than one K
 * slice, a few rows (no packing), K 0. */
static void fused_epilogue(void) {
    static const int64_t ms[] = {1, 4, 5, 6, 13, 24, 32, 130};
    static const int64_t ns[] = {1, 16, 31, 64, 100, 256};
    static const int64_t ks[] = {0, 3, 144, 300};
    static const ot_fused_act acts[] = {{OT_FUSED_NONE, 0, 0},       {OT_FUSED_RELU, 0, 0},
                                        {OT_FUSED_CLIP, 0.0f, 6.0f}, {OT_FUSED_CLIP, 0.5f, -0.5f},
                                        {OT_FUSED_HARD_SWISH, 0, 0}, {OT_FUSED_SWISH, 0, 0}};
    int n0 = tu_checks;
    const bool openblas = strcmp(ot_gemm_backend(), "openblas") == 0;
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
            for (size_t c = 0; c < sizeof ks / sizeof *ks; c++) {
                const int64_t M = ms[a], N = ns[b], K = ks[c], ld = N + (int64_t)(a % 2) * 3;
                const size_t mn = (size_t)(M * ld);
                float *A = malloc((size_t)(M * K + 1) * sizeof *A), *B = malloc((size_t)(K * ld + 1) * sizeof *B);
                float *Bt = malloc((size_t)(K * N + 1) * sizeof *Bt), *bias = malloc((size_t)M * sizeof *bias);
                float *Z = malloc(mn * sizeof *Z), *C1 = malloc(mn * sizeof *C1), *C2 = malloc(mn * sizeof *C2);
                float *G = malloc(mn * sizeof *G);
                unsigned seed = (unsigned)(M * 31 + N * 7 + K);
                for (int64_t i = 0; i < M * K; i++) A[i] = frand(&seed);
                for (int64_t k = 0; k < K; k++)
                    for (int64_t j = 0; j < ld; j++) B[k * ld + j] = frand(&seed);
                for (int64_t k = 0; k < K; k++)
                    for (int64_t j = 0; j < N; j++) Bt[j * K + k] = B[k * ld + j];
                for (int64_t i = 0; i < M; i++) bias[i] = frand(&seed);
                /* some NaN and -0 (Relu makes them 0, Clip keeps them) */
                for (size_t i = 0; i < mn; i++) Z[i] = i % 17 == 3 ? NAN : frand(&seed), C1[i] = C2[i] = NAN;
                for (size_t i = 0; i < mn; i++)
                    G[i] = i % 13 == 5 ? NAN : i % 11 == 1 ? -0.0f : i % 7 == 2 ? 0.0f : frand(&seed);
                const int v = (int)(a + b + c);
                const ot_sgemm_epilogue epi = {.row_bias = v % 3 ? bias : NULL,
                                               .z = v % 2 ? Z : NULL,
                                               .ldz = ld,
                                               .act = &acts[v % 6],
                                               .gate = v % 4 < 2 ? G : NULL,
                                               .ldg = ld};
                /* the product as the fused call makes it: OpenBLAS's where it does the products (its sums'
                 * order is its own), else otter's kernel (a few rows, M <= 4, sum B's columns as dot products
                 * when it is transposed) */
                if (openblas)
                    CHECK_OK(ot_sgemm(run_ctx, false, false, M, N, K, 1.0f, A, K, B, ld, 0.0f, C1, ld));
                else if (M > 4)
                    CHECK_OK(ot_sgemm_portable(NULL, false, true, M, N, K, 1.0f, A, K, Bt, K, 0.0f, C1, ld));
                else
                    CHECK_OK(ot_sgemm_portable(NULL, false, false, M, N, K, 1.0f, A, K, B, ld, 0.0f, C1, ld));
                for (int64_t i = 0; i < M; i++) {
                    float *row = C1 + i * ld;
                    for (int64_t j = 0; j < N; j++) {
                        if (epi.row_bias || epi.z) row[j] = row[j] + (epi.row_bias ? bias[i] : 0.0f);
                        if (epi.z) row[j] = row[j] + Z[i * ld + j];
                    }
                    ot_fused_act_apply(epi.act, row, N);
                    for (int64_t j = 0; epi.gate && j < N; j++) row[j] = G[i * ld + j] > 0.0f ? row[j] : 0.0f;
                }
                CHECK_OK(ot_sgemm_fused(run_ctx, false, false, M, N, K, 1.0f, A, K, B, ld, C2, ld, &epi));
                bool same = true;
                for (int64_t i = 0; i < M; i++) same &= memcmp(C1 + i * ld, C2 + i * ld, (size_t)N * sizeof *C1) == 0;
                if (!same)
                    fprintf(stderr, "fused epilogue differs: M=%lld N=%lld K=%lld\n", (long long)M, (long long)N,
                            (long long)K);
                CHECK(same);
                free(A), free(B), free(Bt), free(bias), free(Z), free(C1), free(C2), free(G);
            }
    printf("fused epilogue (%s): %d checks\n", run_ctx ? "threads" : "1 thread", tu_checks - n0);
}

/* The prepacked product on 2 and 3 threads splits rows (or, for a few rows, columns) differently
 * from one thread: within tolerance of the reference, and bitwise equal to one thread (each
 * element is summed in the same order whatever the split). Also ot_sgemm's one-row products,
 * split over columns. */
static void threads(void) {
    static const int64_t ms[] = {1, 5, 6, 7, 11, 12, 13, 23, 24, 25, 36, 37, 64, 65, 121, 240, 241};
    static const int64_t ns[] = {1, 15, 16, 17, 33, 200};
    static const int64_t ks[] = {1, 196, 257, 784};
    for (int t = 2; t <= 3; t++) {
        ot_pool *pool;
        CHECK_OK(ot_pool_create(&pool, t));
        otter_session sess = {.pool = pool, .n_threads = t};
        ot_kernel_ctx ctx = {.n_threads = t, .runtime = &sess};
        int n0 = tu_checks;
        worst = 0;
        for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
            for (size_t b = 0; b < sizeof ns / sizeof *ns; b++) {
                int64_t M = ms[a], N = ns[b], K = ks[(a + b) % 4];
                run_ctx = &ctx;
                check_one(prepacked, ot_dgemm_portable, (a + b) % 2, b % 2, M, N, K, 1.0f, b % 3 ? 0.5f : 0.0f, a % 2);
                float *A = malloc((size_t)(M * K) * sizeof *A), *B = malloc((size_t)(K * N) * sizeof *B);
                float *C1 = malloc((size_t)(M * N) * sizeof *C1), *Ct = malloc((size_t)(M * N) * sizeof *Ct);
                unsigned seed = (unsigned)(M + 7 * N + 13 * K);
                for (int64_t i = 0; i < M * K; i++) A[i] = frand(&seed);
                for (int64_t i = 0; i < K * N; i++) B[i] = frand(&seed);
                CHECK_OK(prepacked(NULL, false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C1, N));
                CHECK_OK(prepacked(&ctx, false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, Ct, N));
                CHECK(memcmp(C1, Ct, (size_t)(M * N) * sizeof *C1) == 0);
                free(A), free(B), free(C1), free(Ct);
            }
        /* the epilogue (bias row, activation) bitwise as C holding copies of the bias, then the
         * activation over the whole result; with no product (K 0, alpha 0) too */
        static const ot_fused_act acts[] = {
            {OT_FUSED_RELU, 0, 0}, {OT_FUSED_GELU_TANH, 0, 0}, {OT_FUSED_CLIP, -0.5f, 0.25f}};
        for (size_t a = 0; a < sizeof ms / sizeof *ms; a += 2)
            for (size_t b = 0; b < sizeof ns / sizeof *ns; b++) {
                int64_t M = ms[a], N = ns[b], K = b == 1 ? 0 : ks[(a + b) % 4];
                float alpha = b == 2 ? 0.0f : a % 4 ? 1.0f : 0.75f, beta = a % 8 ? 1.0f : -0.5f;
                float *A = malloc((size_t)(M * K + 1) * sizeof *A), *B = malloc((size_t)(K * N + 1) * sizeof *B);
                float *bias = malloc((size_t)N * sizeof *bias), *p = malloc(ot_sgemm_packed_b_size(K, N) * 4 + 4);
                float *C1 = malloc((size_t)(M * N) * sizeof *C1), *Ct = malloc((size_t)(M * N) * sizeof *Ct);
                unsigned seed = (unsigned)(3 * M + N + K);
                for (int64_t i = 0; i < M * K; i++) A[i] = frand(&seed);
                for (int64_t i = 0; i < K * N; i++) B[i] = frand(&seed);
                for (int64_t j = 0; j < N; j++) bias[j] = frand(&seed);
                ot_sgemm_pack_b(NULL, false, K, N, B, N, p);
                for (int64_t i = 0; i < M * N; i++) C1[i] = bias[i % N], Ct[i] = NAN;
                const ot_fused_act *act = &acts[(a / 2 + b) % 3];
                CHECK_OK(ot_sgemm_prepacked(NULL, false, M, N, K, alpha, A, K, p, beta, C1, N, NULL, NULL));
                ot_fused_act_apply(act, C1, M * N);
                CHECK_OK(ot_sgemm_prepacked(&ctx, false, M, N, K, alpha, A, K, p, beta, Ct, N, bias, act));
                CHECK(memcmp(C1, Ct, (size_t)(M * N) * sizeof *C1) == 0);
                free(A), free(B), free(bias), free(p), free(C1), free(Ct);
            }
        /* one row (OpenBLAS builds: sgemv's columns split over the threads) */
        for (int tr = 0; tr < 4; tr++)
            for (int64_t n = 1; n <= 600; n = n * 3 + 1)
                check_one(ot_sgemm, ot_dgemm, tr & 1, tr >> 1, 1, n, n % 2 ? 2048 : 300, 0.5f, n % 3 ? 0.0f : 1.0f,
                          n % 2);
        /* more than one row block (MSUP rows) and column panel (NC columns) */
        check_one(prepacked, ot_dgemm_portable, false, true, 1930, 40, 70, 1.0f, 1.0f, 0);
        check_one(prepacked, ot_dgemm_portable, true, false, 13, 4100, 30, 1.0f, 0.0f, 2);
        fused_epilogue();
        run_ctx = NULL;
        printf("prepacked B on %d threads: %d checks; worst relative error %.3g\n", t, tu_checks - n0, worst);
        ot_pool_free(pool);
    }
}

/* A C of more than a million floats has sg_block visit its tiles in the other order (row tiles
 * outer): each element is still one FMA chain over k in the same K slices, so the product equals,
 * bit for bit, the same rows computed in pieces small enough for the usual order. Shapes with edge
 * tiles (rows not a multiple of 12, columns of 32), two K slices, A read in place and packed (alpha),
 * B packed from either layout, and the gate epilogue. */
static void rows_outer(void) {
    const int64_t M = 1234, N = 1000, K = 300, piece = 240;
    float *A = malloc((size_t)(M * K) * sizeof *A), *B = malloc((size_t)(K * N) * sizeof *B);
    float *G = malloc((size_t)(M * N) * sizeof *G), *C1 = malloc((size_t)(M * N) * sizeof *C1);
    float *C2 = malloc((size_t)(M * N) * sizeof *C2);
    unsigned seed = 77;
    for (int64_t i = 0; i < M * K; i++) A[i] = frand(&seed);
    for (int64_t i = 0; i < K * N; i++) B[i] = frand(&seed);
    for (int64_t i = 0; i < M * N; i++) G[i] = frand(&seed);
    int n0 = tu_checks;
    for (int v = 0; v < 4; v++) {
        const bool tb = v & 1, gated = v & 2;
        const float alpha = v == 1 ? 0.5f : 1.0f;
        for (int64_t i = 0; i < M * N; i++) C1[i] = C2[i] = NAN;
        for (int64_t i0 = 0; i0 < M; i0 += piece) {
            const int64_t m = M - i0 < piece ? M - i0 : piece;
            const ot_sgemm_epilogue e = {.gate = G + i0 * N, .ldg = N};
            CHECK_OK(ot_sgemm_fused(run_ctx, false, tb, m, N, K, alpha, A + i0 * K, K, B, tb ? K : N, C1 + i0 * N, N,
                                    gated ? &e : NULL));
        }
        const ot_sgemm_epilogue e = {.gate = G, .ldg = N};
        CHECK_OK(ot_sgemm_fused(run_ctx, false, tb, M, N, K, alpha, A, K, B, tb ? K : N, C2, N, gated ? &e : NULL));
        CHECK(memcmp(C1, C2, (size_t)(M * N) * sizeof *C1) == 0);
    }
    printf("rows outer (%s): %d checks\n", run_ctx ? "threads" : "1 thread", tu_checks - n0);
    free(A), free(B), free(G), free(C1), free(C2);
}

int main(void) {
    printf("gemm backend: %s\n", ot_gemm_backend());
    sweep("ot_sgemm/ot_dgemm", ot_sgemm, ot_dgemm);
    /* the portable kernel with each micro-kernel this CPU runs (other CPUs run the lesser ones) */
    static const char *const isa_names[] = {"generic", "avx2", "avx512"};
    for (int isa = OT_GEMM_GENERIC; isa <= (int)ot_gemm_isa_best(); isa++) {
        CHECK(ot_gemm_use_isa((ot_gemm_isa)isa));
        printf("micro-kernel %s\n", isa_names[isa]);
        sweep("portable", ot_sgemm_portable, ot_dgemm_portable);
        sweep("prepacked B", prepacked, ot_dgemm_portable);
        fused_epilogue();
        rows_outer();
        threads();
    }
    CHECK(ot_gemm_use_isa(ot_gemm_isa_best()));
    CHECK(!ot_gemm_use_isa((ot_gemm_isa)(OT_GEMM_AVX512 + 1)));
    speed("ot_sgemm", ot_sgemm, 512);
    speed("portable", ot_sgemm_portable, 512);
    return tu_finish("test_gemm");
}
