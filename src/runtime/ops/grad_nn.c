/* Gradient kernels of the normalizations, attention and resizing that ONNX Runtime has none for
 * (com.otter InstanceNormalizationGrad, GroupNormalizationGrad, AttentionGrad) or has one under
 * its own name (com.microsoft ResizeGrad). They recompute what the forward pass would otherwise
 * have to keep (a group's mean and inverse std, an attention head's probabilities): cheap next to
 * the gradient itself, and the forward node stays the standard operator. */
#include <math.h>
#include <string.h>

#include "runtime/ops/gemm.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/training_internal.h"
#include "runtime/ops/vec_math.h"

/* ---- InstanceNormalizationGrad / GroupNormalizationGrad ---------------------------------------- */

typedef struct gn_grad_args {
    const float *dy, *x, *scale;
    float *dx;                        /* NULL: not wanted */
    double *dscale_part, *dbias_part; /* [N * C]: per sample and channel, summed over N afterwards */
    int64_t groups, group_channels, spatial;
    bool per_channel;
    float eps;
} gn_grad_args;

/* One (sample, group): with xh = (x - mean) * inv and g = dY * scale,
 * dX = inv * (g - mean(g) - xh * mean(g * xh)); the scale and bias partials are sum(dY * xh), sum(dY)
 * per channel. */
static void gn_grad_groups(void *arg, int64_t begin, int64_t end) {
    const gn_grad_args *a = arg;
    int64_t size = a->group_channels * a->spatial;
    for (int64_t ng = begin; ng < end; ng++) {
        int64_t g = ng % a->groups;
        const float *x = a->x + ng * size, *dy = a->dy + ng * size;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < size; i++) mean += x[i];
        mean = size ? mean / (double)size : 0;
        for (int64_t i = 0; i < size; i++) var += (x[i] - mean) * (x[i] - mean);
        var = size ? var / (double)size : 0;
        double inv = 1.0 / sqrt(var + a->eps), sg = 0, sgx = 0;
        for (int64_t c = 0; c < a->group_channels; c++) {
            double gamma = a->scale[a->per_channel ? g * a->group_channels + c : g], sdy = 0, sdyx = 0;
            for (int64_t k = c * a->spatial; k < (c + 1) * a->spatial; k++) {
                double xh = (x[k] - mean) * inv;
                sdy += dy[k], sdyx += dy[k] * xh;
            }
            sg += gamma * sdy, sgx += gamma * sdyx;
            a->dscale_part[ng * a->group_channels + c] = sdyx;
            a->dbias_part[ng * a->group_channels + c] = sdy;
        }
        if (!a->dx) continue;
        double mg = size ? sg / (double)size : 0, mgx = size ? sgx / (double)size : 0;
        for (int64_t c = 0; c < a->group_channels; c++) {
            double gamma = a->scale[a->per_channel ? g * a->group_channels + c : g];
            for (int64_t k = c * a->spatial; k < (c + 1) * a->spatial; k++) {
                double xh = (x[k] - mean) * inv;
                a->dx[ng * size + k] = (float)(inv * (dy[k] * gamma - mg - xh * mgx));
            }
        }
    }
}

/* (dY, X, scale) -> dX, dscale, dbias. Instance normalization is group normalization with one group
 * per channel; GroupNormalization's scale and bias hold one value per group (opset 18) or per
 * channel (opset 21), which the scale's size tells. */
