/* TensorScatter (ai.onnx 24): present_cache = past_cache with `update` written along the sequence
 * axis at write_indices[batch] (0 when omitted), wrapping modulo the cache length in "circular"
 * mode. Any fixed-size element type: rows of the dims after the axis are copied as bytes. */
#include <string.h>

#include "core/core.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"

otter_status ot_kernel_tensor_scatter(ot_kernel_ctx *ctx) {
    const otter_tensor *past, *update, *idx = ot_ctx_input(ctx, 2);
    OT_TRY(ot_ctx_need_input(ctx, 0, &past));
    OT_TRY(ot_ctx_need_input(ctx, 1, &update));
    size_t es = otter_dtype_size(past->dtype);
    if (es == 0) return ot_ctx_bad_type(ctx, 0, past->dtype);
    int64_t axis = ot_ctx_attr_int_or(ctx, "axis", -2); /* TensorScatter-24: no 1.12 schema */
    const char *mode = ot_ctx_attr_string_or(ctx, "mode", "linear");
    bool circular = strcmp(mode, "circular") == 0;
    if (!circular && strcmp(mode, "linear") != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "mode must be \"linear\" or \"circular\", not \"%s\"", mode);
    if (!ot_norm_axis(&axis, past->rank) || axis == 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis out of range or the batch axis for rank %d", past->rank);
    bool same = update->dtype == past->dtype && update->rank == past->rank;
    for (int i = 0; same && i < past->rank; i++) same = i == axis || update->dims[i] == past->dims[i];
    if (!same) {
        char sp[128], su[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "update '%s' %s must match past_cache '%s' %s off axis %lld",
                            ot_ctx_input_name(ctx, 1), ot_shape_str(su, sizeof su, update->rank, update->dims),
                            ot_ctx_input_name(ctx, 0), ot_shape_str(sp, sizeof sp, past->rank, past->dims),
                            (long long)axis);
    }
    int64_t batch = past->dims[0], max_len = past->dims[axis], len = update->dims[axis], outer = 1, inner = 1;
    for (int i = 0; i < past->rank; i++)
        if (i < axis)
            outer *= past->dims[i];
        else if (i > axis)
            inner *= past->dims[i];
    if (idx && (idx->dtype != OTTER_DTYPE_INT64 || otter_tensor_numel(idx) != batch))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "write_indices '%s' must be int64 of shape (batch %lld)",
                            ot_ctx_input_name(ctx, 2), (long long)batch);
    const int64_t *at = idx ? idx->data : NULL;
    for (int64_t b = 0; at && b < batch; b++)
        if (at[b] < 0 || (!circular && at[b] + len > max_len))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "write_indices[%lld] = %lld: %lld rows don't fit the cache length %lld", (long long)b,
                                (long long)at[b], (long long)len, (long long)max_len);
    otter_tensor *y = ot_ctx_output(ctx, 0, past->dtype, past->rank, past->dims);
    if (!y) return ctx->output_status;
    if (y->data != past->data) memcpy(y->data, past->data, (size_t)otter_tensor_numel(past) * es);
    if (max_len == 0) return OTTER_OK;
    size_t row = (size_t)inner * es;
    int64_t per_batch = outer / batch;
    for (int64_t o = 0; o < outer; o++) {
        int64_t start = at ? at[o / per_batch] : 0;
        for (int64_t s = 0; s < len; s++) {
            int64_t dst = (start + s) % max_len; /* linear mode was checked to stay below max_len */
            memcpy((char *)y->data + (size_t)(o * max_len + dst) * row,
                   (const char *)update->data + (size_t)(o * len + s) * row, row);
        }
    }
    return OTTER_OK;
}
