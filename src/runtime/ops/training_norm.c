/* Training kernels for normalization: LayerNormalizationGrad, SimplifiedLayerNormalization(+Grad),
 * BatchNormInternal, BatchNormalizationGrad. */
#include <math.h>
#include <string.h>

#include "runtime/ops/kernels.h"
#include "runtime/ops/training_internal.h"

/* ---- LayerNormalizationGrad / SimplifiedLayerNormalization(Grad) --------------------------------- */

/* Split X at axis into outer x inner and check that scale has `inner` elements and the saved
 * statistics `outer` elements (inputs stat0, stat1; 0 to skip). */
static otter_status ln_geometry(const ot_kernel_ctx *ctx, const otter_tensor *x, size_t scale_i, size_t stat0,
                                size_t stat1, int64_t *outer, int64_t *inner) {
    int64_t axis = ot_ctx_attr_int_or(ctx, "axis", -1); /* ONNX Runtime's operator: no ONNX schema */
    if (!ot_norm_axis(&axis, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for X '%s' of rank %d", (long long)axis,
                            ot_ctx_input_name(ctx, 1), x->rank);
    *outer = 1, *inner = 1;
    for (int i = 0; i < x->rank; i++) *(i < axis ? outer : inner) *= x->dims[i];
    const otter_tensor *sc = ot_ctx_input(ctx, scale_i);
    if (!sc || otter_tensor_numel(sc) != *inner)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scale '%s' must have %lld elements (the normalized shape)",
                            ot_ctx_input_name(ctx, scale_i), (long long)*inner);
    size_t st[2] = {stat0, stat1};
    for (int k = 0; k < 2; k++) {
        if (!st[k]) continue;
        const otter_tensor *t = ot_ctx_input(ctx, st[k]);
        if (!t || otter_tensor_numel(t) != *outer)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' must have %lld elements (one per row)", st[k],
                                ot_ctx_input_name(ctx, st[k]), (long long)*outer);
    }
    return OTTER_OK;
}

/* Rows a task of LayerNormalizationGrad: dScale and dBias are summed per block of LN_ROWS rows, then
 * the blocks in order (the same bits on any number of threads). */
enum { LN_ROWS = 32 };

typedef struct ln_grad_job {
    const float *dy, *x, *scale, *mean, *inv; /* mean NULL: simplified (0) */
    float *dx, *ds, *db;                      /* ds / db: per block partial sums, NULL when not wanted */
    int64_t outer, inner;
} ln_grad_job;

/* The rows run four floats a vector (GCC's vector extension: SSE2 on x86-64, NEON on arm64), four vectors of
 * running sums a row, dScale and dBias in dX's pass: in scalar C the kernel was compute-bound (2.5 ms a 4096 x 256
 * call of the encoder_d256 training step, where reading and writing its 12 MB takes about 1). */
