/* Gelu (ai.onnx, opset 20: exact or tanh approximation), the sigmoid-gated family x * sigmoid(alpha * x):
 * com.microsoft QuickGelu, ai.onnx Swish (24), and SwiGLU (28: Swish(A) * B), elementwise over the floating
 * types, computed in double. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"

typedef double (*unary_fn)(double x, double param);

static double gelu_exact(double x, double unused) {
    (void)unused;
    return 0.5 * x * (1.0 + erf(x * M_SQRT1_2));
}

static double gelu_tanh(double x, double unused) {
    (void)unused;
    const double sqrt_2_over_pi = 0.7978845608028654;
    return 0.5 * x * (1.0 + tanh(sqrt_2_over_pi * (x + 0.044715 * x * x * x)));
}

/* QuickGelu and Swish */
static double sigmoid_gated(double x, double alpha) { return x / (1.0 + exp(-alpha * x)); }

static otter_status elementwise(ot_kernel_ctx *ctx, unary_fn fn, double param) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return OTTER_ERR_NOMEM;
    int64_t n = otter_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) ot_set_f64(y->data, y->dtype, i, fn(ot_get_f64(x->data, x->dtype, i), param));
    return OTTER_OK;
}

otter_status ot_kernel_onnx_gelu(ot_kernel_ctx *ctx) {
    /* ai.onnx Gelu is from opset 20 and com.microsoft's has no schema: neither is in ONNX 1.12 */
    const char *approximate = ot_ctx_attr_string_or(ctx, "approximate", "none");
    if (strcmp(approximate, "none") == 0) return elementwise(ctx, gelu_exact, 0);
    if (strcmp(approximate, "tanh") == 0) return elementwise(ctx, gelu_tanh, 0);
    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'approximate' must be \"none\" or \"tanh\", not \"%s\"",
                        approximate);
}

otter_status ot_kernel_quick_gelu(ot_kernel_ctx *ctx) {
    return elementwise(ctx, sigmoid_gated, ot_ctx_attr_float_or(ctx, "alpha", 1.702f)); /* com.microsoft: no schema */
}

otter_status ot_kernel_swish(ot_kernel_ctx *ctx) {
    return elementwise(ctx, sigmoid_gated, ot_ctx_attr_float_or(ctx, "alpha", 1.0f)); /* Swish-24: no 1.12 schema */
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
    double alpha = ot_ctx_attr_float_or(ctx, "alpha", 1.0f); /* SwiGLU-28: no 1.12 schema */
    otter_tensor *y = ot_ctx_output(ctx, 0, a->dtype, a->rank, a->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(a);
    for (int64_t i = 0; i < n; i++)
        ot_set_f64(y->data, y->dtype, i,
                   sigmoid_gated(ot_get_f64(a->data, a->dtype, i), alpha) * ot_get_f64(b->data, b->dtype, i));
    return OTTER_OK;
}
