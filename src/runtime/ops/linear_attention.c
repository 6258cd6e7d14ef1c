/* LinearAttention (ai.onnx 27): the recurrent form of linear attention, token by token, per
 * (batch, KV head), with the state S [d_k x d_v] in float:
 *
 *     gated, gated_delta:  S = exp(g_t) * S            (g per key dim, or one per head)
 *     delta, gated_delta:  v_t = beta_t * (v_t - S^T k_t)
 *     all:                 S = S + k_t v_t^T;   o_t = scale * q_t^T S  for each query head of the group
 *
 * Inputs and output are packed [B, T, heads * dim]; the state [B, H_kv, d_k, d_v] starts from
 * past_state (zeros when omitted) and ends in present_state, of past_state's type (else query's). */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"

typedef struct lin_args {
    const float *q, *k, *v, *decay, *beta, *past;
    float *out, *state; /* state: [B, H_kv, d_k, d_v], the running and final state */
    int64_t batch, len, q_heads, kv_heads, dk, dv;
    int64_t decay_width, beta_width; /* per token: kv_heads or kv_heads * dk; kv_heads or 1 */
    float scale;
    bool gated, delta;
    float *scratch; /* d_v floats per (batch, KV head) task */
} lin_args;

static void lin_heads(void *arg, int64_t begin, int64_t end) {
    const lin_args *a = arg;
    int64_t group = a->q_heads / a->kv_heads, dk = a->dk, dv = a->dv;
    for (int64_t task = begin; task < end; task++) {
        int64_t b = task / a->kv_heads, h = task % a->kv_heads;
        float *S = a->state + task * dk * dv, *vt = a->scratch + task * dv;
        if (a->past)
            memcpy(S, a->past + task * dk * dv, (size_t)(dk * dv) * sizeof(float));
        else
            memset(S, 0, (size_t)(dk * dv) * sizeof(float));
        for (int64_t t = 0; t < a->len; t++) {
            int64_t bt = b * a->len + t;
            const float *k = a->k + (bt * a->kv_heads + h) * dk, *v = a->v + (bt * a->kv_heads + h) * dv;
            if (a->gated) {
                const float *g = a->decay + bt * a->decay_width;
                bool per_dim = a->decay_width != a->kv_heads;
                for (int64_t d = 0; d < dk; d++) {
                    float f = expf(per_dim ? g[h * dk + d] : g[h]);
                    for (int64_t m = 0; m < dv; m++) S[d * dv + m] *= f;
                }
            }
            if (a->delta) {
                float beta = a->beta[bt * a->beta_width + (a->beta_width == 1 ? 0 : h)];
                for (int64_t m = 0; m < dv; m++) vt[m] = v[m];
                for (int64_t d = 0; d < dk; d++)
                    for (int64_t m = 0; m < dv; m++) vt[m] -= S[d * dv + m] * k[d];
                for (int64_t m = 0; m < dv; m++) vt[m] *= beta;
                v = vt;
            }
            for (int64_t d = 0; d < dk; d++)
                for (int64_t m = 0; m < dv; m++) S[d * dv + m] += k[d] * v[m];
            for (int64_t qh = h * group; qh < (h + 1) * group; qh++) {
                const float *q = a->q + (bt * a->q_heads + qh) * dk;
                float *o = a->out + (bt * a->q_heads + qh) * dv;
                for (int64_t m = 0; m < dv; m++) o[m] = 0;
                for (int64_t d = 0; d < dk; d++)
                    for (int64_t m = 0; m < dv; m++) o[m] += q[d] * S[d * dv + m];
                for (int64_t m = 0; m < dv; m++) o[m] *= a->scale;
            }
        }
    }
}

/* Checks input i is [B, T, width] with width one of the allowed values (w2 0: only w1). */
static otter_status check_packed(const ot_kernel_ctx *ctx, size_t i, const otter_tensor *t, int64_t batch, int64_t len,
                                 int64_t w1, int64_t w2) {
    if (t->rank == 3 && t->dims[0] == batch && t->dims[1] == len && (t->dims[2] == w1 || (w2 && t->dims[2] == w2)))
        return OTTER_OK;
    char buf[128];
    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' %s must be [%lld, %lld, %lld%s]", ot_ctx_input_name(ctx, i),
                        ot_shape_str(buf, sizeof buf, t->rank, t->dims), (long long)batch, (long long)len,
                        (long long)w1, w2 ? " or the other allowed width" : "");
}