static void ln_grad_blocks(void *arg, int64_t b0, int64_t b1) {
    const ln_grad_job *j = arg;
    const int64_t inner = j->inner, vec = inner / 16 * 16, quads = inner / 4 * 4;
    const float *restrict S = j->scale;
    for (int64_t b = b0; b < b1; b++) {
        float *restrict ds = j->ds ? j->ds + b * inner : NULL, *restrict db = j->db ? j->db + b * inner : NULL;
        if (ds) memset(ds, 0, (size_t)inner * sizeof(float));
        if (db) memset(db, 0, (size_t)inner * sizeof(float));
        const int64_t r1 = (b + 1) * LN_ROWS < j->outer ? (b + 1) * LN_ROWS : j->outer;
        for (int64_t r = b * LN_ROWS; r < r1; r++) {
            const float *restrict dy = j->dy + r * inner, *restrict x = j->x + r * inner;
            float *restrict dx = j->dx + r * inner;
            const float mu = j->mean ? j->mean[r] : 0.0f, inv = j->inv[r];
            const ot_v4 vmu = {mu, mu, mu, mu}, vinv = {inv, inv, inv, inv};
            /* sums of g = dY * scale and g * xh, xh = (x - mean) * inv: lane sums in float, then in double */
            ot_v4 sg[4] = {{0}}, sgx[4] = {{0}};
            for (int64_t i = 0; i < vec; i += 16)
                for (int l = 0; l < 4; l++) {
                    const int64_t at = i + 4 * l;
                    const ot_v4 g = ot_v4_load(dy + at) * ot_v4_load(S + at), xh = (ot_v4_load(x + at) - vmu) * vinv;
                    sg[l] += g, sgx[l] += g * xh;
                }
            double tg = 0, tgx = 0;
            for (int l = 0; l < 4; l++)
                for (int e = 0; e < 4; e++) tg += sg[l][e], tgx += sgx[l][e];
            for (int64_t i = vec; i < inner; i++) {
                const float g = dy[i] * S[i], xh = (x[i] - mu) * inv;
                tg += g, tgx += (double)(g * xh);
            }
            const float mg = j->mean ? (float)(tg / (double)inner) : 0.0f, mgx = (float)(tgx / (double)inner);
            const ot_v4 vmg = {mg, mg, mg, mg}, vmgx = {mgx, mgx, mgx, mgx};
            /* dX, and this row's terms of the block's dScale and dBias */
            int64_t i = 0;
            for (; i < quads; i += 4) {
                const ot_v4 d = ot_v4_load(dy + i), xh = (ot_v4_load(x + i) - vmu) * vinv;
                ot_v4_store(dx + i, vinv * (d * ot_v4_load(S + i) - vmg - xh * vmgx));
                if (ds) ot_v4_store(ds + i, ot_v4_load(ds + i) + d * xh);
                if (db) ot_v4_store(db + i, ot_v4_load(db + i) + d);
            }
            for (; i < inner; i++) {
                const float xh = (x[i] - mu) * inv;
                dx[i] = inv * (dy[i] * S[i] - mg - xh * mgx);
                if (ds) ds[i] += dy[i] * xh;
                if (db) db[i] += dy[i];
            }
        }
    }
}

/* LayerNormalizationGrad(dY, X, scale, mean, inv_std_dev) -> dX, dScale, dBias (simplified:
 * (dY, X, scale, inv_std_var) -> dX, dScale, with mean 0). With xh = (x - mean) * inv, g = dY * scale:
 * dX = inv * (g - mean(g) - xh * mean(g * xh)) (simplified: without the mean(g) term),
 * dScale = sum over rows of dY * xh, dBias = sum over rows of dY. Rows in blocks over the threads. */
