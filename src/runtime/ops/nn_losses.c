/* Loss kernels: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/nn_internal.h"

/* ---- NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss --------------------------------------- */

/* loss over log-probabilities lp (N, C, D) with targets (N, D). Writes the output tensor 0. */
static otter_status nll_common(ot_kernel_ctx *ctx, const otter_tensor *in, const double *lp, const otter_tensor *target,
                               const otter_tensor *weight) {
    char s1[128], s2[128];
    int64_t N = in->dims[0], C = in->dims[1], D = 1;
    for (int i = 2; i < in->rank; i++) D *= in->dims[i];
    bool shape_ok = target->rank == in->rank - 1 && target->dims[0] == N;
    for (int i = 2; shape_ok && i < in->rank; i++) shape_ok = target->dims[i - 1] == in->dims[i];
    if (!shape_ok)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "target '%s' %s does not match input %s (N, C, d1, ...)",
                            ot_ctx_input_name(ctx, 1), ot_shape_str(s1, sizeof s1, target->rank, target->dims),
                            ot_shape_str(s2, sizeof s2, in->rank, in->dims));
    if (target->dtype != OTTER_DTYPE_INT64 && target->dtype != OTTER_DTYPE_INT32)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "target '%s' must be int32 or int64, not %s",
                            ot_ctx_input_name(ctx, 1), otter_dtype_name(target->dtype));
    if (weight && otter_tensor_numel(weight) != C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "weight '%s' has %lld elements, expected C = %lld",
                            ot_ctx_input_name(ctx, 2), (long long)otter_tensor_numel(weight), (long long)C);
    const otter_attr *iia = otter_node_attr(ctx->node, "ignore_index");
    bool has_ii = iia != NULL;
    int64_t ii = has_ii ? iia->i : 0;
    const char *red;
    OT_TRY(ot_ctx_attr_string(ctx, "reduction", &red));
    int rmode = strcmp(red, "none") == 0 ? 0 : strcmp(red, "sum") == 0 ? 1 : strcmp(red, "mean") == 0 ? 2 : -1;
    if (rmode < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown reduction '%s'", red);
    otter_tensor *y;
    if (rmode == 0)
        y = ot_ctx_output(ctx, 0, in->dtype, target->rank, target->dims);
    else
        y = ot_ctx_output(ctx, 0, in->dtype, 0, NULL);
    if (!y) return ctx->output_status;
    int64_t nt = N * D;
    double *l = ot_malloc((size_t)(nt > 0 ? nt : 1) * sizeof(double));
    if (!l) return OT_NOMEM();
    double wsum = 0, lsum = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) {
            int64_t t = ot_get_i64(target->data, target->dtype, n * D + d);
            if (has_ii && t == ii) {
                l[n * D + d] = 0;
                continue;
            }
            if (t < 0 || t >= C) {
                ot_free(l);
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "target '%s' value %lld out of range [0, %lld)",
                                    ot_ctx_input_name(ctx, 1), (long long)t, (long long)C);
            }
            double w = weight ? ot_get_f64(weight->data, weight->dtype, t) : 1.0;
            double v = -lp[(n * C + t) * D + d] * w;
            l[n * D + d] = v;
            wsum += w, lsum += v;
        }
    if (rmode == 0)
        ot_convert(y->data, y->dtype, l, OTTER_DTYPE_DOUBLE, nt);
    else
        ot_set_f64(y->data, y->dtype, 0, rmode == 1 ? lsum : (wsum != 0 ? lsum / wsum : 0.0 * lsum / wsum));
    ot_free(l);
    return OTTER_OK;
}

static otter_status nll_check(const ot_kernel_ctx *ctx, const otter_tensor **in, const otter_tensor **target) {
    *in = ot_ctx_input(ctx, 0), *target = ot_ctx_input(ctx, 1);
    if (!*in || !*target) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs inputs input and target");
    if ((*in)->rank < 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' must have rank >= 2 (N, C, ...)",
                            ot_ctx_input_name(ctx, 0));
    if (!ot_nn_float_like((*in)->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s': dtype %s not supported", ot_ctx_input_name(ctx, 0),
                            otter_dtype_name((*in)->dtype));
    return OTTER_OK;
}

otter_status ot_kernel_nllloss(ot_kernel_ctx *ctx) {
    const otter_tensor *in, *target;
    OT_TRY(nll_check(ctx, &in, &target));
    int64_t n = otter_tensor_numel(in);
    double *lp = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!lp) return OT_NOMEM();
    ot_convert(lp, OTTER_DTYPE_DOUBLE, in->data, in->dtype, n);
    otter_status s = nll_common(ctx, in, lp, target, ot_ctx_input(ctx, 2));
    ot_free(lp);
    return s;
}

otter_status ot_kernel_sce(ot_kernel_ctx *ctx) {
    const otter_tensor *in, *target;
    OT_TRY(nll_check(ctx, &in, &target));
    int64_t n = otter_tensor_numel(in), N = in->dims[0], C = in->dims[1], D = n / (N * C > 0 ? N * C : 1);
    double *lp = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!lp) return OT_NOMEM();
    ot_convert(lp, OTTER_DTYPE_DOUBLE, in->data, in->dtype, n);
    for (int64_t i = 0; i < N; i++)
        for (int64_t d = 0; d < D; d++) {
            double *p = lp + i * C * D + d, m = -INFINITY, s = 0;
            for (int64_t c = 0; c < C; c++) m = p[c * D] > m ? p[c * D] : m;
            for (int64_t c = 0; c < C; c++) s += exp(p[c * D] - m);
            double ls = m + log(s);
            for (int64_t c = 0; c < C; c++) p[c * D] -= ls;
        }
    otter_status s = nll_common(ctx, in, lp, target, ot_ctx_input(ctx, 2));
    if (s == OTTER_OK && ctx->node->n_outputs > 1 && !ot_str_empty(ctx->node->outputs[1])) {
        otter_tensor *y = ot_ctx_output(ctx, 1, in->dtype, in->rank, in->dims);
        if (!y)
            s = ctx->output_status;
        else
            ot_convert(y->data, y->dtype, lp, OTTER_DTYPE_DOUBLE, n);
    }
    ot_free(lp);
    return s;
}
