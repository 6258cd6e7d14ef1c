/* Gradient kernels of the normalizations, attention and resizing that ONNX Runtime has none for
 * (com.otter InstanceNormalizationGrad, GroupNormalizationGrad, AttentionGrad) or has one under
 * its own name (com.microsoft ResizeGrad). They recompute what the forward pass would otherwise
 * have to keep (a group's mean and inverse std, an attention head's probabilities): cheap next to
 * the gradient itself, and the forward node stays the standard operator. */
#include <math.h>
#include <string.h>

#include "runtime/ops/gemm.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/nn_internal.h"
#include "runtime/ops/training_internal.h"

/* ---- InstanceNormalizationGrad / GroupNormalizationGrad ---------------------------------------- */

typedef struct gn_grad_args {
    const float *dy, *x, *scale;
    float *dx;
    double *dscale_part, *dbias_part; /* [N * C]: per sample and channel, summed over N afterwards */
    int64_t groups, group_channels, spatial;
    bool per_channel;
    float eps;
} gn_grad_args;

/* One (sample, group): with xh = (x - mean) * inv and g = dY * scale,
 * dX = inv * (g - mean(g) - xh * mean(g * xh)); the scale and bias partials are sum(dY * xh), sum(dY)
 * per channel. */
static void gn_grad_groups(void *arg, int64_t begin, int64_t end) {
    const gn_grad_args *a = arg;
    int64_t size = a->group_channels * a->spatial;
    for (int64_t ng = begin; ng < end; ng++) {
        int64_t g = ng % a->groups;
        const float *x = a->x + ng * size, *dy = a->dy + ng * size;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < size; i++) mean += x[i];
        mean = size ? mean / (double)size : 0;
        for (int64_t i = 0; i < size; i++) var += (x[i] - mean) * (x[i] - mean);
        var = size ? var / (double)size : 0;
        double inv = 1.0 / sqrt(var + a->eps), sg = 0, sgx = 0;
        for (int64_t c = 0; c < a->group_channels; c++) {
            double gamma = a->scale[a->per_channel ? g * a->group_channels + c : g], sdy = 0, sdyx = 0;
            for (int64_t k = c * a->spatial; k < (c + 1) * a->spatial; k++) {
                double xh = (x[k] - mean) * inv;
                sdy += dy[k], sdyx += dy[k] * xh;
            }
            sg += gamma * sdy, sgx += gamma * sdyx;
            a->dscale_part[ng * a->group_channels + c] = sdyx;
            a->dbias_part[ng * a->group_channels + c] = sdy;
        }
        double mg = size ? sg / (double)size : 0, mgx = size ? sgx / (double)size : 0;
        for (int64_t c = 0; c < a->group_channels; c++) {
            double gamma = a->scale[a->per_channel ? g * a->group_channels + c : g];
            for (int64_t k = c * a->spatial; k < (c + 1) * a->spatial; k++) {
                double xh = (x[k] - mean) * inv;
                a->dx[ng * size + k] = (float)(inv * (dy[k] * gamma - mg - xh * mgx));
            }
        }
    }
}

/* (dY, X, scale) -> dX, dscale, dbias. Instance normalization is group normalization with one group
 * per channel; GroupNormalization's scale and bias hold one value per group (opset 18) or per
 * channel (opset 21), which the scale's size tells. */
static otter_status norm_grad(ot_kernel_ctx *ctx, bool instance) {
    const otter_tensor *dy, *x, *sc;
    OT_TRY(ot_train_need(ctx, 0, "dY", &dy));
    OT_TRY(ot_train_need(ctx, 1, "X", &x));
    OT_TRY(ot_train_need(ctx, 2, "scale", &sc));
    if (x->rank < 2 || !ot_train_same_shape(dy, x))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' and X '%s' must have one shape [N, C, ...]",
                            ot_ctx_input_name(ctx, 0), ot_ctx_input_name(ctx, 1));
    int64_t N = x->dims[0], C = x->dims[1];
    gn_grad_args a = {.spatial = 1, .groups = C};
    for (int i = 2; i < x->rank; i++) a.spatial *= x->dims[i];
    if (instance) {
        OT_TRY(ot_ctx_attr_float(ctx, "epsilon", &a.eps));
    } else {
        a.eps = ot_ctx_attr_float_or(ctx, "epsilon", 1e-5f); /* GroupNormalization: after ONNX 1.12 */
        a.groups = ot_ctx_attr_int_or(ctx, "num_groups", 0);
    }
    if (a.groups < 1 || C % a.groups != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "num_groups %lld does not divide the %lld channels",
                            (long long)a.groups, (long long)C);
    a.group_channels = C / a.groups;
    int64_t n_scale = otter_tensor_numel(sc);
    a.per_channel = n_scale == C;
    if (!a.per_channel && n_scale != a.groups)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "scale '%s' has %lld values, expected %lld (channels) or %lld (groups)",
                            ot_ctx_input_name(ctx, 2), (long long)n_scale, (long long)C, (long long)a.groups);
    float *tin[3] = {0}, *tout[3] = {0}, *out[3] = {0};
    otter_tensor *o[3] = {0};
    otter_status s = ot_train_in(ctx, 0, &a.dy, &tin[0]);
    if (s == OTTER_OK) s = ot_train_in(ctx, 1, &a.x, &tin[1]);
    if (s == OTTER_OK) s = ot_train_in(ctx, 2, &a.scale, &tin[2]);
    for (size_t k = 0; k < 3 && s == OTTER_OK; k++) {
        if (!ot_train_wanted(ctx, k)) continue;
        const otter_tensor *like = k == 0 ? x : sc;
        s = ot_train_out(ctx, k, x->dtype, like->rank, like->dims, &o[k], &out[k], &tout[k]);
    }
    double *part = s == OTTER_OK ? ot_malloc((size_t)(2 * N * C + 1) * sizeof(double)) : NULL;
    float *dx = s == OTTER_OK && !out[0] ? ot_malloc((size_t)(N * C * a.spatial + 1) * sizeof(float)) : NULL;
    if (s == OTTER_OK && (!part || (!out[0] && !dx))) s = OT_NOMEM();
    if (s == OTTER_OK) {
        a.dx = out[0] ? out[0] : dx;
        a.dscale_part = part, a.dbias_part = part + N * C;
        ot_parallel_for(ctx, N * a.groups, 1 + 16384 / (a.group_channels * a.spatial + 1), gn_grad_groups, &a);
        /* a value per channel, or per group: its channels' partials summed too */
        for (size_t k = 1; k < 3; k++) {
            if (!out[k]) continue;
            const double *p = k == 1 ? a.dscale_part : a.dbias_part;
            memset(out[k], 0, (size_t)n_scale * sizeof(float));
            for (int64_t n = 0; n < N; n++)
                for (int64_t c = 0; c < C; c++) out[k][a.per_channel ? c : c / a.group_channels] += (float)p[n * C + c];
        }
    }
    ot_free(part), ot_free(dx);
    return ot_train_finish(s, 3, o, tout, 3, tin);
}

otter_status ot_kernel_instancenorm_grad(ot_kernel_ctx *ctx) { return norm_grad(ctx, true); }
otter_status ot_kernel_group_normalization_grad(ot_kernel_ctx *ctx) { return norm_grad(ctx, false); }