static otter_status ln_grad_common(ot_kernel_ctx *ctx, bool simplified) {
    const otter_tensor *dy, *x, *sc;
    OT_TRY(ot_train_need(ctx, 0, "dY", &dy));
    OT_TRY(ot_train_need(ctx, 1, "X", &x));
    OT_TRY(ot_train_need(ctx, 2, "scale", &sc));
    if (!ot_train_same_shape(dy, x)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY and X must have one shape");
    int64_t outer, inner;
    size_t inv_i = simplified ? 3 : 4;
    OT_TRY(ln_geometry(ctx, x, 2, simplified ? 0 : 3, inv_i, &outer, &inner));
    const float *DY, *X, *S, *MEAN = NULL, *INV;
    float *tin[5] = {0}, *tout[3] = {0}, *out[3] = {0};
    otter_tensor *o[3] = {0};
    otter_status s = ot_train_in(ctx, 0, &DY, &tin[0]);
    if (s == OTTER_OK) s = ot_train_in(ctx, 1, &X, &tin[1]);
    if (s == OTTER_OK) s = ot_train_in(ctx, 2, &S, &tin[2]);
    if (s == OTTER_OK && !simplified) s = ot_train_in(ctx, 3, &MEAN, &tin[3]);
    if (s == OTTER_OK) s = ot_train_in(ctx, inv_i, &INV, &tin[4]);
    size_t n_out = simplified ? 2 : 3;
    for (size_t k = 0; k < n_out && s == OTTER_OK; k++) {
        if (k > 0 && !ot_train_wanted(ctx, k)) continue;
        const otter_tensor *shape = k == 0 ? x : sc;
        s = ot_train_out(ctx, k, x->dtype, shape->rank, shape->dims, &o[k], &out[k], &tout[k]);
    }
    const int64_t blocks = (outer + LN_ROWS - 1) / LN_ROWS;
    const size_t part = (size_t)(blocks * inner) * sizeof(float);
    float *ds = s == OTTER_OK && out[1] ? ot_ctx_scratch(ctx, part) : NULL;
    float *db = s == OTTER_OK && out[2] ? ot_ctx_scratch(ctx, part) : NULL;
    if (s == OTTER_OK && ((out[1] && !ds) || (out[2] && !db))) s = OTTER_ERR_NOMEM; /* the scratch's error is set */
    if (s == OTTER_OK) {
        ln_grad_job j = {.dy = DY,
                         .x = X,
                         .scale = S,
                         .mean = MEAN,
                         .inv = INV,
                         .dx = out[0],
                         .ds = ds,
                         .db = db,
                         .outer = outer,
                         .inner = inner};
        ot_parallel_for(ctx, blocks, 1 + 16384 / (LN_ROWS * inner + 1), ln_grad_blocks, &j);
        float *sums[2] = {out[1], out[2]};
        const float *parts[2] = {ds, db};
        for (int k = 0; k < 2; k++) {
            if (!sums[k]) continue;
            memset(sums[k], 0, (size_t)inner * sizeof(float));
            for (int64_t b = 0; b < blocks; b++)
                for (int64_t i = 0; i < inner; i++) sums[k][i] += parts[k][b * inner + i];
        }
    }
    return ot_train_finish(s, 3, o, tout, 5, tin);
}

otter_status ot_kernel_layernorm_grad(ot_kernel_ctx *ctx) { return ln_grad_common(ctx, false); }
otter_status ot_kernel_simplified_layernorm_grad(ot_kernel_ctx *ctx) { return ln_grad_common(ctx, true); }

/* SimplifiedLayerNormalization(X, scale; axis, epsilon) -> Y = X * inv * scale, inv_std_var?
 * with inv = 1 / sqrt(mean(X^2 over the normalized axes) + epsilon) (RMSNorm). */
otter_status ot_kernel_simplified_layernorm(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *sc;
    OT_TRY(ot_train_need(ctx, 0, "X", &x));
    OT_TRY(ot_train_need(ctx, 1, "scale", &sc));
    int64_t outer, inner, axis = ot_ctx_attr_int_or(ctx, "axis", -1); /* ONNX Runtime's operator: no ONNX schema */
    OT_TRY(ln_geometry(ctx, x, 1, 0, 0, &outer, &inner));
    ot_norm_axis(&axis, x->rank);
    float eps = ot_ctx_attr_float_or(ctx, "epsilon", 1e-5f); /* ONNX Runtime's operator: no ONNX schema */
    int64_t sd[OTTER_MAX_RANK];
    for (int i = 0; i < x->rank; i++) sd[i] = i < axis ? x->dims[i] : 1;
    const float *X, *S;
    float *t0 = NULL, *t1 = NULL, *ty = NULL, *ti = NULL, *Y, *INV = NULL;
    otter_tensor *y, *inv = NULL;
    otter_status s = ot_train_in(ctx, 0, &X, &t0);
    if (s == OTTER_OK) s = ot_train_in(ctx, 1, &S, &t1);
    if (s == OTTER_OK) s = ot_train_out(ctx, 0, x->dtype, x->rank, x->dims, &y, &Y, &ty);
    if (s == OTTER_OK && ot_train_wanted(ctx, 1))
        s = ot_train_out(ctx, 1, OTTER_DTYPE_FLOAT, x->rank, sd, &inv, &INV, &ti);
    if (s == OTTER_OK) {
        for (int64_t r = 0; r < outer; r++) {
            const float *xr = X + r * inner;
            double sq = 0;
            for (int64_t i = 0; i < inner; i++) sq += (double)xr[i] * xr[i];
            float iv = 1.0f / sqrtf((float)(sq / (double)(inner ? inner : 1)) + eps);
            if (INV) INV[r] = iv;
            for (int64_t i = 0; i < inner; i++) Y[r * inner + i] = xr[i] * iv * S[i];
        }
        ot_output_f32_done(y, ty);
        if (inv) ot_output_f32_done(inv, ti);
    } else {
        ot_free(ty), ot_free(ti);
    }
    ot_free(t0), ot_free(t1);
    return s;
}

/* ---- BatchNormInternal / BatchNormalizationGrad --------------------------------------------------- */

static otter_status bn_shape(const ot_kernel_ctx *ctx, const otter_tensor *x, size_t first, size_t last, int64_t *N,
                             int64_t *C, int64_t *sp) {
    if (x->rank < 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X '%s' must have rank >= 2 (N, C, ...)",
                            ot_ctx_input_name(ctx, 1));
    *N = x->dims[0], *C = x->dims[1], *sp = 1;
    for (int i = 2; i < x->rank; i++) *sp *= x->dims[i];
    for (size_t i = first; i <= last; i++) {
        const otter_tensor *t = ot_ctx_input(ctx, i);
        if (!t) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is missing", i);
        if (otter_tensor_numel(t) != *C)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' has %lld elements, expected C = %lld", i,
                                ot_ctx_input_name(ctx, i), (long long)otter_tensor_numel(t), (long long)*C);
    }
    return OTTER_OK;
}

