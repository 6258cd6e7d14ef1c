/* Normalization kernels: BatchNormalization, InstanceNormalization, LayerNormalization, LRN. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/nn_internal.h"

/* ---- BatchNormalization / InstanceNormalization ------------------------------------------------ */

typedef struct bn_args {
    const float *X, *scale, *bias, *mean, *var;
    float *Y;
    int64_t C, sp;
    float eps;
} bn_args;

static void bn_planes(void *arg, int64_t p0, int64_t p1) {
    bn_args *a = arg;
    for (int64_t p = p0; p < p1; p++) {
        int64_t c = p % a->C;
        float k = a->scale[c] / sqrtf(a->var[c] + a->eps), sh = a->bias[c] - a->mean[c] * k;
        const float *x = a->X + p * a->sp;
        float *y = a->Y + p * a->sp;
        for (int64_t i = 0; i < a->sp; i++) y[i] = x[i] * k + sh;
    }
}

otter_status ot_kernel_batchnorm(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0);
    if (!x) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input X is missing");
    if (x->rank < 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' must have rank >= 2", ot_ctx_input_name(ctx, 0));
    int64_t N = x->dims[0], C = x->dims[1], sp = 1;
    for (int i = 2; i < x->rank; i++) sp *= x->dims[i];
    const char *names[4] = {"scale", "B", "input_mean", "input_var"};
    for (size_t i = 1; i <= 4; i++) {
        const otter_tensor *t = ot_ctx_input(ctx, i);
        if (!t) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %s is missing", names[i - 1]);
        if (otter_tensor_numel(t) != C)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %s '%s' has %lld elements, expected C = %lld",
                                names[i - 1], ot_ctx_input_name(ctx, i), (long long)otter_tensor_numel(t),
                                (long long)C);
    }
    int64_t training_mode = 0, is_test = 0;
    if (ctx->opset >= 14) OT_TRY(ot_ctx_attr_int(ctx, "training_mode", &training_mode));
    if (ctx->opset < 7) OT_TRY(ot_ctx_attr_int(ctx, "is_test", &is_test)); /* gone from BatchNormalization-7 */
    bool training = ctx->opset >= 14 ? training_mode != 0 : (ctx->node->n_outputs > 1 && !is_test);
    bn_args a = {.C = C, .sp = sp};
    float momentum;
    OT_TRY(ot_ctx_attr_float(ctx, "epsilon", &a.eps));
    OT_TRY(ot_ctx_attr_float(ctx, "momentum", &momentum));
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    float *tmp[5] = {0}, *ty = NULL, *bm = NULL, *bv = NULL;
    const float *in[5];
    otter_status s = OTTER_OK;
    for (size_t i = 0; s == OTTER_OK && i < 5; i++) s = ot_ctx_input_f32(ctx, i, ot_ctx_input(ctx, i), &in[i], &tmp[i]);
    if (s == OTTER_OK) s = ot_output_f32(y, &a.Y, &ty);
    a.X = in[0], a.scale = in[1], a.bias = in[2], a.mean = in[3], a.var = in[4];
    if (s == OTTER_OK && training) {
        bm = ot_calloc((size_t)C, sizeof(float)), bv = ot_calloc((size_t)C, sizeof(float));
        if (!bm || !bv) s = OT_NOMEM();
        for (int64_t c = 0; s == OTTER_OK && c < C; c++) {
            double sum = 0, sq = 0, cnt = (double)(N * sp);
            for (int64_t n = 0; n < N; n++) {
                const float *xp = in[0] + (n * C + c) * sp;
                for (int64_t i = 0; i < sp; i++) sum += xp[i];
            }
            double mu = cnt > 0 ? sum / cnt : 0;
            for (int64_t n = 0; n < N; n++) {
                const float *xp = in[0] + (n * C + c) * sp;
                for (int64_t i = 0; i < sp; i++) sq += (xp[i] - mu) * (xp[i] - mu);
            }
            bm[c] = (float)mu, bv[c] = (float)(cnt > 0 ? sq / cnt : 0);
        }
        a.mean = bm, a.var = bv;
    }
    if (s == OTTER_OK) ot_parallel_for(ctx, N * C, 1 + 16384 / (sp + 1), bn_planes, &a);
    if (s == OTTER_OK && training) {
        /* outputs 1, 2: running mean / var; (opset < 14) 3, 4: saved mean / var */
        for (size_t o = 1; s == OTTER_OK && o < ctx->node->n_outputs && o < 5; o++) {
            if (ot_str_empty(ctx->node->outputs[o])) continue;
            otter_tensor *t = ot_ctx_output(ctx, o, x->dtype, 1, &C);
            if (!t) {
                s = ctx->output_status;
                break;
            }
            float *v = ot_malloc((size_t)C * sizeof(float));
            if (!v) {
                s = OT_NOMEM();
                break;
            }
            for (int64_t c = 0; c < C; c++) {
                if (o == 1) v[c] = in[3][c] * momentum + bm[c] * (1 - momentum);
                if (o == 2) v[c] = in[4][c] * momentum + bv[c] * (1 - momentum);
                if (o == 3) v[c] = bm[c];
                if (o == 4) v[c] = bv[c];
            }
            ot_convert(t->data, t->dtype, v, OTTER_DTYPE_FLOAT, C);
            ot_free(v);
        }
    }
    if (s == OTTER_OK)
        ot_output_f32_done(y, ty);
    else
        ot_free(ty);
    for (int i = 0; i < 5; i++) ot_free(tmp[i]);
    ot_free(bm), ot_free(bv);
    return s;
}

