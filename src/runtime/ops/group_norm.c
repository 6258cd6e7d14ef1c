/* GroupNormalization: each sample's channels split into num_groups groups, each group normalized
 * over its channels and spatial positions, then scaled and shifted: per group (opset 18, scale and
 * bias [num_groups]) or per channel (opset 21, [C]). Statistics in double. */
#include <math.h>

#include "core/core.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"

otter_status ot_kernel_group_normalization(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *scale, *bias;
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    OT_TRY(ot_ctx_float_input(ctx, 1, &scale));
    OT_TRY(ot_ctx_float_input(ctx, 2, &bias));
    if (x->rank < 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' has rank %d, expected at least 2 [N, C, ...]",
                            ot_ctx_input_name(ctx, 0), x->rank);
    const otter_attr *groups_attr = otter_node_attr(ctx->node, "num_groups");
    if (!groups_attr || groups_attr->type != OTTER_ATTR_INT)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'num_groups' is required");
    int64_t groups = groups_attr->i, batch = x->dims[0], channels = x->dims[1], spatial = 1;
    for (int i = 2; i < x->rank; i++) spatial *= x->dims[i];
    if (groups < 1 || channels % groups != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "num_groups %lld does not divide the %lld channels",
                            (long long)groups, (long long)channels);
    bool per_channel = ctx->opset >= 21;
    int64_t want = per_channel ? channels : groups;
    if (otter_tensor_numel(scale) != want || otter_tensor_numel(bias) != want)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scale '%s' and bias '%s' need %lld values (one per %s)",
                            ot_ctx_input_name(ctx, 1), ot_ctx_input_name(ctx, 2), (long long)want,
                            per_channel ? "channel" : "group");
    double eps = ot_ctx_attr_float_or(ctx, "epsilon", 1e-5f); /* GroupNormalization-18: after ONNX 1.12 */
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return OTTER_ERR_NOMEM;
    int64_t group_channels = channels / groups, group_size = group_channels * spatial;
    for (int64_t n = 0; n < batch; n++)
        for (int64_t g = 0; g < groups; g++) {
            int64_t start = (n * channels + g * group_channels) * spatial;
            double sum = 0, sq = 0;
            for (int64_t k = 0; k < group_size; k++) sum += ot_get_f64(x->data, x->dtype, start + k);
            double mean = group_size ? sum / (double)group_size : 0;
            for (int64_t k = 0; k < group_size; k++) {
                double d = ot_get_f64(x->data, x->dtype, start + k) - mean;
                sq += d * d;
            }
            double inv_std = 1.0 / sqrt((group_size ? sq / (double)group_size : 0) + eps);
            for (int64_t k = 0; k < group_size; k++) {
                int64_t at = per_channel ? g * group_channels + k / spatial : g;
                double v = (ot_get_f64(x->data, x->dtype, start + k) - mean) * inv_std;
                v = v * ot_get_f64(scale->data, scale->dtype, at) + ot_get_f64(bias->data, bias->dtype, at);
                ot_set_f64(y->data, y->dtype, start + k, v);
            }
        }
    return OTTER_OK;
}
