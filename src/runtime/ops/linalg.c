/* Linear algebra kernels: Gemm, MatMul, MatMulInteger, QLinearMatMul, Einsum.
 *
 * float and double products go through ot_sgemm / ot_dgemm; float16 / bfloat16 are widened to
 * float; integer types use a plain triple loop. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/gemm.h"

static const char *in_name(const ot_kernel_ctx *ctx, size_t i) { return ot_ctx_input_name(ctx, i); }

static const char *shape_s(char *buf, size_t n, const otter_tensor *t) {
    return ot_shape_str(buf, n, t->rank, t->dims);
}

/* ---- MatMul shape planning (numpy matmul semantics) -------------------------------------------- */

typedef struct mm_plan {
    int64_t M, N, K;
    int batch_rank;
    int64_t batch[OTTER_MAX_RANK];
    int64_t a_bstride[OTTER_MAX_RANK], b_bstride[OTTER_MAX_RANK]; /* matrix-index strides, 0 when broadcast */
    int64_t n_batch;
    int out_rank;
    int64_t out_dims[OTTER_MAX_RANK];
} mm_plan;

static otter_status mm_make_plan(const ot_kernel_ctx *ctx, const otter_tensor *a, const otter_tensor *b, mm_plan *p) {
    char s1[128], s2[128];
    if (a->rank < 1 || b->rank < 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "inputs must have rank >= 1 (got '%s' %s and '%s' %s)",
                            in_name(ctx, 0), shape_s(s1, sizeof s1, a), in_name(ctx, 1), shape_s(s2, sizeof s2, b));
    int64_t ad[OTTER_MAX_RANK + 1], bd[OTTER_MAX_RANK + 1];
    int ar = a->rank, br = b->rank;
    bool a1 = ar == 1, b1 = br == 1;
    if (a1) {
        ad[0] = 1, ad[1] = a->dims[0], ar = 2;
    } else {
        memcpy(ad, a->dims, sizeof(int64_t) * (size_t)ar);
    }
    if (b1) {
        bd[0] = b->dims[0], bd[1] = 1, br = 2;
    } else {
        memcpy(bd, b->dims, sizeof(int64_t) * (size_t)br);
    }
    p->M = ad[ar - 2], p->K = ad[ar - 1], p->N = bd[br - 1];
    if (bd[br - 2] != p->K)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "inner dimensions differ: '%s' %s times '%s' %s", in_name(ctx, 0),
                            shape_s(s1, sizeof s1, a), in_name(ctx, 1), shape_s(s2, sizeof s2, b));
    int nba = ar - 2, nbb = br - 2;
    p->batch_rank = nba > nbb ? nba : nbb;
    int64_t sa = 1, sb = 1;
    p->n_batch = 1;
    for (int i = p->batch_rank - 1; i >= 0; i--) {
        int ia = i - (p->batch_rank - nba), ib = i - (p->batch_rank - nbb);
        int64_t da = ia >= 0 ? ad[ia] : 1, db = ib >= 0 ? bd[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "batch dimensions don't broadcast: '%s' %s and '%s' %s",
                                in_name(ctx, 0), shape_s(s1, sizeof s1, a), in_name(ctx, 1), shape_s(s2, sizeof s2, b));
        p->batch[i] = da > db ? da : db;
        if (da == 0 || db == 0) p->batch[i] = 0;
        p->a_bstride[i] = da == 1 ? 0 : sa;
        p->b_bstride[i] = db == 1 ? 0 : sb;
        sa *= da, sb *= db;
        p->n_batch *= p->batch[i];
    }
    p->out_rank = 0;
    for (int i = 0; i < p->batch_rank; i++) p->out_dims[p->out_rank++] = p->batch[i];
    if (!a1) p->out_dims[p->out_rank++] = p->M;
    if (!b1) p->out_dims[p->out_rank++] = p->N;
    return OTTER_OK;
}

/* Matrix indices of A and B for flat batch index t. */
static void mm_offsets(const mm_plan *p, int64_t t, int64_t *ia, int64_t *ib) {
    int64_t a = 0, b = 0;
    for (int i = p->batch_rank - 1; i >= 0; i--) {
        int64_t d = p->batch[i], x = t % d;
        t /= d;
        a += x * p->a_bstride[i], b += x * p->b_bstride[i];
    }
    *ia = a, *ib = b;
}

/* True when every batch of A is distinct and B is shared: fold the batch into M. */
static bool mm_fold_a(const mm_plan *p) {
    int64_t s = 1;
    for (int i = p->batch_rank - 1; i >= 0; i--) {
        if (p->b_bstride[i] != 0 && p->batch[i] != 1) return false;
        if (p->batch[i] != 1 && p->a_bstride[i] != s) return false;
        s *= p->batch[i];
    }
    return true;
}

