/* Gelu (ai.onnx, opset 20: exact or tanh approximation) and the sigmoid-gated family
 * x * sigmoid(alpha * x): com.microsoft QuickGelu, ai.onnx Swish (24) and SwiGLU (28: Swish(A) * B).
 * float, float16 and bfloat16 run vec_math's float kernels (AVX2 when the CPU has it) over chunks
 * split across the session's threads; double is computed in double with libm. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/vec_math.h"

static double act_f64(ot_vec_act act, double alpha, double x) {
    switch (act) {
    case OT_VEC_GELU_ERF:
        return 0.5 * x * (1.0 + erf(x * M_SQRT1_2));
    case OT_VEC_GELU_TANH:
        return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case OT_VEC_SWISH:
        return x / (1.0 + exp(-alpha * x));
    case OT_VEC_SIGMOID:
        return 1.0 / (1.0 + exp(-x));
    case OT_VEC_TANH:
        return tanh(x);
    case OT_VEC_HARDSWISH:
        return x * fmax(0.0, fmin(1.0, x / 6.0 + 0.5));
    }
    return x;
}

typedef struct act_args {
    ot_vec_act act;
    float alpha;
    const float *x, *gate;
    float *y;
} act_args;

static void act_chunk(void *arg, int64_t begin, int64_t end) {
    const act_args *a = arg;
    ot_vec_activation(a->act, a->alpha, a->x + begin, a->gate ? a->gate + begin : NULL, a->y + begin, end - begin);
}

/* y = act(x) (* gate when gate is given: same type and shape as x, checked by the caller). */
static otter_status activation(ot_kernel_ctx *ctx, ot_vec_act act, float alpha, const otter_tensor *x,
                               const otter_tensor *gate) {
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(x);
    if (x->dtype == OTTER_DTYPE_DOUBLE) {
        const double *xd = x->data, *gd = gate ? gate->data : NULL;
        double *yd = y->data;
        for (int64_t i = 0; i < n; i++) yd[i] = act_f64(act, alpha, xd[i]) * (gd ? gd[i] : 1.0);
        return OTTER_OK;
    }
    act_args a = {.act = act, .alpha = alpha};
    float *tx = NULL, *tg = NULL, *ty = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, x, &a.x, &tx);
    if (s == OTTER_OK && gate) s = ot_ctx_input_f32(ctx, 1, gate, &a.gate, &tg);
    if (s == OTTER_OK) s = ot_output_f32(y, &a.y, &ty);
    if (s == OTTER_OK) {
        ot_parallel_for(ctx, n, 16384, act_chunk, &a);
        ot_output_f32_done(y, ty);
    }
    ot_free(tx), ot_free(tg);
    return s;
}

otter_status ot_kernel_onnx_gelu(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    /* ai.onnx Gelu is from opset 20 and com.microsoft's has no schema: neither is in ONNX 1.12 */
    const char *approximate = ot_ctx_attr_string_or(ctx, "approximate", "none");
    if (strcmp(approximate, "none") == 0) return activation(ctx, OT_VEC_GELU_ERF, 0, x, NULL);
    if (strcmp(approximate, "tanh") == 0) return activation(ctx, OT_VEC_GELU_TANH, 0, x, NULL);
    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'approximate' must be \"none\" or \"tanh\", not \"%s\"",
                        approximate);
}

otter_status ot_kernel_quick_gelu(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    return activation(ctx, OT_VEC_SWISH, ot_ctx_attr_float_or(ctx, "alpha", 1.702f), x, NULL); /* com.microsoft */
}

otter_status ot_kernel_swish(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    return activation(ctx, OT_VEC_SWISH, ot_ctx_attr_float_or(ctx, "alpha", 1.0f), x, NULL); /* Swish-24 */
}

otter_status ot_kernel_swiglu(ot_kernel_ctx *ctx) {
    const otter_tensor *a, *b;
    OT_TRY(ot_ctx_float_input(ctx, 0, &a));
    OT_TRY(ot_ctx_float_input(ctx, 1, &b));
    bool same = a->dtype == b->dtype && a->rank == b->rank;
    for (int i = 0; same && i < a->rank; i++) same = a->dims[i] == b->dims[i];
    if (!same) {
        char sa[128], sb[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "A '%s' %s and B '%s' %s must have the same type and shape",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(sa, sizeof sa, a->rank, a->dims),
                            ot_ctx_input_name(ctx, 1), ot_shape_str(sb, sizeof sb, b->rank, b->dims));
    }
    return activation(ctx, OT_VEC_SWISH, ot_ctx_attr_float_or(ctx, "alpha", 1.0f), a, b); /* SwiGLU-28 */
}
