/* SoftmaxCrossEntropyLossInternal and the SoftmaxCrossEntropyLoss(Internal)Grad kernels. */
#include <math.h>
#include <string.h>

#include "runtime/ops/kernels.h"
#include "runtime/ops/training_internal.h"

/* ---- SoftmaxCrossEntropyLoss: Internal forward and the gradients --------------------------------------- */

typedef struct sce_geom {
    int64_t N, C, D; /* log_prob (N, C, D...), labels (N, D...) */
    int red;         /* 0 none, 1 sum, 2 mean */
    bool has_ii;
    int64_t ii;
} sce_geom;

/* Shapes, reduction and ignore_index (attribute, or the scalar input ii_input when given). */
static otter_status sce_setup(const ot_kernel_ctx *ctx, const otter_tensor *lp, const otter_tensor *lab,
                              size_t weight_i, size_t ii_input, sce_geom *g) {
    char s1[128], s2[128];
    if (lp->rank < 2 || !ot_train_is_float(lp->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scores/log_prob must be a float tensor of rank >= 2 (N, C, ...)");
    g->N = lp->dims[0], g->C = lp->dims[1], g->D = 1;
    for (int i = 2; i < lp->rank; i++) g->D *= lp->dims[i];
    bool ok = lab->rank == lp->rank - 1 && lab->dims[0] == g->N;
    for (int i = 2; ok && i < lp->rank; i++) ok = lab->dims[i - 1] == lp->dims[i];
    if (!ok || (lab->dtype != OTTER_DTYPE_INT64 && lab->dtype != OTTER_DTYPE_INT32))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "labels '%s' %s must be int32/int64 shaped like %s without axis 1",
                            ot_ctx_input_name(ctx, weight_i - 1), ot_shape_str(s1, sizeof s1, lab->rank, lab->dims),
                            ot_shape_str(s2, sizeof s2, lp->rank, lp->dims));
    const otter_tensor *w = ot_ctx_input(ctx, weight_i);
    if (w && otter_tensor_numel(w) != g->C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "weight '%s' has %lld elements, expected C = %lld",
                            ot_ctx_input_name(ctx, weight_i), (long long)otter_tensor_numel(w), (long long)g->C);
    const char *red = ot_ctx_attr_string_or(ctx, "reduction", "mean"); /* ONNX Runtime's operator: no ONNX schema */
    g->red = strcmp(red, "none") == 0 ? 0 : strcmp(red, "sum") == 0 ? 1 : strcmp(red, "mean") == 0 ? 2 : -1;
    if (g->red < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown reduction '%s'", red);
    const otter_attr *a = otter_node_attr(ctx->node, "ignore_index");
    g->has_ii = a != NULL;
    g->ii = a ? a->i : 0;
    const otter_tensor *iit = ii_input ? ot_ctx_input(ctx, ii_input) : NULL;
    if (iit) {
        if (otter_tensor_numel(iit) != 1)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "ignore_index '%s' must hold one value",
                                ot_ctx_input_name(ctx, ii_input));
        g->has_ii = true;
        g->ii = ot_get_i64(iit->data, iit->dtype, 0);
    }
    return OTTER_OK;
}

/* Label at (n, d): -1 when ignored; error when out of range. */
static otter_status sce_label(const ot_kernel_ctx *ctx, const otter_tensor *lab, const sce_geom *g, int64_t k,
                              int64_t *t) {
    int64_t v = ot_get_i64(lab->data, lab->dtype, k);
    if (g->has_ii && v == g->ii) {
        *t = -1;
        return OTTER_OK;
    }
    if (v < 0 || v >= g->C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "label value %lld out of range [0, %lld)", (long long)v,
                            (long long)g->C);
    *t = v;
    return OTTER_OK;
}

/* SoftmaxCrossEntropyLossInternal(scores, labels, weight?, ignore_index?) -> output, log_prob?:
 * SoftmaxCrossEntropyLoss with ignore_index optionally given as an input. */
otter_status ot_kernel_sce_loss_internal(ot_kernel_ctx *ctx) {
    const otter_tensor *sc, *lab;
    OT_TRY(ot_train_need(ctx, 0, "scores", &sc));
    OT_TRY(ot_train_need(ctx, 1, "labels", &lab));
    sce_geom g;
    OT_TRY(sce_setup(ctx, sc, lab, 2, 3, &g));
    const otter_tensor *w = ot_ctx_input(ctx, 2);
    int64_t n = otter_tensor_numel(sc), nt = g.N * g.D;
    double *lp = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    double *l = ot_malloc((size_t)(nt > 0 ? nt : 1) * sizeof(double));
    otter_status s = lp && l ? OTTER_OK : OT_NOMEM();
    if (s == OTTER_OK) ot_convert(lp, OTTER_DTYPE_DOUBLE, sc->data, sc->dtype, n);
    for (int64_t i = 0; s == OTTER_OK && i < g.N; i++)
        for (int64_t d = 0; d < g.D; d++) {
            double *p = lp + i * g.C * g.D + d, m = -INFINITY, sum = 0;
            for (int64_t c = 0; c < g.C; c++) m = p[c * g.D] > m ? p[c * g.D] : m;
            for (int64_t c = 0; c < g.C; c++) sum += exp(p[c * g.D] - m);
            double ls = m + log(sum);
            for (int64_t c = 0; c < g.C; c++) p[c * g.D] -= ls;
        }
    double wsum = 0, lsum = 0;
    for (int64_t i = 0; s == OTTER_OK && i < g.N; i++)
        for (int64_t d = 0; d < g.D && s == OTTER_OK; d++) {
            int64_t t = 0;
            s = sce_label(ctx, lab, &g, i * g.D + d, &t);
            if (s != OTTER_OK) break;
            if (t < 0) {
                l[i * g.D + d] = 0;
                continue;
            }
            double wt = w ? ot_get_f64(w->data, w->dtype, t) : 1.0;
            l[i * g.D + d] = -lp[(i * g.C + t) * g.D + d] * wt;
            wsum += wt, lsum += l[i * g.D + d];
        }
    otter_tensor *y = NULL;
    if (s == OTTER_OK) {
        y = g.red == 0 ? ot_ctx_output(ctx, 0, sc->dtype, lab->rank, lab->dims)
                       : ot_ctx_output(ctx, 0, sc->dtype, 0, NULL);
        if (!y) s = ctx->output_status;
    }
    if (s == OTTER_OK) {
        if (g.red == 0)
            ot_convert(y->data, y->dtype, l, OTTER_DTYPE_DOUBLE, nt);
        else
            ot_set_f64(y->data, y->dtype, 0, g.red == 1 ? lsum : (wsum != 0 ? lsum / wsum : 0.0));
        if (ot_train_wanted(ctx, 1)) {
            otter_tensor *o = ot_ctx_output(ctx, 1, sc->dtype, sc->rank, sc->dims);
            if (!o)
                s = ctx->output_status;
            else
                ot_convert(o->data, o->dtype, lp, OTTER_DTYPE_DOUBLE, n);
        }
    }
    ot_free(lp), ot_free(l);
    return s;
}

/* SoftmaxCrossEntropyLossGrad(dY, log_prob, label, weight?) and
 * SoftmaxCrossEntropyLossInternalGrad(dY, log_prob, label, weight?, ignore_index?, bias?) -> dX:
 * dX[n,c,d] = (exp(log_prob) - [c == label]) * w[label] * g, g = dY[n,d] (none), dY (sum) or
 * dY / (sum of w over labels not ignored) (mean); ignored positions get 0; bias is added. */
otter_status ot_kernel_sce_loss_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *lp, *lab;
    OT_TRY(ot_train_need(ctx, 0, "dY", &dy));
    OT_TRY(ot_train_need(ctx, 1, "log_prob", &lp));
    OT_TRY(ot_train_need(ctx, 2, "label", &lab));
    bool internal = strcmp(ctx->node->op_type, "SoftmaxCrossEntropyLossInternalGrad") == 0;
    sce_geom g;
    OT_TRY(sce_setup(ctx, lp, lab, 3, internal ? 4 : 0, &g));
    const otter_tensor *w = ot_ctx_input(ctx, 3), *bias = internal ? ot_ctx_input(ctx, 5) : NULL;
    int64_t nt = g.N * g.D;
    if (otter_tensor_numel(dy) != (g.red == 0 ? nt : 1))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' has %lld elements, expected %lld",
                            ot_ctx_input_name(ctx, 0), (long long)otter_tensor_numel(dy),
                            (long long)(g.red == 0 ? nt : 1));
    if (bias && otter_tensor_numel(bias) != otter_tensor_numel(lp))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "bias '%s' must have log_prob's size", ot_ctx_input_name(ctx, 5));
    double wsum = 0;
    for (int64_t k = 0; k < nt; k++) {
        int64_t t = 0;
        OT_TRY(sce_label(ctx, lab, &g, k, &t));
        if (t >= 0) wsum += w ? ot_get_f64(w->data, w->dtype, t) : 1.0;
    }
    const float *LP, *B = NULL;
    float *t0 = NULL, *t1 = NULL, *ty = NULL, *DX;
    otter_tensor *dx;
    otter_status s = ot_train_in(ctx, 1, &LP, &t0);
    if (s == OTTER_OK && bias) s = ot_train_in(ctx, 5, &B, &t1);
    if (s == OTTER_OK) s = ot_train_out(ctx, 0, lp->dtype, lp->rank, lp->dims, &dx, &DX, &ty);
    if (s == OTTER_OK) {
        for (int64_t i = 0; i < g.N; i++)
            for (int64_t d = 0; d < g.D; d++) {
                int64_t k = i * g.D + d, t = 0;
                sce_label(ctx, lab, &g, k, &t);
                double gd = g.red == 0 ? ot_get_f64(dy->data, dy->dtype, k) : ot_get_f64(dy->data, dy->dtype, 0);
                if (g.red == 2) gd = wsum != 0 ? gd / wsum : 0.0;
                double f = t < 0 ? 0.0 : (w ? ot_get_f64(w->data, w->dtype, t) : 1.0) * gd;
                for (int64_t c = 0; c < g.C; c++) {
                    int64_t j = (i * g.C + c) * g.D + d;
                    double v = f == 0.0 ? 0.0 : (exp((double)LP[j]) - (c == t ? 1.0 : 0.0)) * f;
                    DX[j] = (float)v + (B ? B[j] : 0.0f);
                }
            }
        ot_output_f32_done(dx, ty);
    } else {
        ot_free(ty);
    }
    ot_free(t0), ot_free(t1);
    return s;
}
