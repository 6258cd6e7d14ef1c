/* Input checks every kernel family shares (declared in runtime/op.h). */
#include "core/core.h"
#include "runtime/op.h"

const char *ot_ctx_input_name(const ot_kernel_ctx *ctx, size_t i) {
    if (!ctx->node || i >= ctx->node->n_inputs || !ctx->node->inputs[i]) return "";
    return ctx->node->inputs[i];
}

otter_status ot_ctx_need_input(const ot_kernel_ctx *ctx, size_t i, const otter_tensor **t) {
    *t = ot_ctx_input(ctx, i);
    if (!*t) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is missing", i);
    return OTTER_OK;
}

otter_status ot_ctx_bad_type(const ot_kernel_ctx *ctx, size_t i, otter_dtype t) {
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input %zu '%s' has type %s, which %s does not support", i,
                        ot_ctx_input_name(ctx, i), otter_dtype_name(t), ctx->node->op_type);
}

otter_status ot_ctx_float_input(const ot_kernel_ctx *ctx, size_t i, const otter_tensor **t) {
    OT_TRY(ot_ctx_need_input(ctx, i, t));
    if (!otter_dtype_is_float((*t)->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' has element type %s, expected a floating type", i,
                            ot_ctx_input_name(ctx, i), otter_dtype_name((*t)->dtype));
    return OTTER_OK;
}