typedef struct bn_train_job {
    const float *in[5];
    float *out[5];
    float *running_mean, *running_var; /* write-back into the statistics inputs, or NULL */
    int64_t N, C, sp;
    float eps, mom;
    bool training, unbiased;
} bn_train_job;

/* Channel sums: each row of sp values (one image's plane) summed in 16 float lanes (four ot_v4,
 * so the adds pipeline and vectorize), the rows' partial sums added in double. A plane has at most
 * a few thousand values, so each lane adds a few hundred: float's rounding there stays far below
 * the double total's, where the per-element double sums were latency-bound and scalar. */
static double v4_total(ot_v4 a, ot_v4 b, ot_v4 c, ot_v4 d) {
    ot_v4 t = (a + b) + (c + d);
    return (double)t[0] + t[1] + t[2] + t[3];
}

/* sum x[i] over one row. */
static double row_sum(const float *x, int64_t n) {
    ot_v4 a = {0}, b = {0}, c = {0}, d = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a += ot_v4_load(x + i), b += ot_v4_load(x + i + 4);
        c += ot_v4_load(x + i + 8), d += ot_v4_load(x + i + 12);
    }
    double t = v4_total(a, b, c, d);
    for (; i < n; i++) t += x[i];
    return t;
}

/* sum (x[i] - mu)^2 over one row, mu the channel's mean. */
static double row_sq_dev(const float *x, int64_t n, float mu) {
    ot_v4 a = {0}, b = {0}, c = {0}, d = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        ot_v4 da = ot_v4_load(x + i) - mu, db = ot_v4_load(x + i + 4) - mu;
        ot_v4 dc = ot_v4_load(x + i + 8) - mu, dd = ot_v4_load(x + i + 12) - mu;
        a += da * da, b += db * db, c += dc * dc, d += dd * dd;
    }
    double t = v4_total(a, b, c, d);
    for (; i < n; i++) t += (double)(x[i] - mu) * (x[i] - mu);
    return t;
}

static void bn_train_channels(void *arg, int64_t c0, int64_t c1) {
    const bn_train_job *j = arg;
    const int64_t N = j->N, C = j->C, sp = j->sp;
    const float *X = j->in[0];
    for (int64_t c = c0; c < c1; c++) {
        double mu = j->in[3][c], var = j->in[4][c], running_var_batch = var;
        if (j->training) {
            double sum = 0, sq = 0, cnt = (double)(N * sp);
            for (int64_t n = 0; n < N; n++) sum += row_sum(X + (n * C + c) * sp, sp);
            mu = cnt > 0 ? sum / cnt : 0;
            for (int64_t n = 0; n < N; n++) sq += row_sq_dev(X + (n * C + c) * sp, sp, (float)mu);
            var = cnt > 0 ? sq / cnt : 0;
            running_var_batch = j->unbiased && cnt > 1 ? sq / (cnt - 1) : var;
        }
        float inv = 1.0f / sqrtf((float)var + j->eps), k = j->in[1][c] * inv, sh = j->in[2][c] - (float)mu * k;
        for (int64_t n = 0; n < N; n++) {
            const float *x = X + (n * C + c) * sp;
            float *y = j->out[0] + (n * C + c) * sp;
            int64_t i = 0;
            for (; i + 4 <= sp; i += 4) ot_v4_store(y + i, ot_v4_load(x + i) * k + sh);
            for (; i < sp; i++) y[i] = x[i] * k + sh;
        }
        float mom = j->mom;
        float run_mean = j->training ? j->in[3][c] * mom + (float)mu * (1 - mom) : j->in[3][c];
        float run_var = j->training ? j->in[4][c] * mom + (float)running_var_batch * (1 - mom) : j->in[4][c];
        if (j->out[1]) j->out[1][c] = run_mean;
        if (j->out[2]) j->out[2][c] = run_var;
        if (j->running_mean) { /* channel c's statistics are not read again */
            j->running_mean[c] = run_mean;
            j->running_var[c] = run_var;
        }
        if (j->out[3]) j->out[3][c] = (float)mu;
        if (j->out[4]) j->out[4][c] = inv;
    }
}