typedef struct inorm_args {
    const float *X, *scale, *bias;
    float *Y;
    int64_t C, sp;
    float eps;
} inorm_args;

static void inorm_planes(void *arg, int64_t p0, int64_t p1) {
    inorm_args *a = arg;
    for (int64_t p = p0; p < p1; p++) {
        int64_t c = p % a->C;
        const float *x = a->X + p * a->sp;
        float *y = a->Y + p * a->sp;
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < a->sp; i++) sum += x[i];
        double mu = sum / (double)a->sp;
        for (int64_t i = 0; i < a->sp; i++) sq += (x[i] - mu) * (x[i] - mu);
        float k = a->scale[c] / sqrtf((float)(sq / (double)a->sp) + a->eps);
        float sh = a->bias[c] - (float)mu * k;
        for (int64_t i = 0; i < a->sp; i++) y[i] = x[i] * k + sh;
    }
}

otter_status ot_kernel_instancenorm(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *sc = ot_ctx_input(ctx, 1), *b = ot_ctx_input(ctx, 2);
    if (!x || !sc || !b) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs inputs input, scale and B");
    if (x->rank < 3)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' must have rank >= 3", ot_ctx_input_name(ctx, 0));
    int64_t C = x->dims[1], sp = 1;
    for (int i = 2; i < x->rank; i++) sp *= x->dims[i];
    if (otter_tensor_numel(sc) != C || otter_tensor_numel(b) != C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scale '%s' and B '%s' must have C = %lld elements",
                            ot_ctx_input_name(ctx, 1), ot_ctx_input_name(ctx, 2), (long long)C);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    inorm_args a = {.C = C, .sp = sp};
    OT_TRY(ot_ctx_attr_float(ctx, "epsilon", &a.eps));
    float *t0 = NULL, *t1 = NULL, *t2 = NULL, *ty = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, x, &a.X, &t0);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 1, sc, &a.scale, &t1);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 2, b, &a.bias, &t2);
    if (s == OTTER_OK) s = ot_output_f32(y, &a.Y, &ty);
    if (s == OTTER_OK && sp > 0) ot_parallel_for(ctx, x->dims[0] * C, 1 + 8192 / (sp + 1), inorm_planes, &a);
    if (s == OTTER_OK)
        ot_output_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(t0), ot_free(t1), ot_free(t2);
    return s;
}

/* ---- LayerNormalization (opset 17) -------------------------------------------------------------- */

typedef struct lnorm_args {
    const float *X, *scale, *bias;
    const int64_t *sidx, *bidx; /* broadcast index maps over the normalized block (NULL: identity) */
    float *Y, *mean, *inv;
    int64_t inner;
    float eps;
} lnorm_args;

#if defined(__GNUC__) && defined(__x86_64__)
/* One row with scale and bias (if any) over the row itself: mean and variance as two float passes
 * of 8 lanes (relative error ~1e-7 at transformer widths, where the double loop below can't be
 * vectorized), then one pass writing y. */