#define MM_INT_LOOP(T, ACC)                                                                                            \
    static void mm_int_##T(const mm_plan *p, const T *A, const T *B, T *Y) {                                           \
        for (int64_t t = 0; t < p->n_batch; t++) {                                                                     \
            int64_t ia, ib;                                                                                            \
            mm_offsets(p, t, &ia, &ib);                                                                                \
            const T *a = A + ia * p->M * p->K, *b = B + ib * p->K * p->N;                                              \
            T *y = Y + t * p->M * p->N;                                                                                \
            for (int64_t i = 0; i < p->M; i++)                                                                         \
                for (int64_t j = 0; j < p->N; j++) {                                                                   \
                    ACC s = 0;                                                                                         \
                    for (int64_t k = 0; k < p->K; k++) s += (ACC)a[i * p->K + k] * (ACC)b[k * p->N + j];               \
                    y[i * p->N + j] = (T)s;                                                                            \
                }                                                                                                      \
        }                                                                                                              \
    }
MM_INT_LOOP(int32_t, int64_t)
MM_INT_LOOP(int64_t, int64_t)
MM_INT_LOOP(uint32_t, uint64_t)
MM_INT_LOOP(uint64_t, uint64_t)

/* ---- fused epilogues (com.otter FusedMatMul / FusedGemm from runtime/fuse.c) ------------------- */

static bool is_fused(const ot_kernel_ctx *ctx) { return ctx->node->domain && !strcmp(ctx->node->domain, "com.otter"); }

/* y = act(y) in place: any activation on float outputs; on others only Relu (x > 0 ? x : 0, like the
 * Relu kernel: NaN becomes 0), the one fuse.c fuses where the output may not be float. */
static otter_status apply_act(ot_kernel_ctx *ctx, const ot_fused_act *act, otter_tensor *y) {
    int64_t n = otter_tensor_numel(y);
    if (act->kind == OT_FUSED_NONE) return OTTER_OK;
    if (y->dtype == OTTER_DTYPE_FLOAT) {
        ot_fused_act_apply(act, y->data, n);
    } else if (act->kind != OT_FUSED_RELU) {
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "fused activation '%s' on a %s output is not supported",
                            ot_ctx_attr_string_or(ctx, "activation", ""), otter_dtype_name(y->dtype));
    } else if (y->dtype == OTTER_DTYPE_DOUBLE) {
        double *v = y->data;
        for (int64_t i = 0; i < n; i++) v[i] = v[i] > 0.0 ? v[i] : 0.0;
    } else {
        for (int64_t i = 0; i < n; i++)
            if (!(ot_get_f64(y->data, y->dtype, i) > 0.0)) ot_set_f64(y->data, y->dtype, i, 0.0);
    }
    return OTTER_OK;
}

static otter_status matmul_plain(ot_kernel_ctx *ctx, const otter_tensor *bias, const ot_fused_act *act,
                                 bool *epilogue_done);
static otter_status packed_weights(ot_kernel_ctx *ctx, bool tb, int64_t K, int64_t N, const float *B, int64_t ldb,
                                   const float **packed);

/* MatMul, then + bias (input 2, float, 1 or N elements along the last axis) and the activation. */
otter_status ot_kernel_matmul(ot_kernel_ctx *ctx) {
    ot_fused_act act;
    OT_TRY(ot_fused_act_read(ctx, &act));
    const otter_tensor *bias = is_fused(ctx) ? ot_ctx_input(ctx, 2) : NULL;
    bool done = false;
    OT_TRY(matmul_plain(ctx, bias, &act, &done));
    otter_tensor *y = ctx->outputs[0];
    if (done) return OTTER_OK;
    if (bias) {
        int64_t nb = otter_tensor_numel(bias), n = y->rank ? y->dims[y->rank - 1] : 1;
        if (y->dtype != OTTER_DTYPE_FLOAT || bias->dtype != OTTER_DTYPE_FLOAT || y->rank == 0 || (nb != 1 && nb != n))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "fused bias '%s' (%lld elements, %s) does not fit the %s output", in_name(ctx, 2),
                                (long long)nb, otter_dtype_name(bias->dtype), otter_dtype_name(y->dtype));
        float *v = y->data;
        const float *bv = bias->data;
        int64_t rows = n ? otter_tensor_numel(y) / n : 0;
        for (int64_t r = 0; r < rows; r++) {
            float *vr = v + r * n;
            for (int64_t j = 0; j < n; j++) vr[j] += bv[nb == 1 ? 0 : j];
            ot_fused_act_apply(&act, vr, n);
        }
        return OTTER_OK;
    }
    return apply_act(ctx, &act, y);
}

/* A batch of float products (attention's Q K^T and P V per head, FusedMatMul's batches): one
 * product per task, the tasks on the threads when there are enough of them, else each product over
 * the threads. */
typedef struct batch_job {
    const ot_product_batch *p;
    _Atomic otter_status status; /* OTTER_OK, or the first failure (packing memory) */
} batch_job;

/* Product t of the batch, on ctx's threads (NULL: this one). */
static otter_status batch_product(const ot_kernel_ctx *ctx, const ot_product_batch *p, int64_t t) {
    int64_t ao, bo;
    p->offsets(p->arg, t, &ao, &bo);
    const int64_t yo = t * p->M * p->N;
    if (!p->gate)
        return ot_sgemm(ctx, p->ta, p->tb, p->M, p->N, p->K, p->alpha, p->A + ao, p->lda, p->B + bo, p->ldb, 0.0f,
                        p->Y + yo, p->N);
    const ot_sgemm_epilogue epi = {.gate = p->gate + yo, .ldg = p->N};
    return ot_sgemm_fused(ctx, p->ta, p->tb, p->M, p->N, p->K, p->alpha, p->A + ao, p->lda, p->B + bo, p->ldb,
                          p->Y + yo, p->N, &epi);
}

