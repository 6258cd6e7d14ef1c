/* LpNormalization and GlobalLpPool: the p-norm of each line along an axis, or of each channel's
 * spatial values. Sums are accumulated in double. */
#include <math.h>

#include "core/core.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/nn_internal.h"

/* (sum |v|^p)^(1/p) over n values `stride` apart from element `start` of x */
static double lp_norm(const otter_tensor *x, int64_t start, int64_t n, int64_t stride, double p) {
    double sum = 0;
    for (int64_t k = 0; k < n; k++) {
        double v = fabs(ot_get_f64(x->data, x->dtype, start + k * stride));
        sum += p == 1 ? v : p == 2 ? v * v : pow(v, p);
    }
    return p == 1 ? sum : p == 2 ? sqrt(sum) : pow(sum, 1.0 / p);
}

/* y = x / ||x||_p along axis (p 1 or 2); a line whose norm is 0 gives zeros, as in ONNX Runtime */
otter_status ot_kernel_lp_normalization(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    int64_t p, axis;
    OT_TRY(ot_ctx_attr_int(ctx, "p", &p));
    OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis));
    if (p != 1 && p != 2) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "p is %lld, expected 1 or 2", (long long)p);
    int64_t given = axis;
    if (x->rank == 0 || !ot_norm_axis(&axis, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld is out of range for input '%s' of rank %d",
                            (long long)given, ot_ctx_input_name(ctx, 0), x->rank);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return OTTER_ERR_NOMEM;
    int64_t outer = 1, len = x->dims[axis], inner = 1;
    for (int i = 0; i < axis; i++) outer *= x->dims[i];
    for (int i = (int)axis + 1; i < x->rank; i++) inner *= x->dims[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            int64_t start = o * len * inner + in;
            double norm = lp_norm(x, start, len, inner, (double)p);
            double scale = norm != 0 ? 1.0 / norm : 0.0;
            for (int64_t k = 0; k < len; k++) {
                int64_t e = start + k * inner;
                ot_set_f64(y->data, y->dtype, e, ot_get_f64(x->data, x->dtype, e) * scale);
            }
        }
    return OTTER_OK;
}

/* X [N, C, D...] -> [N, C, 1...]: the p-norm of each channel's spatial values */
otter_status ot_kernel_global_lp_pool(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    double p;
    OT_TRY(ot_nn_lp_pool_p(ctx, &p));
    if (!(p >= 1)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "p is %g, expected at least 1", p);
    if (x->rank < 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' has rank %d, expected at least 2 [N, C, ...]",
                            ot_ctx_input_name(ctx, 0), x->rank);
    int64_t dims[OTTER_MAX_RANK], spatial = 1;
    for (int i = 0; i < x->rank; i++) {
        dims[i] = i < 2 ? x->dims[i] : 1;
        if (i >= 2) spatial *= x->dims[i];
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, dims);
    if (!y) return OTTER_ERR_NOMEM;
    int64_t channels = x->dims[0] * x->dims[1];
    for (int64_t c = 0; c < channels; c++) ot_set_f64(y->data, y->dtype, c, lp_norm(x, c * spatial, spatial, 1, p));
    return OTTER_OK;
}