/* BatchNormInternal(X, scale, B, input_mean, input_var; epsilon, momentum, training_mode = 1)
 * -> Y, running_mean, running_var, saved_mean, saved_inv_std. Training: batch statistics (biased
 * variance), running = input * momentum + batch * (1 - momentum), saved_inv_std = 1/sqrt(var + eps).
 * The running variance mixes in the biased batch variance as ORT's CPU kernel does, or with otter's
 * attribute otter_unbiased_running_var = 1 the unbiased one (x n / (n - 1), n values per channel), as
 * PyTorch does (otter_artifacts_options.bn_unbiased_running_var). Y always uses the biased one.
 * Inference: Y from input_mean / input_var, which the other outputs (if named) repeat.
 * In training the running statistics are also written back into input_mean / input_var (float32),
 * as ORT's kernel does (its outputs 1 and 2 alias inputs 3 and 4): the training session binds the
 * checkpoint's frozen statistics there, so training updates them. Channels are split over the
 * session's threads, each summing in double as before (the output pass in ot_v4 steps). */
otter_status ot_kernel_batchnorm_internal(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_train_need(ctx, 0, "X", &x));
    int64_t N, C, sp;
    OT_TRY(bn_shape(ctx, x, 1, 4, &N, &C, &sp));
    bn_train_job j = {
        .N = N,
        .C = C,
        .sp = sp,
        .eps = ot_ctx_attr_float_or(ctx, "epsilon", 1e-5f),           /* ONNX Runtime's operator: no ONNX schema */
        .mom = ot_ctx_attr_float_or(ctx, "momentum", 0.9f),           /* ONNX Runtime's operator: no ONNX schema */
        .training = ot_ctx_attr_int_or(ctx, "training_mode", 1) != 0, /* ONNX Runtime's operator: no ONNX schema */
        .unbiased = ot_ctx_attr_int_or(ctx, "otter_unbiased_running_var", 0) != 0, /* otter's extension */
    };
    float *tin[5] = {0}, *tout[5] = {0};
    otter_tensor *o[5] = {0};
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < 5 && s == OTTER_OK; i++) s = ot_train_in(ctx, i, &j.in[i], &tin[i]);
    if (s == OTTER_OK) s = ot_train_out(ctx, 0, x->dtype, x->rank, x->dims, &o[0], &j.out[0], &tout[0]);
    for (size_t k = 1; k < 5 && s == OTTER_OK; k++) {
        if (!ot_train_wanted(ctx, k)) continue;
        const otter_tensor *like = ot_ctx_input(ctx, k < 3 ? k + 2 : k);
        s = ot_train_out(ctx, k, like->dtype, 1, &C, &o[k], &j.out[k], &tout[k]);
    }
    if (s == OTTER_OK && j.training && !tin[3] && !tin[4]) {
        j.running_mean = ctx->inputs[3]->data;
        j.running_var = ctx->inputs[4]->data;
    }
    if (s == OTTER_OK && C > 0) ot_parallel_for(ctx, C, 1 + 16384 / (N * sp + 1), bn_train_channels, &j);
    return ot_train_finish(s, 5, o, tout, 5, tin);
}

typedef struct bn_grad_job {
    const float *in[5];
    float *out[3];
    int64_t N, C, sp;
} bn_grad_job;

