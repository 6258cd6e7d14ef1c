/* CausalConvWithState (ai.onnx 27): depthwise causal 1D convolution over [B, C, L] carrying the
 * last k - 1 positions as state: with P = concat(past_state or zeros [B, C, k - 1], input) along
 * the length, output[t] = act(bias + sum_i weight[i] P[t + i]) (act: none, or silu / swish:
 * y * sigmoid(y)) and present_state = the last k - 1 positions of P. Float (half types convert). */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "runtime/ops/kernels.h"

typedef struct cconv_args {
    const float *x, *w, *bias, *past;
    float *y, *state;
    int64_t channels, len, k;
    bool silu;
} cconv_args;

/* The value of P at position p of channel row bc: past / zeros before k - 1, then the input. */
static float padded_at(const cconv_args *a, int64_t bc, int64_t p) {
    int64_t carry = a->k - 1;
    if (p >= carry) return a->x[bc * a->len + p - carry];
    return a->past ? a->past[bc * carry + p] : 0.0f;
}

static void cconv_rows(void *arg, int64_t begin, int64_t end) {
    const cconv_args *a = arg;
    int64_t carry = a->k - 1;
    for (int64_t bc = begin; bc < end; bc++) {
        const float *w = a->w + (bc % a->channels) * a->k, *x = a->x + bc * a->len;
        float bias = a->bias ? a->bias[bc % a->channels] : 0.0f, *y = a->y + bc * a->len;
        for (int64_t t = 0; t < a->len; t++) {
            float acc = bias;
            int64_t i = 0;
            for (; i < a->k && t + i < carry; i++) acc += w[i] * padded_at(a, bc, t + i);
            for (; i < a->k; i++) acc += w[i] * x[t + i - carry]; /* past the carry: straight from the input */
            y[t] = a->silu ? acc / (1.0f + expf(-acc)) : acc;
        }
        if (a->state)
            for (int64_t p = 0; p < carry; p++) a->state[bc * carry + p] = padded_at(a, bc, a->len + p);
    }
}

otter_status ot_kernel_causal_conv_with_state(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *w, *bias = ot_ctx_input(ctx, 2), *past = ot_ctx_input(ctx, 3);
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    OT_TRY(ot_ctx_float_input(ctx, 1, &w));
    const char *act = ot_ctx_attr_string_or(ctx, "activation", "none"); /* opset 27: no ONNX 1.12 schema */
    cconv_args a = {.silu = strcmp(act, "silu") == 0 || strcmp(act, "swish") == 0};
    if (!a.silu && strcmp(act, "none") != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "activation \"%s\" is not \"silu\", \"swish\" or \"none\"", act);
    if (x->rank != 3)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' must be [batch, channels, length], not rank %d",
                            ot_ctx_input_name(ctx, 0), x->rank);
    int64_t batch = x->dims[0];
    a.channels = x->dims[1], a.len = x->dims[2];
    if (w->rank != 3 || w->dims[0] != a.channels || w->dims[1] != 1 || w->dims[2] < 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "weight '%s' must be [%lld, 1, k] with k >= 1",
                            ot_ctx_input_name(ctx, 1), (long long)a.channels);
    a.k = w->dims[2];
    if (bias && otter_tensor_numel(bias) != a.channels)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "bias '%s' must hold %lld values", ot_ctx_input_name(ctx, 2),
                            (long long)a.channels);
    const int64_t sdims[3] = {batch, a.channels, a.k - 1};
    if (past && (past->rank != 3 || memcmp(past->dims, sdims, sizeof sdims) != 0))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "past_state '%s' must be [%lld, %lld, %lld]",
                            ot_ctx_input_name(ctx, 3), (long long)batch, (long long)a.channels, (long long)(a.k - 1));
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, 3, x->dims), *ps = NULL;
    if (!y) return ctx->output_status;
    if (ctx->n_outputs > 1 && !ot_str_empty(ctx->node->outputs[1]) && !(ps = ot_ctx_output(ctx, 1, x->dtype, 3, sdims)))
        return ctx->output_status;
    float *tmp[4] = {0}, *ty = NULL, *tstate = NULL;
    const otter_tensor *in[4] = {x, w, bias, past};
    const float **dst[4] = {&a.x, &a.w, &a.bias, &a.past};
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < 4 && s == OTTER_OK; i++)
        if (in[i]) s = ot_ctx_input_f32(ctx, i, in[i], dst[i], &tmp[i]);
    if (s == OTTER_OK) s = ot_output_f32(y, &a.y, &ty);
    if (s == OTTER_OK && ps) s = ot_output_f32(ps, &a.state, &tstate);
    if (s == OTTER_OK) {
        ot_parallel_for(ctx, batch * a.channels, 1 + 4096 / (a.len * a.k + 1), cconv_rows, &a);
        ot_output_f32_done(y, ty);
        ot_output_f32_done(ps, tstate);
    } else {
        ot_free(ty), ot_free(tstate);
    }
    for (size_t i = 0; i < 4; i++) ot_free(tmp[i]);
    return s;
}