static void batch_range(void *arg, int64_t t0, int64_t t1) {
    batch_job *j = arg;
    for (int64_t t = t0; t < t1; t++) {
        otter_status s = batch_product(NULL, j->p, t);
        if (s != OTTER_OK) atomic_store(&j->status, s);
    }
}

otter_status ot_sgemm_batch(const ot_kernel_ctx *ctx, const ot_product_batch *p) {
    batch_job j = {p, OTTER_OK};
    if (ctx && ctx->n_threads > 1 && p->n_batch >= 2 * ctx->n_threads) {
        ot_parallel_for(ctx, p->n_batch, 1 + 65536 / (p->M * p->N * p->K + 1), batch_range, &j);
        return atomic_load(&j.status);
    }
    otter_status s = OTTER_OK;
    for (int64_t t = 0; s == OTTER_OK && t < p->n_batch; t++) s = batch_product(ctx, p, t);
    return s;
}

/* Float offsets of batch t's A and B in a MatMul plan. */
static void mm_float_offsets(const void *arg, int64_t t, int64_t *ao, int64_t *bo) {
    const mm_plan *p = arg;
    mm_offsets(p, t, ao, bo);
    *ao *= p->M * p->K, *bo *= p->K * p->N;
}

static otter_status matmul_batches(const ot_kernel_ctx *ctx, const mm_plan *p, const float *A, const float *B,
                                   float *Y) {
    const ot_product_batch b = {.n_batch = p->n_batch,
                                .M = p->M,
                                .N = p->N,
                                .K = p->K,
                                .lda = p->K,
                                .ldb = p->N,
                                .alpha = 1.0f,
                                .A = A,
                                .B = B,
                                .Y = Y,
                                .offsets = mm_float_offsets,
                                .arg = p};
    return ot_sgemm_batch(ctx, &b);
}

/* With constant weights, a float bias of N elements and the activation (when given) run inside the
 * product, each block while in cache and on the product's threads: then *epilogue_done. */
static otter_status matmul_plain(ot_kernel_ctx *ctx, const otter_tensor *bias, const ot_fused_act *act,
                                 bool *epilogue_done) {
    const otter_tensor *a = ot_ctx_input(ctx, 0), *b = ot_ctx_input(ctx, 1);
    if (!a || !b) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs inputs A and B");
    if (a->dtype != b->dtype)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' is %s but '%s' is %s", in_name(ctx, 0),
                            otter_dtype_name(a->dtype), in_name(ctx, 1), otter_dtype_name(b->dtype));
    mm_plan p;
    OT_TRY(mm_make_plan(ctx, a, b, &p));
    otter_tensor *y = ot_ctx_output(ctx, 0, a->dtype, p.out_rank, p.out_dims);
    if (!y) return ctx->output_status;
    int64_t mn = p.M * p.N;
    if (p.n_batch * mn == 0) return OTTER_OK;
    switch (a->dtype) {
    case OTTER_DTYPE_DOUBLE: {
        const double *A = a->data, *B = b->data;
        double *Y = y->data;
        for (int64_t t = 0; t < p.n_batch; t++) {
            int64_t ia, ib;
            mm_offsets(&p, t, &ia, &ib);
            OT_TRY(ot_dgemm(ctx, false, false, p.M, p.N, p.K, 1.0, A + ia * p.M * p.K, p.K, B + ib * p.K * p.N, p.N,
                            0.0, Y + t * mn, p.N));
        }
        return OTTER_OK;
    }
    case OTTER_DTYPE_FLOAT:
    case OTTER_DTYPE_FLOAT16:
    case OTTER_DTYPE_BFLOAT16: {
        const float *A, *B;
        float *ta = NULL, *tb = NULL, *ty = NULL, *Y;
        otter_status s = ot_ctx_input_f32(ctx, 0, a, &A, &ta);
        if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 1, b, &B, &tb);
        if (s == OTTER_OK && a->dtype != OTTER_DTYPE_FLOAT) {
            ty = ot_malloc((size_t)(p.n_batch * mn) * sizeof(float));
            if (!ty) s = OT_NOMEM();
        }
        Y = ty ? ty : y->data;
        const bool constant_b = ot_ctx_input_constant(ctx, 1),
                   epilogue = !ty && (!bias || (bias->dtype == OTTER_DTYPE_FLOAT && otter_tensor_numel(bias) == p.N));
        if (s == OTTER_OK && mm_fold_a(&p) && b->rank == 2 && b->dtype == OTTER_DTYPE_FLOAT &&
            (constant_b || (epilogue && (bias || act->kind != OT_FUSED_NONE)))) {
            /* constant weights (a transformer's projections): packed once, as Gemm's; weights that
             * change (training) with a fused bias or activation: packed on this run, so that these
             * run as each block is stored instead of in a pass over Y (the encoder's feed-forward
             * and attention projections: 4096 x 1024 floats a pass, 4-5 ms a layer) */
            const float *packed = NULL;
            if (constant_b) {
                s = packed_weights(ctx, false, p.K, p.N, B, p.N, &packed);
            } else if ((packed = ot_ctx_scratch(ctx, ot_sgemm_packed_b_size(p.K, p.N) * sizeof(float)))) {
                ot_sgemm_pack_b(ctx, false, p.K, p.N, B, p.N, (float *)packed);
            } else {
                s = OTTER_ERR_NOMEM;
            }
            if (s == OTTER_OK)
                s = ot_sgemm_prepacked(ctx, false, p.M * p.n_batch, p.N, p.K, 1.0f, A, p.K, packed,
                                       bias && epilogue ? 1.0f : 0.0f, Y, p.N, epilogue && bias ? bias->data : NULL,
                                       epilogue ? act : NULL);
            *epilogue_done = s == OTTER_OK && epilogue;
        } else if (s == OTTER_OK && mm_fold_a(&p)) {
            int64_t ia, ib;
            mm_offsets(&p, 0, &ia, &ib);
            s = ot_sgemm(ctx, false, false, p.M * p.n_batch, p.N, p.K, 1.0f, A, p.K, B + ib * p.K * p.N, p.N, 0.0f, Y,
                         p.N);
        } else if (s == OTTER_OK) {
            s = matmul_batches(ctx, &p, A, B, Y);
        }
        if (s == OTTER_OK && ty) ot_convert(y->data, y->dtype, ty, OTTER_DTYPE_FLOAT, p.n_batch * mn);
        ot_free(ta), ot_free(tb), ot_free(ty);
        return s;
    }
    case OTTER_DTYPE_INT32:
        mm_int_int32_t(&p, a->data, b->data, y->data);
        return OTTER_OK;
    case OTTER_DTYPE_INT64:
        mm_int_int64_t(&p, a->data, b->data, y->data);
        return OTTER_OK;
    case OTTER_DTYPE_UINT32:
        mm_int_uint32_t(&p, a->data, b->data, y->data);
        return OTTER_OK;
    case OTTER_DTYPE_UINT64:
        mm_int_uint64_t(&p, a->data, b->data, y->data);
        return OTTER_OK;
    default:
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input '%s': dtype %s not supported", in_name(ctx, 0),
                            otter_dtype_name(a->dtype));
    }
}

