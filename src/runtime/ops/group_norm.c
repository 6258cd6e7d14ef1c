/* GroupNormalization: each sample's channels split into num_groups groups, each group normalized
 * over its channels and spatial positions, then scaled and shifted: per group (opset 18, scale and
 * bias [num_groups]) or per channel (opset 21, [C]). One task per (sample, group) on the session's
 * threads; float (the half types and double convert), mean and variance accumulated in double over
 * 8 running sums, the normalize-scale-shift pass one multiply-add per value. */
#include <math.h>

#include "core/core.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"

typedef struct gn_args {
    const float *x, *scale, *bias;
    float *y;
    int64_t groups, group_channels, spatial;
    bool per_channel;
    float eps;
} gn_args;

static double sum8(const float *x, int64_t n, double shift, bool squares) {
    double acc[8] = {0}, s = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) {
            double d = x[i + l] - shift;
            acc[l] += squares ? d * d : d;
        }
    for (; i < n; i++) {
        double d = x[i] - shift;
        s += squares ? d * d : d;
    }
    for (int l = 0; l < 8; l++) s += acc[l];
    return s;
}

static void gn_groups(void *arg, int64_t begin, int64_t end) {
    const gn_args *a = arg;
    int64_t size = a->group_channels * a->spatial;
    for (int64_t ng = begin; ng < end; ng++) {
        int64_t g = ng % a->groups;
        const float *x = a->x + ng * size;
        float *y = a->y + ng * size;
        double mean = size ? sum8(x, size, 0, false) / (double)size : 0;
        double var = size ? sum8(x, size, mean, true) / (double)size : 0;
        float inv_std = (float)(1.0 / sqrt(var + a->eps));
        for (int64_t c = 0; c < a->group_channels; c++) {
            int64_t at = a->per_channel ? g * a->group_channels + c : g;
            float mul = inv_std * a->scale[at], add = a->bias[at] - (float)mean * mul;
            const float *xc = x + c * a->spatial;
            float *yc = y + c * a->spatial;
            for (int64_t k = 0; k < a->spatial; k++) yc[k] = xc[k] * mul + add;
        }
    }
}

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
    gn_args a = {.groups = groups_attr->i, .spatial = 1, .per_channel = ctx->opset >= 21};
    int64_t batch = x->dims[0], channels = x->dims[1];
    for (int i = 2; i < x->rank; i++) a.spatial *= x->dims[i];
    if (a.groups < 1 || channels % a.groups != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "num_groups %lld does not divide the %lld channels",
                            (long long)a.groups, (long long)channels);
    int64_t want = a.per_channel ? channels : a.groups;
    if (otter_tensor_numel(scale) != want || otter_tensor_numel(bias) != want)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scale '%s' and bias '%s' need %lld values (one per %s)",
                            ot_ctx_input_name(ctx, 1), ot_ctx_input_name(ctx, 2), (long long)want,
                            a.per_channel ? "channel" : "group");
    a.eps = ot_ctx_attr_float_or(ctx, "epsilon", 1e-5f); /* GroupNormalization-18: after ONNX 1.12 */
    a.group_channels = channels / a.groups;
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    float *tx = NULL, *ts = NULL, *tb = NULL, *ty = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, x, &a.x, &tx);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 1, scale, &a.scale, &ts);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 2, bias, &a.bias, &tb);
    if (s == OTTER_OK) s = ot_output_f32(y, &a.y, &ty);
    if (s == OTTER_OK) {
        ot_parallel_for(ctx, batch * a.groups, 1 + 16384 / (a.group_channels * a.spatial + 1), gn_groups, &a);
        ot_output_f32_done(y, ty);
    }
    ot_free(tx), ot_free(ts), ot_free(tb);
    return s;
}