__attribute__((target("avx2,fma"))) static void lnorm_row_avx2(const lnorm_args *a, int64_t r) {
    const int64_t n = a->inner, n8 = n & ~(int64_t)7;
    const float *x = a->X + r * n;
    float *y = a->Y + r * n;
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i < n8; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + i));
    float lanes[8], sum = 0, sq = 0;
    _mm256_storeu_ps(lanes, acc);
    for (int l = 0; l < 8; l++) sum += lanes[l];
    for (; i < n; i++) sum += x[i];
    const float mu = sum / (float)n;
    const __m256 vmu = _mm256_set1_ps(mu);
    acc = _mm256_setzero_ps();
    for (i = 0; i < n8; i += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vmu);
        acc = _mm256_fmadd_ps(d, d, acc);
    }
    _mm256_storeu_ps(lanes, acc);
    for (int l = 0; l < 8; l++) sq += lanes[l];
    for (; i < n; i++) sq += (x[i] - mu) * (x[i] - mu);
    const float inv = 1.0f / sqrtf(sq / (float)n + a->eps);
    if (a->mean) a->mean[r] = mu;
    if (a->inv) a->inv[r] = inv;
    const __m256 vinv = _mm256_set1_ps(inv);
    for (i = 0; i < n8; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmu), vinv),
                                 _mm256_loadu_ps(a->scale + i));
        if (a->bias) v = _mm256_add_ps(v, _mm256_loadu_ps(a->bias + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++) y[i] = (x[i] - mu) * inv * a->scale[i] + (a->bias ? a->bias[i] : 0.0f);
}

static bool lnorm_has_avx2(void) {
    static atomic_int has = -1;
    int v = atomic_load(&has);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        atomic_store(&has, v);
    }
    return v;
}
#endif

static void lnorm_rows(void *arg, int64_t r0, int64_t r1) {
    lnorm_args *a = arg;
#if defined(__GNUC__) && defined(__x86_64__)
    if (!a->sidx && !a->bidx && lnorm_has_avx2()) {
        for (int64_t r = r0; r < r1; r++) lnorm_row_avx2(a, r);
        return;
    }
#endif
    for (int64_t r = r0; r < r1; r++) {
        const float *x = a->X + r * a->inner;
        float *y = a->Y + r * a->inner;
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < a->inner; i++) sum += x[i];
        double mu = sum / (double)a->inner;
        for (int64_t i = 0; i < a->inner; i++) sq += (x[i] - mu) * (x[i] - mu);
        float inv = 1.0f / sqrtf((float)(sq / (double)a->inner) + a->eps);
        if (a->mean) a->mean[r] = (float)mu;
        if (a->inv) a->inv[r] = inv;
        for (int64_t i = 0; i < a->inner; i++) {
            float v = ((float)(x[i] - mu)) * inv * a->scale[a->sidx ? a->sidx[i] : i];
            if (a->bias) v += a->bias[a->bidx ? a->bidx[i] : i];
            y[i] = v;
        }
    }
}

/* Index map of a tensor broadcast (right-aligned) to the normalized dims; NULL when identity. */
static otter_status bcast_map(const ot_kernel_ctx *ctx, size_t idx, const otter_tensor *t, int nr, const int64_t *nd,
                              int64_t inner, int64_t **map) {
    *map = NULL;
    if (t->rank == nr && otter_tensor_numel(t) == inner) {
        bool same = true;
        for (int i = 0; i < nr; i++) same &= t->dims[i] == nd[i];
        if (same) return OTTER_OK;
    }
    if (t->rank > nr) goto bad;
    for (int i = 0; i < t->rank; i++) {
        int64_t d = t->dims[t->rank - 1 - i];
        if (d != 1 && d != nd[nr - 1 - i]) goto bad;
    }
    *map = ot_malloc((size_t)(inner > 0 ? inner : 1) * sizeof(int64_t));
    if (!*map) return OT_NOMEM();
    for (int64_t e = 0; e < inner; e++) {
        int64_t r = e, off = 0, st = 1;
        for (int i = 0; i < nr; i++) {
            int64_t d = nd[nr - 1 - i], xi = r % d;
            r /= d;
            if (i < t->rank) {
                int64_t td = t->dims[t->rank - 1 - i];
                off += (td == 1 ? 0 : xi) * st;
                st *= td;
            }
        }
        (*map)[e] = off;
    }
    return OTTER_OK;
bad : {
    char b[128];
    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' %s does not broadcast to the normalized shape", idx,
                        ot_ctx_input_name(ctx, idx), ot_shape_str(b, sizeof b, t->rank, t->dims));
}
}