/* ---- Gemm ---------------------------------------------------------------------------------- */

static otter_status gemm_plain(ot_kernel_ctx *ctx, ot_fused_act *act);

otter_status ot_kernel_gemm(ot_kernel_ctx *ctx) {
    ot_fused_act act;
    OT_TRY(ot_fused_act_read(ctx, &act));
    OT_TRY(gemm_plain(ctx, &act));
    return apply_act(ctx, &act, ctx->outputs[0]);
}

/* Constant weights packed once into the node's cache for ot_sgemm_prepacked (no per-call packing
 * of B, which for a batch of 64 rows costs as much as the product's loads). */
static otter_status packed_weights(ot_kernel_ctx *ctx, bool tb, int64_t K, int64_t N, const float *B, int64_t ldb,
                                   const float **packed) {
    void **cache = ot_ctx_cache(ctx, ot_free);
    if (!*cache) {
        float *p = ot_malloc(ot_sgemm_packed_b_size(K, N) * sizeof(float) + 1);
        if (!p) return OT_NOMEM();
        ot_sgemm_pack_b(ctx, tb, K, N, B, ldb, p);
        *cache = p;
    }
    *packed = *cache;
    return OTTER_OK;
}

/* act: applied by the product when it can (then set to none), else by the caller. */
static otter_status gemm_plain(ot_kernel_ctx *ctx, ot_fused_act *act) {
    const otter_tensor *a = ot_ctx_input(ctx, 0), *b = ot_ctx_input(ctx, 1), *c = ot_ctx_input(ctx, 2);
    char s1[128], s2[128];
    if (!a || !b) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs inputs A and B");
    if (a->rank != 2 || b->rank != 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "A and B must be 2-D (got '%s' %s and '%s' %s)", in_name(ctx, 0),
                            shape_s(s1, sizeof s1, a), in_name(ctx, 1), shape_s(s2, sizeof s2, b));
    if (a->dtype != b->dtype || (c && c->dtype != a->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "inputs differ in dtype (A %s, B %s%s%s)",
                            otter_dtype_name(a->dtype), otter_dtype_name(b->dtype), c ? ", C " : "",
                            c ? otter_dtype_name(c->dtype) : "");
    int64_t ta, tb;
    float alpha, beta;
    OT_TRY(ot_ctx_attr_int(ctx, "transA", &ta));
    OT_TRY(ot_ctx_attr_int(ctx, "transB", &tb));
    OT_TRY(ot_ctx_attr_float(ctx, "alpha", &alpha));
    OT_TRY(ot_ctx_attr_float(ctx, "beta", &beta));
    int64_t M = ta ? a->dims[1] : a->dims[0], K = ta ? a->dims[0] : a->dims[1];
    int64_t Kb = tb ? b->dims[1] : b->dims[0], N = tb ? b->dims[0] : b->dims[1];
    if (K != Kb)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "inner dimensions differ: '%s' %s%s times '%s' %s%s",
                            in_name(ctx, 0), shape_s(s1, sizeof s1, a), ta ? " (transposed)" : "", in_name(ctx, 1),
                            shape_s(s2, sizeof s2, b), tb ? " (transposed)" : "");
    int64_t cr = 1, cc = 1;
    if (c) {
        if (c->rank > 2 ||
            (c->rank == 2 && ((c->dims[0] != 1 && c->dims[0] != M) || (c->dims[1] != 1 && c->dims[1] != N))) ||
            (c->rank == 1 && c->dims[0] != 1 && c->dims[0] != N))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input C '%s' %s does not broadcast to [%lld,%lld]",
                                in_name(ctx, 2), shape_s(s1, sizeof s1, c), (long long)M, (long long)N);
        if (c->rank == 2) cr = c->dims[0], cc = c->dims[1];
        if (c->rank == 1) cc = c->dims[0];
    }
    int64_t yd[2] = {M, N};
    otter_tensor *y = ot_ctx_output(ctx, 0, a->dtype, 2, yd);
    if (!y) return ctx->output_status;
    if (M * N == 0) return OTTER_OK;
    bool use_c = c && beta != 0.0 && otter_tensor_numel(c) > 0;
    if (a->dtype == OTTER_DTYPE_DOUBLE) {
        double *Y = y->data;
        if (use_c) {
            const double *C = c->data;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) Y[i * N + j] = C[(cr == 1 ? 0 : i) * cc + (cc == 1 ? 0 : j)];
        }
        return ot_dgemm(ctx, ta, tb, M, N, K, alpha, a->data, a->dims[1], b->data, b->dims[1], use_c ? beta : 0.0, Y,
                        N);
    }
    if (a->dtype != OTTER_DTYPE_FLOAT && a->dtype != OTTER_DTYPE_FLOAT16 && a->dtype != OTTER_DTYPE_BFLOAT16) {
        /* integer Gemm (opset >= 9): plain loops in double */
        if (!otter_dtype_size(a->dtype) || a->dtype == OTTER_DTYPE_STRING || a->dtype == OTTER_DTYPE_BOOL ||
            a->dtype == OTTER_DTYPE_COMPLEX64 || a->dtype == OTTER_DTYPE_COMPLEX128)
            return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input '%s': dtype %s not supported", in_name(ctx, 0),
                                otter_dtype_name(a->dtype));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += ot_get_f64(a->data, a->dtype, ta ? k * M + i : i * K + k) *
                         ot_get_f64(b->data, b->dtype, tb ? j * K + k : k * N + j);
                s *= alpha;
                if (use_c) s += beta * ot_get_f64(c->data, c->dtype, (cr == 1 ? 0 : i) * cc + (cc == 1 ? 0 : j));
                ot_set_f64(y->data, y->dtype, i * N + j, s);
            }
        return OTTER_OK;
    }
    const float *A, *B, *C = NULL;
    float *tA = NULL, *tB = NULL, *tC = NULL, *tY = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, a, &A, &tA);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 1, b, &B, &tB);
    if (s == OTTER_OK && use_c) s = ot_ctx_input_f32(ctx, 2, c, &C, &tC);
    if (s == OTTER_OK && a->dtype != OTTER_DTYPE_FLOAT && !(tY = ot_malloc((size_t)(M * N) * sizeof(float))))
        s = OT_NOMEM();
    const float *packed = NULL;
    if (s == OTTER_OK && M > 4 && b->dtype == OTTER_DTYPE_FLOAT && ot_ctx_input_constant(ctx, 1))
        s = packed_weights(ctx, tb, K, N, B, b->dims[1], &packed);
    /* a bias row goes to the packed product, which writes it with the product's first K slice */
    const float *bias = packed && use_c && cr == 1 && cc == N ? C : NULL;
    if (s == OTTER_OK) {
        float *Y = tY ? tY : y->data;
        if (use_c && !bias) {
            for (int64_t i = 0; i < M; i++) {
                float *yr = Y + i * N;
                const float *cr_ = C + (cr == 1 ? 0 : i) * cc;
                if (cc == 1)
                    for (int64_t j = 0; j < N; j++) yr[j] = cr_[0];
                else
                    memcpy(yr, cr_, (size_t)N * sizeof(float));
            }
        }
        if (packed) {
            s = ot_sgemm_prepacked(ctx, ta, M, N, K, (float)alpha, A, a->dims[1], packed, use_c ? (float)beta : 0.0f, Y,
                                   N, bias, act);
            act->kind = OT_FUSED_NONE;
        } else
            s = ot_sgemm(ctx, ta, tb, M, N, K, (float)alpha, A, a->dims[1], B, b->dims[1], use_c ? (float)beta : 0.0f,
                         Y, N);
        if (s == OTTER_OK && tY) ot_convert(y->data, y->dtype, tY, OTTER_DTYPE_FLOAT, M * N);
    }
    ot_free(tA), ot_free(tB), ot_free(tC), ot_free(tY);
    return s;
}