static otter_status norm_grad(ot_kernel_ctx *ctx, bool instance) {
    const otter_tensor *dy, *x, *sc;
    OT_TRY(ot_train_need(ctx, 0, "dY", &dy));
    OT_TRY(ot_train_need(ctx, 1, "X", &x));
    OT_TRY(ot_train_need(ctx, 2, "scale", &sc));
    if (x->rank < 2 || !ot_train_same_shape(dy, x))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' and X '%s' must have one shape [N, C, ...]",
                            ot_ctx_input_name(ctx, 0), ot_ctx_input_name(ctx, 1));
    int64_t N = x->dims[0], C = x->dims[1];
    gn_grad_args a = {.spatial = 1, .groups = C};
    for (int i = 2; i < x->rank; i++) a.spatial *= x->dims[i];
    if (instance) {
        OT_TRY(ot_ctx_attr_float(ctx, "epsilon", &a.eps));
    } else {
        a.eps = ot_ctx_attr_float_or(ctx, "epsilon", 1e-5f); /* GroupNormalization: after ONNX 1.12 */
        a.groups = ot_ctx_attr_int_or(ctx, "num_groups", 0);
    }
    if (a.groups < 1 || C % a.groups != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "num_groups %lld does not divide the %lld channels",
                            (long long)a.groups, (long long)C);
    a.group_channels = C / a.groups;
    int64_t n_scale = otter_tensor_numel(sc);
    a.per_channel = n_scale == C;
    if (!a.per_channel && n_scale != a.groups)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "scale '%s' has %lld values, expected %lld (channels) or %lld (groups)",
                            ot_ctx_input_name(ctx, 2), (long long)n_scale, (long long)C, (long long)a.groups);
    float *tin[3] = {0}, *tout[3] = {0}, *out[3] = {0};
    otter_tensor *o[3] = {0};
    otter_status s = ot_train_in(ctx, 0, &a.dy, &tin[0]);
    if (s == OTTER_OK) s = ot_train_in(ctx, 1, &a.x, &tin[1]);
    if (s == OTTER_OK) s = ot_train_in(ctx, 2, &a.scale, &tin[2]);
    for (size_t k = 0; k < 3 && s == OTTER_OK; k++) {
        if (!ot_train_wanted(ctx, k)) continue;
        const otter_tensor *like = k == 0 ? x : sc;
        s = ot_train_out(ctx, k, x->dtype, like->rank, like->dims, &o[k], &out[k], &tout[k]);
    }
    double *part = s == OTTER_OK ? ot_malloc((size_t)(2 * N * C + 1) * sizeof(double)) : NULL;
    if (s == OTTER_OK && !part) s = OT_NOMEM();
    if (s == OTTER_OK) {
        a.dx = out[0];
        a.dscale_part = part, a.dbias_part = part + N * C;
        ot_parallel_for(ctx, N * a.groups, 1 + 16384 / (a.group_channels * a.spatial + 1), gn_grad_groups, &a);
        /* a value per channel, or per group: its channels' partials summed too */
        for (size_t k = 1; k < 3; k++) {
            if (!out[k]) continue;
            const double *p = k == 1 ? a.dscale_part : a.dbias_part;
            memset(out[k], 0, (size_t)n_scale * sizeof(float));
            for (int64_t n = 0; n < N; n++)
                for (int64_t c = 0; c < C; c++) out[k][a.per_channel ? c : c / a.group_channels] += (float)p[n * C + c];
        }
    }
    ot_free(part);
    return ot_train_finish(s, 3, o, tout, 3, tin);
}

otter_status ot_kernel_instancenorm_grad(ot_kernel_ctx *ctx) { return norm_grad(ctx, true); }
otter_status ot_kernel_group_normalization_grad(ot_kernel_ctx *ctx) { return norm_grad(ctx, false); }

/* ---- AttentionGrad ------------------------------------------------------------------------------- */

/* Rows of one operand (and of its gradient, which has its layout) for a (batch, head). */
typedef struct attn_view {
    int64_t batch_stride, head_stride, ld, len, width;
} attn_view;

typedef struct attn_grad_args {
    int64_t q_heads, kv_heads, q_len, kv_len, past_len; /* kv_len: past_len cached keys, then K's */
    float scale, softcap;
    bool causal;
    attn_view q, k, v, y;
    const float *dy, *Q, *K, *V;
    float *dq, *dk, *dv, *dmask; /* dmask: shaped like the float mask */
    const float *mask_f;
    const unsigned char *mask_b;
    int64_t mask_stride[3], mask_len; /* batch, head, query row strides (0: broadcast); keys past mask_len masked */
    otter_status status;
} attn_grad_args;