otter_status ot_kernel_layernorm(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *sc = ot_ctx_input(ctx, 1), *b = ot_ctx_input(ctx, 2);
    if (!x || !sc) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs inputs X and Scale");
    int64_t axis, stash_type;
    OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis));
    OT_TRY(ot_ctx_attr_int(ctx, "stash_type", &stash_type));
    lnorm_args a = {.inner = 1};
    OT_TRY(ot_ctx_attr_float(ctx, "epsilon", &a.eps));
    if (!ot_norm_axis(&axis, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for input '%s' of rank %d", (long long)axis,
                            ot_ctx_input_name(ctx, 0), x->rank);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < x->rank; i++) *(i < axis ? &outer : &inner) *= x->dims[i];
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t sd[OTTER_MAX_RANK];
    for (int i = 0; i < x->rank; i++) sd[i] = i < axis ? x->dims[i] : 1;
    otter_tensor *tm = NULL, *ti = NULL;
    otter_dtype st = OTTER_DTYPE_FLOAT;
    if (stash_type != 1) st = x->dtype;
    if (ctx->node->n_outputs > 1 && !ot_str_empty(ctx->node->outputs[1]) &&
        !(tm = ot_ctx_output(ctx, 1, st, x->rank, sd)))
        return ctx->output_status;
    if (ctx->node->n_outputs > 2 && !ot_str_empty(ctx->node->outputs[2]) &&
        !(ti = ot_ctx_output(ctx, 2, st, x->rank, sd)))
        return ctx->output_status;
    a.inner = inner;
    int64_t *smap = NULL, *bmap = NULL;
    float *t0 = NULL, *t1 = NULL, *t2 = NULL, *ty = NULL, *tmean = NULL, *tinv = NULL;
    otter_status s = bcast_map(ctx, 1, sc, x->rank - (int)axis, x->dims + axis, inner, &smap);
    if (s == OTTER_OK && b) s = bcast_map(ctx, 2, b, x->rank - (int)axis, x->dims + axis, inner, &bmap);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 0, x, &a.X, &t0);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 1, sc, &a.scale, &t1);
    if (s == OTTER_OK && b) s = ot_ctx_input_f32(ctx, 2, b, &a.bias, &t2);
    if (s == OTTER_OK) s = ot_output_f32(y, &a.Y, &ty);
    if (s == OTTER_OK && tm) s = ot_output_f32(tm, &a.mean, &tmean);
    if (s == OTTER_OK && ti) s = ot_output_f32(ti, &a.inv, &tinv);
    a.sidx = smap, a.bidx = bmap;
    if (s == OTTER_OK && inner > 0) ot_parallel_for(ctx, outer, 1 + 8192 / (inner + 1), lnorm_rows, &a);
    if (s == OTTER_OK) {
        ot_output_f32_done(y, ty);
        if (tm) ot_output_f32_done(tm, tmean);
        if (ti) ot_output_f32_done(ti, tinv);
    } else {
        ot_free(ty), ot_free(tmean), ot_free(tinv);
    }
    ot_free(t0), ot_free(t1), ot_free(t2), ot_free(smap), ot_free(bmap);
    return s;
}

/* ---- LRN ------------------------------------------------------------------------------------------ */

otter_status ot_kernel_lrn(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0);
    OT_TRY(ot_nn_check_x(ctx, x, 3));
    int64_t size;
    float alpha, beta, bias;
    OT_TRY(ot_ctx_attr_int(ctx, "size", &size));
    if (size < 1) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'size' must be >= 1");
    OT_TRY(ot_ctx_attr_float(ctx, "alpha", &alpha));
    OT_TRY(ot_ctx_attr_float(ctx, "beta", &beta));
    OT_TRY(ot_ctx_attr_float(ctx, "bias", &bias));
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t N = x->dims[0], C = x->dims[1], sp = 1;
    for (int i = 2; i < x->rank; i++) sp *= x->dims[i];
    const float *X;
    float *tx = NULL, *ty = NULL, *Y = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, x, &X, &tx);
    if (s == OTTER_OK) s = ot_output_f32(y, &Y, &ty);
    int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    for (int64_t n = 0; s == OTTER_OK && n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < sp; i++) {
                float sq = 0;
                for (int64_t cc = c - lo; cc <= c + hi; cc++)
                    if (cc >= 0 && cc < C) {
                        float v = X[(n * C + cc) * sp + i];
                        sq += v * v;
                    }
                Y[(n * C + c) * sp + i] = X[(n * C + c) * sp + i] / powf(bias + alpha / (float)size * sq, beta);
            }
    if (s == OTTER_OK)
        ot_output_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(tx);
    return s;
}