/* ---- MatMulInteger / QLinearMatMul ----------------------------------------------------------- */

/* Zero point / scale values: a scalar or one per row (A) / column (B). */
static otter_status qparam(const ot_kernel_ctx *ctx, size_t idx, int64_t expect, const char *what,
                           const otter_tensor **t) {
    *t = ot_ctx_input(ctx, idx);
    if (!*t) return OTTER_OK;
    int64_t n = otter_tensor_numel(*t);
    if (n != 1 && n != expect)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "%s '%s' has %lld elements, expected 1 or %lld", what,
                            in_name(ctx, idx), (long long)n, (long long)expect);
    return OTTER_OK;
}

static double qget(const otter_tensor *t, int64_t i, double def) {
    if (!t) return def;
    return ot_get_f64(t->data, t->dtype, otter_tensor_numel(t) == 1 ? 0 : i);
}

/* acc[t][i][j] = sum_k (a - azp_i) * (b - bzp_j) in int32 arithmetic. */
static void int_matmul(const mm_plan *p, const otter_tensor *a, const otter_tensor *b, const otter_tensor *azp,
                       const otter_tensor *bzp, int32_t *acc) {
    for (int64_t t = 0; t < p->n_batch; t++) {
        int64_t ia, ib;
        mm_offsets(p, t, &ia, &ib);
        for (int64_t i = 0; i < p->M; i++) {
            int32_t za = (int32_t)qget(azp, i, 0);
            for (int64_t j = 0; j < p->N; j++) {
                int32_t zb = (int32_t)qget(bzp, j, 0), s = 0;
                for (int64_t k = 0; k < p->K; k++) {
                    int32_t av = (int32_t)ot_get_i64(a->data, a->dtype, ia * p->M * p->K + i * p->K + k);
                    int32_t bv = (int32_t)ot_get_i64(b->data, b->dtype, ib * p->K * p->N + k * p->N + j);
                    s += (av - za) * (bv - zb);
                }
                acc[t * p->M * p->N + i * p->N + j] = s;
            }
        }
    }
}