otter_status ot_kernel_linear_attention(ot_kernel_ctx *ctx) {
    const otter_tensor *q, *k, *v, *past = ot_ctx_input(ctx, 3), *decay = ot_ctx_input(ctx, 4),
                                   *beta = ot_ctx_input(ctx, 5);
    OT_TRY(ot_ctx_float_input(ctx, 0, &q));
    OT_TRY(ot_ctx_float_input(ctx, 1, &k));
    OT_TRY(ot_ctx_float_input(ctx, 2, &v));
    /* LinearAttention-27: no ONNX 1.12 schema, defaults from Operators.md */
    const char *rule = ot_ctx_attr_string_or(ctx, "update_rule", "gated_delta");
    lin_args a = {.q_heads = ot_ctx_attr_int_or(ctx, "q_num_heads", 0),
                  .kv_heads = ot_ctx_attr_int_or(ctx, "kv_num_heads", 0)};
    a.gated = strcmp(rule, "gated") == 0 || strcmp(rule, "gated_delta") == 0;
    a.delta = strcmp(rule, "delta") == 0 || strcmp(rule, "gated_delta") == 0;
    if (!a.gated && !a.delta && strcmp(rule, "linear") != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "update_rule \"%s\" is not \"linear\", \"gated\", \"delta\" or \"gated_delta\"", rule);
    if (a.q_heads < 1 || a.kv_heads < 1 || a.q_heads % a.kv_heads != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "q_num_heads %lld must be a positive multiple of kv_num_heads %lld (both required)",
                            (long long)a.q_heads, (long long)a.kv_heads);
    if (a.gated != (decay != NULL) || a.delta != (beta != NULL))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "update_rule \"%s\" %s decay and %s beta", rule,
                            a.gated ? "needs" : "takes no", a.delta ? "needs" : "takes no");
    if (q->rank != 3 || q->dims[2] % a.q_heads != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "query '%s' must be [B, T, q_num_heads * d_k]",
                            ot_ctx_input_name(ctx, 0));
    a.batch = q->dims[0], a.len = q->dims[1], a.dk = q->dims[2] / a.q_heads;
    if (v->rank != 3 || v->dims[2] % a.kv_heads != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "value '%s' must be [B, T, kv_num_heads * d_v]",
                            ot_ctx_input_name(ctx, 2));
    a.dv = v->dims[2] / a.kv_heads;
    OT_TRY(check_packed(ctx, 1, k, a.batch, a.len, a.kv_heads * a.dk, 0));
    OT_TRY(check_packed(ctx, 2, v, a.batch, a.len, a.kv_heads * a.dv, 0));
    if (decay) OT_TRY(check_packed(ctx, 4, decay, a.batch, a.len, a.kv_heads, a.kv_heads * a.dk));
    if (beta) OT_TRY(check_packed(ctx, 5, beta, a.batch, a.len, a.kv_heads, 1));
    const int64_t sdims[4] = {a.batch, a.kv_heads, a.dk, a.dv};
    if (past && (past->rank != 4 || memcmp(past->dims, sdims, sizeof sdims) != 0))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "past_state '%s' must be [%lld, %lld, %lld, %lld]",
                            ot_ctx_input_name(ctx, 3), (long long)a.batch, (long long)a.kv_heads, (long long)a.dk,
                            (long long)a.dv);
    a.decay_width = decay ? decay->dims[2] : 0, a.beta_width = beta ? beta->dims[2] : 0;
    float scale = ot_ctx_attr_float_or(ctx, "scale", 0.0f);
    a.scale = scale != 0.0f ? scale : 1.0f / sqrtf((float)a.dk);

    const int64_t odims[3] = {a.batch, a.len, a.q_heads * a.dv};
    otter_tensor *y = ot_ctx_output(ctx, 0, q->dtype, 3, odims), *ps = NULL;
    if (!y) return ctx->output_status;
    if (ctx->n_outputs > 1 && !ot_str_empty(ctx->node->outputs[1]) &&
        !(ps = ot_ctx_output(ctx, 1, past ? past->dtype : q->dtype, 4, sdims)))
        return ctx->output_status;
    int64_t tasks = a.batch * a.kv_heads;
    float *tmp[6] = {0}, *ty = NULL, *tstate = NULL;
    const otter_tensor *in[6] = {q, k, v, past, decay, beta};
    const float **dst[6] = {&a.q, &a.k, &a.v, &a.past, &a.decay, &a.beta};
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < 6 && s == OTTER_OK; i++)
        if (in[i]) s = ot_ctx_input_f32(ctx, i, in[i], dst[i], &tmp[i]);
    if (s == OTTER_OK) s = ot_output_f32(y, &a.out, &ty);
    if (s == OTTER_OK && ps) s = ot_output_f32(ps, &a.state, &tstate);
    if (s == OTTER_OK && !ps && !(a.state = tstate = ot_malloc((size_t)(tasks * a.dk * a.dv + 1) * sizeof(float))))
        s = OT_NOMEM();
    if (s == OTTER_OK && !(a.scratch = ot_malloc((size_t)(tasks * a.dv + 1) * sizeof(float)))) s = OT_NOMEM();
    if (s == OTTER_OK) {
        ot_parallel_for(ctx, tasks, 1, lin_heads, &a);
        ot_output_f32_done(y, ty);
        ot_output_f32_done(ps, tstate);
    } else {
        ot_free(ty), ot_free(tstate);
    }
    ot_free(a.scratch);
    for (size_t i = 0; i < 6; i++) ot_free(tmp[i]);
    return s;
}
