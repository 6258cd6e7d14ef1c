/* Helpers the neural-network kernels share (nn_conv.c, nn_pool.c, nn_norm.c, nn_sample.c,
 * nn_losses.c): float views of inputs and outputs of any float type, the spatial geometry. */
#include "runtime/ops/nn_internal.h"

#include "core/core.h"
#include "runtime/ops/broadcast.h"

bool ot_nn_float_like(otter_dtype t) {
    return t == OTTER_DTYPE_FLOAT || t == OTTER_DTYPE_DOUBLE || t == OTTER_DTYPE_FLOAT16 || t == OTTER_DTYPE_BFLOAT16;
}

/* ---- spatial geometry (runtime/ops/conv_geom.h) ---------------------------------------------- */

/* ot_conv_geom_forward over X (N, C, spatial...); the kernel dims are in g->k already. */
otter_status ot_nn_geom_forward(const ot_kernel_ctx *ctx, const otter_tensor *x, ot_conv_geom *g, bool ceil_mode) {
    g->nd = x->rank - 2;
    g->N = x->dims[0], g->C = x->dims[1];
    for (int i = 0; i < g->nd; i++) g->in[i] = x->dims[2 + i];
    return ot_conv_geom_forward(ctx, g, ceil_mode);
}

otter_status ot_nn_check_x(const ot_kernel_ctx *ctx, const otter_tensor *x, int min_rank) {
    if (!x) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input X is missing");
    if (x->rank < min_rank || x->rank > 2 + OT_SP) {
        char b[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' %s: expected rank %d to %d (N, C, spatial...)",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(b, sizeof b, x->rank, x->dims), min_rank,
                            2 + OT_SP);
    }
    return OTTER_OK;
}

otter_status ot_nn_lp_pool_p(const ot_kernel_ctx *ctx, double *p) {
    if (ctx->opset < 2) {
        float f;
        OT_TRY(ot_ctx_attr_float(ctx, "p", &f));
        *p = f;
        return OTTER_OK;
    }
    int64_t i;
    OT_TRY(ot_ctx_attr_int(ctx, "p", &i));
    *p = (double)i;
    return OTTER_OK;
}