static bool is_8bit(otter_dtype t) { return t == OTTER_DTYPE_UINT8 || t == OTTER_DTYPE_INT8; }

otter_status ot_kernel_matmulinteger(ot_kernel_ctx *ctx) {
    const otter_tensor *a = ot_ctx_input(ctx, 0), *b = ot_ctx_input(ctx, 1), *azp, *bzp;
    if (!a || !b) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs inputs A and B");
    if (!is_8bit(a->dtype) || !is_8bit(b->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "A and B must be int8 or uint8 (got %s, %s)",
                            otter_dtype_name(a->dtype), otter_dtype_name(b->dtype));
    mm_plan p;
    OT_TRY(mm_make_plan(ctx, a, b, &p));
    OT_TRY(qparam(ctx, 2, p.M, "a_zero_point", &azp));
    OT_TRY(qparam(ctx, 3, p.N, "b_zero_point", &bzp));
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_INT32, p.out_rank, p.out_dims);
    if (!y) return ctx->output_status;
    int_matmul(&p, a, b, azp, bzp, y->data);
    return OTTER_OK;
}

otter_status ot_kernel_qlinearmatmul(ot_kernel_ctx *ctx) {
    const otter_tensor *a = ot_ctx_input(ctx, 0), *b = ot_ctx_input(ctx, 3);
    if (!a || !b) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs inputs a and b");
    for (size_t i = 0; i < 8; i++)
        if (!ot_ctx_input(ctx, i)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is missing", i);
    if (!is_8bit(a->dtype) || !is_8bit(b->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "a and b must be int8 or uint8 (got %s, %s)",
                            otter_dtype_name(a->dtype), otter_dtype_name(b->dtype));
    mm_plan p;
    OT_TRY(mm_make_plan(ctx, a, b, &p));
    const otter_tensor *as, *azp, *bs, *bzp, *ys, *yzp;
    OT_TRY(qparam(ctx, 1, p.M, "a_scale", &as));
    OT_TRY(qparam(ctx, 2, p.M, "a_zero_point", &azp));
    OT_TRY(qparam(ctx, 4, p.N, "b_scale", &bs));
    OT_TRY(qparam(ctx, 5, p.N, "b_zero_point", &bzp));
    OT_TRY(qparam(ctx, 6, 1, "y_scale", &ys));
    OT_TRY(qparam(ctx, 7, 1, "y_zero_point", &yzp));
    otter_tensor *y = ot_ctx_output(ctx, 0, yzp->dtype, p.out_rank, p.out_dims);
    if (!y) return ctx->output_status;
    int64_t n = p.n_batch * p.M * p.N;
    int32_t *acc = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!acc) return OT_NOMEM();
    int_matmul(&p, a, b, azp, bzp, acc);
    double lo = yzp->dtype == OTTER_DTYPE_UINT8 ? 0 : -128, hi = yzp->dtype == OTTER_DTYPE_UINT8 ? 255 : 127;
    double yscale = qget(ys, 0, 1), yz = qget(yzp, 0, 0);
    for (int64_t t = 0; t < n; t++) {
        int64_t i = (t / p.N) % p.M, j = t % p.N;
        double v = nearbyint((double)acc[t] * qget(as, i, 1) * qget(bs, j, 1) / yscale) + yz;
        v = v < lo ? lo : v > hi ? hi : v;
        ot_set_f64(y->data, y->dtype, t, v);
    }
    ot_free(acc);
    return OTTER_OK;
}

/* ---- Einsum ---------------------------------------------------------------------------------- */

/* Labels: 'a'-'z' -> 0..25, 'A'-'Z' -> 26..51, ellipsis dims -> 52.. (right-aligned). */
#define EIN_LETTERS 52
#define EIN_MAXL    (EIN_LETTERS + OTTER_MAX_RANK)

typedef struct ein_term {
    int n; /* labels in the term after expanding the ellipsis */
    int labels[OTTER_MAX_RANK];
    bool has_ellipsis;
} ein_term;

static int ein_letter(char c) {
    if (c >= 'a' && c <= 'z') return c - 'a';
    if (c >= 'A' && c <= 'Z') return c - 'A' + 26;
    return -1;
}

/* Parse one term ("ab...c"); ell_rank is the number of dims "..." stands for (input: rank - letters;
 * output: the broadcast ellipsis rank). */
static otter_status ein_parse_term(const ot_kernel_ctx *ctx, const char *s, size_t len, int rank_or_neg,
                                   int ell_rank_out, ein_term *t, int *ell_rank) {
    int letters = 0;
    bool ell = false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') continue;
        if (s[i] == '.') {
            if (ell || i + 2 >= len + 0 || s[i + 1] != '.' || s[i + 2] != '.')
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "equation: bad ellipsis in term '%.*s'", (int)len, s);
            ell = true;
            i += 2;
            continue;
        }
        if (ein_letter(s[i]) < 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "equation: bad character '%c' in term '%.*s'", s[i], (int)len,
                                s);
        letters++;
    }
    int er = 0;
    if (rank_or_neg >= 0) {
        er = rank_or_neg - letters;
        if (er < 0 || (!ell && er != 0))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "equation term '%.*s' does not match an input of rank %d",
                                (int)len, s, rank_or_neg);
    } else {
        er = ell ? ell_rank_out : 0;
    }
    if (letters + er > OTTER_MAX_RANK)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "equation term '%.*s' has too many dimensions", (int)len, s);
    t->n = 0;
    t->has_ellipsis = ell;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') continue;
        if (s[i] == '.') {
            for (int e = 0; e < er; e++) t->labels[t->n++] = EIN_LETTERS + (OTTER_MAX_RANK - er + e);
            i += 2;
            continue;
        }
        t->labels[t->n++] = ein_letter(s[i]);
    }
    if (ell_rank) *ell_rank = er;
    return OTTER_OK;
}