/* sum dy[i] into *sum_dy and return sum dy[i] * (x[i] - mu), as row_sum does. */
static double row_dy_dev(const float *dy, const float *x, int64_t n, float mu, double *sum_dy) {
    ot_v4 a = {0}, b = {0}, p = {0}, q = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        ot_v4 ga = ot_v4_load(dy + i), gb = ot_v4_load(dy + i + 4);
        a += ga, b += gb;
        p += ga * (ot_v4_load(x + i) - mu), q += gb * (ot_v4_load(x + i + 4) - mu);
    }
    ot_v4 s = a + b, t = p + q;
    double sum = (double)s[0] + s[1] + s[2] + s[3], dot = (double)t[0] + t[1] + t[2] + t[3];
    for (; i < n; i++) sum += dy[i], dot += (double)dy[i] * (x[i] - mu);
    *sum_dy += sum;
    return dot;
}

static void bn_grad_channels(void *arg, int64_t c0, int64_t c1) {
    const bn_grad_job *j = arg;
    const int64_t N = j->N, C = j->C, sp = j->sp;
    const double m = (double)(N * sp);
    for (int64_t c = c0; c < c1; c++) {
        const float mu = j->in[3][c], inv = j->in[4][c];
        const float *DY = j->in[0], *X = j->in[1];
        double db = 0, ds = 0; /* a BatchNorm bias's gradient is a sum that cancels: rows add in double */
        for (int64_t n = 0; n < N; n++) ds += row_dy_dev(DY + (n * C + c) * sp, X + (n * C + c) * sp, sp, mu, &db);
        ds *= inv;
        const float k = m > 0 ? (float)(j->in[2][c] * inv / m) : 0.0f, mf = (float)m, dbf = (float)db,
                    dsf = inv * (float)ds;
        for (int64_t n = 0; n < N; n++) {
            const int64_t e0 = (n * C + c) * sp;
            const float *dy = DY + e0, *x = X + e0;
            float *dx = j->out[0] + e0;
            int64_t i = 0;
            for (; i + 4 <= sp; i += 4)
                ot_v4_store(dx + i, k * (mf * ot_v4_load(dy + i) - dbf - (ot_v4_load(x + i) - mu) * dsf));
            for (; i < sp; i++) dx[i] = k * (mf * dy[i] - dbf - (x[i] - mu) * dsf);
        }
        if (j->out[1]) j->out[1][c] = (float)ds;
        if (j->out[2]) j->out[2][c] = (float)db;
    }
}

/* BatchNormalizationGrad(dY, X, scale, saved_mean, saved_inv_std) -> dX, dScale, dBias:
 * dBias = sum dY, dScale = sum dY * xh, dX = scale * inv / m * (m * dY - dBias - xh * dScale),
 * xh = (X - mean) * inv, m = N * spatial (per channel). Channels are split over the session's threads. */
otter_status ot_kernel_batchnorm_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *x;
    OT_TRY(ot_train_need(ctx, 0, "dY", &dy));
    OT_TRY(ot_train_need(ctx, 1, "X", &x));
    if (!ot_train_same_shape(dy, x)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY and X must have one shape");
    bn_grad_job j = {0};
    OT_TRY(bn_shape(ctx, x, 2, 4, &j.N, &j.C, &j.sp));
    float *tin[5] = {0}, *tout[3] = {0};
    otter_tensor *o[3] = {0};
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < 5 && s == OTTER_OK; i++) s = ot_train_in(ctx, i, &j.in[i], &tin[i]);
    if (s == OTTER_OK) s = ot_train_out(ctx, 0, x->dtype, x->rank, x->dims, &o[0], &j.out[0], &tout[0]);
    for (size_t k = 1; k < 3 && s == OTTER_OK; k++)
        if (ot_train_wanted(ctx, k)) s = ot_train_out(ctx, k, x->dtype, 1, &j.C, &o[k], &j.out[k], &tout[k]);
    if (s == OTTER_OK && j.C > 0) ot_parallel_for(ctx, j.C, 1 + 16384 / (j.N * j.sp + 1), bn_grad_channels, &j);
    return ot_train_finish(s, 3, o, tout, 5, tin);
}