/* A 4-D [B, H, S, D] operand, or a 3-D [B, S, H * D] one split into `heads` heads. */
static otter_status attn_view_of(const ot_kernel_ctx *ctx, size_t idx, const otter_tensor *t, int64_t heads,
                                 attn_view *v) {
    if (t->rank == 4) {
        if (t->dims[1] != heads)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' has %lld heads, expected %lld",
                                ot_ctx_input_name(ctx, idx), (long long)t->dims[1], (long long)heads);
        *v = (attn_view){heads * t->dims[2] * t->dims[3], t->dims[2] * t->dims[3], t->dims[3], t->dims[2], t->dims[3]};
        return OTTER_OK;
    }
    if (t->rank != 3 || heads < 1 || t->dims[2] % heads != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' (rank %d) is not [batch, sequence, %lld heads x size]",
                            ot_ctx_input_name(ctx, idx), t->rank, (long long)heads);
    int64_t w = t->dims[2] / heads;
    *v = (attn_view){t->dims[1] * t->dims[2], w, t->dims[2], t->dims[1], w};
    return OTTER_OK;
}

static int64_t attn_off(const attn_view *v, int64_t b, int64_t h) { return b * v->batch_stride + h * v->head_stride; }

/* Scores of query head h (batch b) into p [q_len, kv_len]: softmax(softcap(scale Q K^T) + bias), and
 * the softcap's derivative into dcap when there is a softcap, as the forward kernel computes them. */
static otter_status attn_probs(const attn_grad_args *a, int64_t b, int64_t h, int64_t kvh, float *p, float *dcap) {
    int64_t L = a->q_len, S = a->kv_len;
    OT_TRY(ot_sgemm(NULL, false, true, L, S, a->q.width, a->scale, a->Q + attn_off(&a->q, b, h), a->q.ld,
                    a->K + attn_off(&a->k, b, kvh), a->k.ld, 0.0f, p, S));
    for (int64_t i = 0; i < L; i++) {
        float *row = p + i * S;
        if (a->softcap > 0)
            for (int64_t j = 0; j < S; j++) {
                float t = tanhf(row[j] / a->softcap);
                row[j] = a->softcap * t;
                dcap[i * S + j] = 1 - t * t;
            }
        int64_t visible = S;
        if (a->mask_f || a->mask_b) {
            int64_t off = b * a->mask_stride[0] + h * a->mask_stride[1] + i * a->mask_stride[2];
            for (int64_t j = 0; j < a->mask_len; j++)
                if (a->mask_f)
                    row[j] += a->mask_f[off + j];
                else if (!a->mask_b[off + j])
                    row[j] = -INFINITY;
            visible = a->mask_len;
        }
        if (a->causal && i + a->past_len + 1 < visible) visible = i + a->past_len + 1;
        for (int64_t j = visible; j < S; j++) row[j] = -INFINITY;
        ot_softmax_row(row, S);
    }
    return OTTER_OK;
}

/* One (batch, KV head) and the query heads that share it, so that dK and dV have one writer. Per
 * query head, with P the probabilities: dV += P^T dY, dP = dY V^T, dS = P (dP - rowsum(P dP)),
 * d(mask) += dS (the mask is added after the softcap), dS times the softcap's derivative, then
 * dQ = scale dS K, dK += scale dS^T Q. */
static void attn_grad_range(void *arg, int64_t begin, int64_t end) {
    attn_grad_args *a = arg;
    int64_t L = a->q_len, S = a->kv_len, group = a->q_heads / a->kv_heads;
    float *p = ot_malloc((size_t)(3 * L * S + 1) * sizeof(float)), *dp = p + L * S, *dcap = dp + L * S;
    otter_status s = p ? OTTER_OK : OTTER_ERR_NOMEM;
    for (int64_t t = begin; t < end && s == OTTER_OK; t++) {
        int64_t b = t / a->kv_heads, kvh = t % a->kv_heads;
        const float *k = a->K + attn_off(&a->k, b, kvh), *v = a->V + attn_off(&a->v, b, kvh);
        float *dk = a->dk ? a->dk + attn_off(&a->k, b, kvh) : NULL,
              *dv = a->dv ? a->dv + attn_off(&a->v, b, kvh) : NULL;
        for (int64_t h = kvh * group; h < (kvh + 1) * group && s == OTTER_OK; h++) {
            const float *dy = a->dy + attn_off(&a->y, b, h), *q = a->Q + attn_off(&a->q, b, h);
            s = attn_probs(a, b, h, kvh, p, dcap);
            if (s == OTTER_OK && dv)
                s = ot_sgemm(NULL, true, false, S, a->v.width, L, 1.0f, p, S, dy, a->y.ld, 1.0f, dv, a->v.ld);
            if (s != OTTER_OK || (!a->dq && !dk && !a->dmask)) continue;
            s = ot_sgemm(NULL, false, true, L, S, a->v.width, 1.0f, dy, a->y.ld, v, a->v.ld, 0.0f, dp, S);
            for (int64_t i = 0; i < L && s == OTTER_OK; i++) {
                float *pr = p + i * S, *dr = dp + i * S;
                double dot = 0;
                for (int64_t j = 0; j < S; j++) dot += (double)pr[j] * dr[j];
                for (int64_t j = 0; j < S; j++) dr[j] = pr[j] * (dr[j] - (float)dot);
                if (a->dmask) {
                    float *dm = a->dmask + b * a->mask_stride[0] + h * a->mask_stride[1] + i * a->mask_stride[2];
                    for (int64_t j = 0; j < a->mask_len; j++) dm[j] += dr[j];
                }
                if (a->softcap > 0)
                    for (int64_t j = 0; j < S; j++) dr[j] *= dcap[i * S + j];
            }
            if (s == OTTER_OK && a->dq)
                s = ot_sgemm(NULL, false, false, L, a->q.width, S, a->scale, dp, S, k, a->k.ld, 0.0f,
                             a->dq + attn_off(&a->q, b, h), a->q.ld);
            if (s == OTTER_OK && dk)
                s = ot_sgemm(NULL, true, false, S, a->k.width, L, a->scale, dp, S, q, a->q.ld, 1.0f, dk, a->k.ld);
        }
    }
    ot_free(p);
    if (s != OTTER_OK) a->status = s;
}

