/* ai.onnx.preview FlexAttention (1): softmax(score_mod(Q K^T * scale)) -> prob_mod -> times V, over
 * rank-4 inputs with GQA (query head h reads KV head h / (q_heads / kv_heads)). The modifier
 * subgraphs each see the whole [B, Hq, L, S] tensor in softmax_precision (float, or double for
 * double inputs, unless set), so the scores are materialized once; the products and the softmax
 * run in double. A row the score_mod masks entirely (all -inf) gives zeros, as Attention's. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "runtime/ops/gemm.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"

/* Runs the graph attribute `name` (when set) on the scores, in place: through a tensor of the
 * softmax precision, checked to come back with the same shape. */
static otter_status apply_mod(ot_kernel_ctx *ctx, const char *name, otter_dtype precision, const int64_t dims[4],
                              double *scores) {
    const otter_attr *at = otter_node_attr(ctx->node, name);
    if (!at) return OTTER_OK;
    if (at->type != OTTER_ATTR_GRAPH || !at->g)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute '%s' must be a graph", name);
    int64_t n = dims[0] * dims[1] * dims[2] * dims[3];
    otter_tensor *in = NULL, *out = NULL;
    otter_status s = otter_tensor_create(&in, NULL, precision, 4, dims);
    if (s == OTTER_OK && !ot_convert(in->data, precision, scores, OTTER_DTYPE_DOUBLE, n))
        s = ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "softmax_precision %s is not a floating type",
                         otter_dtype_name(precision));
    if (s == OTTER_OK) s = ot_ctx_run_subgraph(ctx, at->g, 1, &in, 1, &out);
    if (s == OTTER_OK && (out->rank != 4 || memcmp(out->dims, dims, 4 * sizeof *dims) != 0 ||
                          !ot_convert(scores, OTTER_DTYPE_DOUBLE, out->data, out->dtype, n)))
        s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "subgraph '%s' must return a float tensor shaped like its input",
                         name);
    otter_tensor_free(in);
    otter_tensor_free(out);
    return s;
}

static void softmax_rows(double *p, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++, p += n) {
        double max = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; j++) max = p[j] > max ? p[j] : max;
        if (max == -INFINITY) {
            memset(p, 0, (size_t)n * sizeof *p);
            continue;
        }
        for (int64_t j = 0; j < n; j++) sum += p[j] = exp(p[j] - max);
        for (int64_t j = 0; j < n; j++) p[j] /= sum;
    }
}

/* Q, K, V converted to double and Y's double result when Y is not double (freed by the caller) */
typedef struct flex_in {
    double *q, *k, *v, *y;
} flex_in;

static otter_status flex_run(ot_kernel_ctx *ctx, const otter_tensor *const t[3], flex_in *in, double **scores) {
    const otter_tensor *q = t[0], *k = t[1], *v = t[2];
    int64_t B = q->dims[0], Hq = q->dims[1], L = q->dims[2], D = q->dims[3], Hkv = k->dims[1], S = k->dims[2],
            Dv = v->dims[3];
    float scale = ot_ctx_attr_float_or(ctx, "scale", 0.0f); /* preview domain: no schema */
    double sc = ot_ctx_attr_set(ctx, "scale") ? scale : 1.0 / sqrt((double)D);
    otter_dtype precision = (otter_dtype)ot_ctx_attr_int_or(
        ctx, "softmax_precision", q->dtype == OTTER_DTYPE_DOUBLE ? OTTER_DTYPE_DOUBLE : OTTER_DTYPE_FLOAT);
    double **dst[3] = {&in->q, &in->k, &in->v};
    for (int i = 0; i < 3; i++) {
        int64_t n = otter_tensor_numel(t[i]);
        if (!(*dst[i] = ot_malloc((size_t)(n + 1) * sizeof(double)))) return OT_NOMEM();
        ot_convert(*dst[i], OTTER_DTYPE_DOUBLE, t[i]->data, t[i]->dtype, n);
    }
    const int64_t sdims[4] = {B, Hq, L, S}, ydims[4] = {B, Hq, L, Dv};
    if (!(*scores = ot_malloc((size_t)(B * Hq * L * S + 1) * sizeof(double)))) return OT_NOMEM();
    int64_t group = Hq / Hkv;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            OT_TRY(ot_dgemm(ctx, false, true, L, S, D, sc, in->q + ((b * Hq + h) * L) * D, D,
                            in->k + ((b * Hkv + h / group) * S) * D, D, 0.0, *scores + ((b * Hq + h) * L) * S, S));
    OT_TRY(apply_mod(ctx, "score_mod", precision, sdims, *scores));
    softmax_rows(*scores, B * Hq * L, S);
    OT_TRY(apply_mod(ctx, "prob_mod", precision, sdims, *scores));
    otter_tensor *y = ot_ctx_output(ctx, 0, q->dtype, 4, ydims);
    if (!y) return ctx->output_status;
    double *out = y->data;
    if (y->dtype != OTTER_DTYPE_DOUBLE && !(out = in->y = ot_malloc((size_t)(B * Hq * L * Dv + 1) * sizeof(double))))
        return OT_NOMEM();
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            OT_TRY(ot_dgemm(ctx, false, false, L, Dv, S, 1.0, *scores + ((b * Hq + h) * L) * S, S,
                            in->v + ((b * Hkv + h / group) * S) * Dv, Dv, 0.0, out + ((b * Hq + h) * L) * Dv, Dv));
    if (out != y->data) ot_convert(y->data, y->dtype, out, OTTER_DTYPE_DOUBLE, B * Hq * L * Dv);
    return OTTER_OK;
}

otter_status ot_kernel_flex_attention(ot_kernel_ctx *ctx) {
    const otter_tensor *t[3];
    for (size_t i = 0; i < 3; i++) OT_TRY(ot_ctx_float_input(ctx, i, &t[i]));
    bool ok = t[0]->rank == 4 && t[1]->rank == 4 && t[2]->rank == 4;
    ok = ok && t[1]->dims[0] == t[0]->dims[0] && t[2]->dims[0] == t[0]->dims[0] && t[1]->dims[3] == t[0]->dims[3] &&
         t[2]->dims[1] == t[1]->dims[1] && t[2]->dims[2] == t[1]->dims[2] && t[1]->dims[1] > 0 &&
         t[0]->dims[1] % t[1]->dims[1] == 0;
    if (!ok)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "Q [B, Hq, L, D], K [B, Hkv, S, D] and V [B, Hkv, S, Dv] must be rank 4 with Hq a "
                            "multiple of Hkv");
    flex_in in = {0};
    double *scores = NULL;
    otter_status s = flex_run(ctx, t, &in, &scores);
    ot_free(in.q), ot_free(in.k), ot_free(in.v), ot_free(in.y), ot_free(scores);
    return s;
}