otter_status ot_kernel_einsum(ot_kernel_ctx *ctx) {
    const char *eq;
    OT_TRY(ot_ctx_attr_string(ctx, "equation", &eq));
    size_t n_in = ctx->n_inputs;
    if (n_in == 0 || n_in > 32) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs 1 to 32 inputs");
    otter_dtype dt = OTTER_DTYPE_UNDEFINED;
    for (size_t i = 0; i < n_in; i++) {
        const otter_tensor *x = ot_ctx_input(ctx, i);
        if (!x) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is missing", i);
        if (i == 0) dt = x->dtype;
        if (x->dtype != dt)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' is %s, input 0 is %s", i, in_name(ctx, i),
                                otter_dtype_name(x->dtype), otter_dtype_name(dt));
    }
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
    ein_term terms[32];
    int64_t size[EIN_MAXL];
    int count[EIN_MAXL];
    for (int l = 0; l < EIN_MAXL; l++) size[l] = -1, count[l] = 0;
    int max_ell = 0;
    const char *p = eq;
    for (size_t i = 0; i < n_in; i++) {
        const char *e = memchr(p, ',', (size_t)(eq + lhs_len - p));
        size_t len = e ? (size_t)(e - p) : (size_t)(eq + lhs_len - p);
        if ((i + 1 < n_in) != (e != NULL))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "equation '%s' has a different number of terms than inputs (%zu)", eq, n_in);
        const otter_tensor *x = ot_ctx_input(ctx, i);
        int er;
        OT_TRY(ein_parse_term(ctx, p, len, x->rank, 0, &terms[i], &er));
        if (er > max_ell) max_ell = er;
        for (int d = 0; d < terms[i].n; d++) {
            int l = terms[i].labels[d];
            int64_t sz = x->dims[d];
            count[l]++;
            if (l >= EIN_LETTERS) { /* ellipsis dims broadcast */
                if (size[l] < 0 || size[l] == 1)
                    size[l] = sz;
                else if (sz != 1 && sz != size[l])
                    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s': ellipsis dimensions don't broadcast",
                                        i, in_name(ctx, i));
            } else if (size[l] < 0) {
                size[l] = sz;
            } else if (size[l] != sz) {
                if (size[l] == 1)
                    size[l] = sz;
                else if (sz != 1)
                    return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                        "input %zu '%s': label '%c' has size %lld here but %lld elsewhere", i,
                                        in_name(ctx, i), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[l],
                                        (long long)sz, (long long)size[l]);
            }
        }
        p += len + 1;
    }
    ein_term out;
    if (arrow) {
        OT_TRY(ein_parse_term(ctx, arrow + 2, strlen(arrow + 2), -1, max_ell, &out, NULL));
        for (int d = 0; d < out.n; d++) {
            if (size[out.labels[d]] < 0)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "equation '%s': output label not in any input", eq);
            for (int e = 0; e < d; e++)
                if (out.labels[e] == out.labels[d])
                    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "equation '%s': output label repeated", eq);
        }
    } else {
        out.n = 0;
        for (int e = 0; e < max_ell; e++) out.labels[out.n++] = EIN_LETTERS + OTTER_MAX_RANK - max_ell + e;
        for (int l = 0; l < EIN_LETTERS; l++)
            if (count[l] == 1) {
                if (out.n >= OTTER_MAX_RANK) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "too many output dims");
                out.labels[out.n++] = l;
            }
    }
    /* Loop labels: output labels, then the summed ones. */
    int loop[EIN_MAXL], n_loop = 0;
    bool in_out[EIN_MAXL] = {false};
    for (int d = 0; d < out.n; d++) loop[n_loop++] = out.labels[d], in_out[out.labels[d]] = true;
    int n_out_loop = n_loop;
    for (int l = 0; l < EIN_MAXL; l++)
        if (size[l] >= 0 && !in_out[l]) loop[n_loop++] = l;
    int64_t odims[OTTER_MAX_RANK];
    for (int d = 0; d < out.n; d++) odims[d] = size[out.labels[d]];
    otter_tensor *y = ot_ctx_output(ctx, 0, dt, out.n, odims);
    if (!y) return ctx->output_status;
    /* Inputs as double; strides per loop label (summed over repeats: diagonals; 0 when broadcast). */
    double *xd[32] = {0};
    int64_t(*strides)[EIN_MAXL] = ot_calloc(n_in, sizeof *strides);
    otter_status s = strides ? OTTER_OK : OT_NOMEM();
    for (size_t i = 0; s == OTTER_OK && i < n_in; i++) {
        const otter_tensor *x = ot_ctx_input(ctx, i);
        int64_t n = otter_tensor_numel(x);
        xd[i] = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
        if (!xd[i]) {
            s = OT_NOMEM();
            break;
        }
        if (!ot_convert(xd[i], OTTER_DTYPE_DOUBLE, x->data, x->dtype, n)) {
            s = ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input '%s': dtype %s not supported", in_name(ctx, i),
                             otter_dtype_name(x->dtype));
            break;
        }
        int64_t st = 1;
        for (int d = terms[i].n - 1; d >= 0; d--) {
            int l = terms[i].labels[d];
            int k = 0;
            while (loop[k] != l) k++;
            if (x->dims[d] != 1 || size[l] == 1) strides[i][k] += st;
            st *= x->dims[d];
        }
    }
    int64_t ny = otter_tensor_numel(y);
    double *yd = NULL;
    if (s == OTTER_OK && !(yd = ot_malloc((size_t)(ny > 0 ? ny : 1) * sizeof(double)))) s = OT_NOMEM();
    if (s == OTTER_OK) {
        int64_t inner = 1;
        bool empty = false;
        for (int k = n_out_loop; k < n_loop; k++) inner *= size[loop[k]], empty |= size[loop[k]] == 0;
        int64_t idx[EIN_MAXL] = {0};
        for (int64_t o = 0; o < ny; o++) {
            /* decode output index */
            int64_t r = o, base[32] = {0};
            for (int k = n_out_loop - 1; k >= 0; k--) {
                idx[k] = r % size[loop[k]];
                r /= size[loop[k]];
            }
            for (size_t i = 0; i < n_in; i++)
                for (int k = 0; k < n_out_loop; k++) base[i] += idx[k] * strides[i][k];
            double acc = 0;
            if (!empty) {
                for (int k = n_out_loop; k < n_loop; k++) idx[k] = 0;
                int64_t off[32];
                for (size_t i = 0; i < n_in; i++) off[i] = base[i];
                for (int64_t q = 0; q < inner; q++) {
                    double prod = 1;
                    for (size_t i = 0; i < n_in; i++) prod *= xd[i][off[i]];
                    acc += prod;
                    for (int k = n_loop - 1; k >= n_out_loop; k--) {
                        idx[k]++;
                        for (size_t i = 0; i < n_in; i++) off[i] += strides[i][k];
                        if (idx[k] < size[loop[k]]) break;
                        for (size_t i = 0; i < n_in; i++) off[i] -= strides[i][k] * size[loop[k]];
                        idx[k] = 0;
                    }
                }
            }
            yd[o] = acc;
        }
        ot_convert(y->data, dt, yd, OTTER_DTYPE_DOUBLE, ny);
    }
    for (size_t i = 0; i < n_in; i++) ot_free(xd[i]);
    ot_free(strides);
    ot_free(yd);
    return s;
}