/* A KV cache: the keys (or values) are past's rows, then the new ones: both copied into cat
 * [B, H, past + new, width]. */
static void attn_cache_cat(const attn_view *past, const float *p, const attn_view *cur, const float *c,
                           const attn_view *cat, float *t, int64_t batch, int64_t heads) {
    for (int64_t b = 0; b < batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t r = 0; r < cat->len; r++) {
                const float *src = r < past->len ? p + attn_off(past, b, h) + r * past->ld
                                                 : c + attn_off(cur, b, h) + (r - past->len) * cur->ld;
                memcpy(t + attn_off(cat, b, h) + r * cat->ld, src, (size_t)cat->width * sizeof(float));
            }
}

/* The gradient of such a block split into the cache's (dp) and the new rows' (dc); either may be NULL. */
static void attn_cache_split(const attn_view *past, float *dp, const attn_view *cur, float *dc, const attn_view *cat,
                             const float *t, int64_t batch, int64_t heads) {
    for (int64_t b = 0; b < batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t r = 0; r < cat->len; r++) {
                float *dst = r < past->len ? (dp ? dp + attn_off(past, b, h) + r * past->ld : NULL)
                                           : (dc ? dc + attn_off(cur, b, h) + (r - past->len) * cur->ld : NULL);
                if (dst) memcpy(dst, t + attn_off(cat, b, h) + r * cat->ld, (size_t)cat->width * sizeof(float));
            }
}

/* The mask's strides over (batch, query head, query row), broadcasting size-1 and missing axes. */
static otter_status attn_grad_mask(const ot_kernel_ctx *ctx, const otter_tensor *m, int64_t batch, attn_grad_args *a) {
    const int64_t want[3] = {batch, a->q_heads, a->q_len};
    bool ok = m->rank >= 1 && m->rank <= 4 && m->dims[m->rank - 1] <= a->kv_len;
    int64_t stride = m->dims[m->rank - 1];
    for (int d = 0; ok && d < 3; d++) {
        int md = m->rank - 2 - d;
        int64_t dim = md >= 0 ? m->dims[md] : 1;
        ok = dim == 1 || dim == want[2 - d];
        a->mask_stride[2 - d] = dim == 1 ? 0 : stride;
        stride *= dim;
    }
    if (!ok) {
        char buf[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "attn_mask '%s' %s does not broadcast to (%lld, %lld, %lld, <= %lld)",
                            ot_ctx_input_name(ctx, 4), ot_shape_str(buf, sizeof buf, m->rank, m->dims),
                            (long long)batch, (long long)a->q_heads, (long long)a->q_len, (long long)a->kv_len);
    }
    a->mask_len = m->dims[m->rank - 1];
    return OTTER_OK;
}

/* com.otter AttentionGrad(dY, Q, K, V[, attn_mask, past_key, past_value]) -> dQ, dK, dV[, d_attn_mask,
 * d_past_key, d_past_value] with Attention's attributes (scale, softcap, is_causal, q_num_heads,
 * kv_num_heads). A float mask's gradient is summed over the axes it broadcasts along. A KV cache's
 * keys and values come first (the causal frontier moves by its length): both are copied into one
 * [B, H, past + new, size] block, whose gradient is split back into the cache's and K's / V's. */
otter_status ot_kernel_attention_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *q, *k, *v, *mask = ot_ctx_input(ctx, 4);
    const otter_tensor *past_k = ot_ctx_input(ctx, 5), *past_v = ot_ctx_input(ctx, 6);
    OT_TRY(ot_train_need(ctx, 0, "dY", &dy));
    OT_TRY(ot_train_need(ctx, 1, "Q", &q));
    OT_TRY(ot_train_need(ctx, 2, "K", &k));
    OT_TRY(ot_train_need(ctx, 3, "V", &v));
    if (q->rank != k->rank || q->rank != v->rank || q->rank != dy->rank || (q->rank != 3 && q->rank != 4))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY, Q, K and V must all be 3D or all 4D");
    if (!past_k != !past_v) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "past_key and past_value go together");
    attn_grad_args a = {.status = OTTER_OK};
    if (q->rank == 3) {
        a.q_heads = ot_ctx_attr_int_or(ctx, "q_num_heads", 0); /* Attention-23: after ONNX 1.12 */
        a.kv_heads = ot_ctx_attr_int_or(ctx, "kv_num_heads", 0);
    } else {
        a.q_heads = q->dims[1], a.kv_heads = k->dims[1];
    }
    if (a.q_heads < 1 || a.kv_heads < 1 || a.q_heads % a.kv_heads != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "%lld query heads are not a multiple of %lld key/value heads",
                            (long long)a.q_heads, (long long)a.kv_heads);
    int64_t batch = q->dims[0];
    attn_view kn, vn, kp = {0}, vp = {0}, kc, vc; /* K and V, the cache's, the two together */
    OT_TRY(attn_view_of(ctx, 1, q, a.q_heads, &a.q));
    OT_TRY(attn_view_of(ctx, 2, k, a.kv_heads, &kn));
    OT_TRY(attn_view_of(ctx, 3, v, a.kv_heads, &vn));
    OT_TRY(attn_view_of(ctx, 0, dy, a.q_heads, &a.y));
    if (k->dims[0] != batch || v->dims[0] != batch || dy->dims[0] != batch || a.q.width != kn.width ||
        kn.len != vn.len || a.y.len != a.q.len || a.y.width != vn.width)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s', Q, K and V have inconsistent shapes",
                            ot_ctx_input_name(ctx, 0));
    if (past_k) {
        if (past_k->rank != 4 || past_v->rank != 4 || past_k->dims[0] != batch || past_v->dims[0] != batch ||
            past_k->dims[2] != past_v->dims[2])
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "past_key '%s' / past_value '%s' are not [batch, heads, length, size]",
                                ot_ctx_input_name(ctx, 5), ot_ctx_input_name(ctx, 6));
        OT_TRY(attn_view_of(ctx, 5, past_k, a.kv_heads, &kp));
        OT_TRY(attn_view_of(ctx, 6, past_v, a.kv_heads, &vp));
        if (kp.width != kn.width || vp.width != vn.width)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "past_key / past_value head sizes differ from K's and V's");
    }
    a.past_len = kp.len, a.q_len = a.q.len, a.kv_len = kp.len + kn.len;
    kc = (attn_view){a.kv_heads * a.kv_len * kn.width, a.kv_len * kn.width, kn.width, a.kv_len, kn.width};
    vc = (attn_view){a.kv_heads * a.kv_len * vn.width, a.kv_len * vn.width, vn.width, a.kv_len, vn.width};
    a.k = past_k ? kc : kn, a.v = past_k ? vc : vn;
    a.scale = ot_ctx_attr_set(ctx, "scale") ? ot_ctx_attr_float_or(ctx, "scale", 0) : 1.0f / sqrtf((float)a.q.width);
    a.softcap = ot_ctx_attr_float_or(ctx, "softcap", 0.0f);
    a.causal = ot_ctx_attr_int_or(ctx, "is_causal", 0) != 0;
    if (mask) OT_TRY(attn_grad_mask(ctx, mask, batch, &a));
    float *tin[7] = {0}, *tout[6] = {0}, *out[6] = {0}, *cat[4] = {0}; /* K, V together; their gradients */
    const float *in[7] = {0};
    otter_tensor *o[6] = {0};
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < 7 && s == OTTER_OK; i++) {
        const otter_tensor *t = ot_ctx_input(ctx, i);
        if (t && !(i == 4 && t->dtype == OTTER_DTYPE_BOOL)) s = ot_train_in(ctx, i, &in[i], &tin[i]);
    }
    a.dy = in[0], a.Q = in[1], a.K = in[2], a.V = in[3], a.mask_f = in[4];
    if (mask && mask->dtype == OTTER_DTYPE_BOOL) a.mask_b = mask->data;
    if (s == OTTER_OK && ot_train_wanted(ctx, 3) && (!mask || mask->dtype == OTTER_DTYPE_BOOL))
        s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "output 3 (the mask's gradient) needs a float attn_mask");
    const otter_tensor *like[6] = {q, k, v, mask, past_k, past_v};
    for (size_t i = 0; i < 6 && s == OTTER_OK; i++)
        if (ot_train_wanted(ctx, i)) {
            if (!like[i])
                s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "output %zu needs input %zu", i, i + 1);
            else
                s = ot_train_out(ctx, i, like[i]->dtype, like[i]->rank, like[i]->dims, &o[i], &out[i], &tout[i]);
        }
    if (s == OTTER_OK && past_k) {
        size_t nk = (size_t)(batch * kc.batch_stride), nv = (size_t)(batch * vc.batch_stride);
        cat[0] = ot_malloc((nk + 1) * sizeof(float)), cat[1] = ot_malloc((nv + 1) * sizeof(float));
        if (out[1] || out[4]) cat[2] = ot_calloc(nk + 1, sizeof(float));
        if (out[2] || out[5]) cat[3] = ot_calloc(nv + 1, sizeof(float));
        if (!cat[0] || !cat[1] || ((out[1] || out[4]) && !cat[2]) || ((out[2] || out[5]) && !cat[3])) s = OT_NOMEM();
    }
    if (s == OTTER_OK) {
        if (past_k) {
            attn_cache_cat(&kp, in[5], &kn, in[2], &kc, cat[0], batch, a.kv_heads);
            attn_cache_cat(&vp, in[6], &vn, in[3], &vc, cat[1], batch, a.kv_heads);
            a.K = cat[0], a.V = cat[1], a.dk = cat[2], a.dv = cat[3];
        } else {
            a.dk = out[1], a.dv = out[2];
            if (a.dk) memset(a.dk, 0, (size_t)otter_tensor_numel(k) * sizeof(float));
            if (a.dv) memset(a.dv, 0, (size_t)otter_tensor_numel(v) * sizeof(float));
        }
        a.dq = out[0], a.dmask = out[3];
        if (a.dmask) memset(a.dmask, 0, (size_t)otter_tensor_numel(mask) * sizeof(float));
        int64_t cost = (a.q_heads / a.kv_heads) * a.q_len * a.kv_len * (a.q.width + a.v.width);
        /* a mask broadcast over batches or KV heads takes gradient from several tasks: one thread then */
        bool shared = a.dmask && ((a.mask_stride[0] == 0 && batch > 1) || (a.mask_stride[1] == 0 && a.kv_heads > 1));
        if (shared)
            attn_grad_range(&a, 0, batch * a.kv_heads);
        else
            ot_parallel_for(ctx, batch * a.kv_heads, 1 + 65536 / (cost + 1), attn_grad_range, &a);
        if (a.status != OTTER_OK) s = OT_NOMEM();
    }
    if (s == OTTER_OK && past_k) {
        if (cat[2]) attn_cache_split(&kp, out[4], &kn, out[1], &kc, cat[2], batch, a.kv_heads);
        if (cat[3]) attn_cache_split(&vp, out[5], &vn, out[2], &vc, cat[3], batch, a.kv_heads);
    }
    for (int i = 0; i < 4; i++) ot_free(cat[i]);
    return ot_train_finish(s, 6, o, tout, 7, tin);
}
