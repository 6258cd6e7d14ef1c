/* com.otter AttentionCoreGrad (runtime/fuse.c): the gradient of Y = Softmax(S) V with S = Qs Kt, as ONNX
 * Runtime's gradient builders write it for an exported attention (two products for dP and dV, SoftmaxGrad,
 * two products for dQs and dKt), one batch (head) at a time so that its T x S scores stay in cache:
 *
 *     dP = dY V^T, dV = P^T dY, dS = P * (dP - rowsum(dP * P)), dQs = alpha_q dS Kt^T, dKt = alpha_k Qs^T dS
 *
 * Inputs (dY, V, P, Kt, Qs): [N..., T, dv], [N..., S, dv], [N..., T, S], [N..., dk, S], [N..., T, dk] with
 * the same batch dims N..., or one batch that every batch shares. Outputs (dQs, dKt, dV), each optional,
 * with dY's batch dims. The unfused nodes' products per batch and SoftmaxGrad's lines: the same bits. */
#include <string.h>

#include "runtime/ops/gemm.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/training_internal.h"

typedef struct core_grad {
    const float *dy, *v, *p, *kt, *qs; /* batch t's operand at base + t * stride (stride 0: shared) */
    int64_t s_dy, s_v, s_p, s_kt, s_qs;
    float *dqs, *dkt, *dv; /* outputs (NULL: not wanted), contiguous per batch */
    int64_t T, S, dv_w, dk;
    float alpha_q, alpha_k;
    _Atomic otter_status status;
} core_grad;

static void core_grad_batches(void *arg, int64_t t0, int64_t t1) {
    core_grad *g = arg;
    const int64_t T = g->T, S = g->S, dv = g->dv_w, dk = g->dk;
    float *ds = ot_malloc((size_t)(T * S) * sizeof(float)); /* T * S > 0: the kernel returned before */
    otter_status s = ds ? OTTER_OK : OTTER_ERR_NOMEM;
    for (int64_t t = t0; t < t1 && s == OTTER_OK; t++) {
        const float *dy = g->dy + t * g->s_dy, *v = g->v + t * g->s_v, *p = g->p + t * g->s_p;
        const float *kt = g->kt + t * g->s_kt, *qs = g->qs + t * g->s_qs;
        s = ot_sgemm(NULL, false, true, T, S, dv, 1.0f, dy, dv, v, dv, 0.0f, ds, S); /* dP */
        if (s == OTTER_OK && g->dv)
            s = ot_sgemm(NULL, true, false, S, dv, T, 1.0f, p, S, dy, dv, 0.0f, g->dv + t * S * dv, dv);
        for (int64_t r = 0; s == OTTER_OK && r < T; r++)
            ot_softmax_grad_line(false, ds + r * S, p + r * S, ds + r * S, S, 1);
        if (s == OTTER_OK && g->dqs)
            s = ot_sgemm(NULL, false, true, T, dk, S, g->alpha_q, ds, S, kt, S, 0.0f, g->dqs + t * T * dk, dk);
        if (s == OTTER_OK && g->dkt)
            s = ot_sgemm(NULL, true, false, dk, S, T, g->alpha_k, qs, dk, ds, S, 0.0f, g->dkt + t * dk * S, S);
    }
    ot_free(ds);
    if (s != OTTER_OK) g->status = s;
}

/* Input i as [batches..., rows, cols]: its batch stride (0 when one batch is shared), checked against the
 * n batches of dims bd (rank br) and the rows x cols it must have. */
static otter_status core_operand(const ot_kernel_ctx *ctx, size_t i, int br, const int64_t *bd, int64_t rows,
                                 int64_t cols, const float **data, int64_t *stride) {
    const otter_tensor *x = ot_ctx_input(ctx, i);
    if (!x || x->dtype != OTTER_DTYPE_FLOAT || x->rank < 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' must be a float32 tensor of rank 2 or more", i,
                            ot_ctx_input_name(ctx, i));
    int64_t n = 1, want = 1;
    for (int d = 0; d < x->rank - 2; d++) n *= x->dims[d];
    for (int d = 0; d < br; d++) want *= bd[d];
    bool same = x->rank - 2 == br;
    for (int d = 0; same && d < br; d++) same = x->dims[d] == bd[d];
    if ((!same && n != 1) || x->dims[x->rank - 2] != rows || x->dims[x->rank - 1] != cols) {
        char got[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "input %zu '%s' %s: want %lld x %lld matrices, as many batches as dY (%lld) or one", i,
                            ot_ctx_input_name(ctx, i), ot_shape_str(got, sizeof got, x->rank, x->dims), (long long)rows,
                            (long long)cols, (long long)want);
    }
    *data = x->data;
    *stride = n == 1 && want != 1 ? 0 : rows * cols;
    return OTTER_OK;
}

otter_status ot_kernel_attention_core_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *p, *kt;
    OT_TRY(ot_train_need(ctx, 0, "dY", &dy));
    OT_TRY(ot_train_need(ctx, 2, "P", &p));
    OT_TRY(ot_train_need(ctx, 3, "Kt", &kt));
    if (dy->dtype != OTTER_DTYPE_FLOAT || dy->rank < 2 || p->rank < 2 || kt->rank < 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' must be float32, dY, P and Kt of rank 2 or more",
                            ot_ctx_input_name(ctx, 0));
    const int br = dy->rank - 2;
    const int64_t T = dy->dims[br], dv = dy->dims[br + 1], S = p->dims[p->rank - 1], dk = kt->dims[kt->rank - 2];
    core_grad g = {.T = T,
                   .S = S,
                   .dv_w = dv,
                   .dk = dk,
                   .alpha_q = ot_ctx_attr_float_or(ctx, "alpha_q", 1.0f),
                   .alpha_k = ot_ctx_attr_float_or(ctx, "alpha_k", 1.0f),
                   .status = OTTER_OK};
    g.dy = dy->data, g.s_dy = T * dv;
    OT_TRY(core_operand(ctx, 1, br, dy->dims, S, dv, &g.v, &g.s_v));
    OT_TRY(core_operand(ctx, 2, br, dy->dims, T, S, &g.p, &g.s_p));
    OT_TRY(core_operand(ctx, 3, br, dy->dims, dk, S, &g.kt, &g.s_kt));
    OT_TRY(core_operand(ctx, 4, br, dy->dims, T, dk, &g.qs, &g.s_qs));
    int64_t n = 1, dims[OTTER_MAX_RANK];
    for (int d = 0; d < br; d++) n *= dy->dims[d], dims[d] = dy->dims[d];
    const int64_t cols[3][2] = {{T, dk}, {dk, S}, {S, dv}};
    float **outs[3] = {&g.dqs, &g.dkt, &g.dv};
    for (size_t o = 0; o < 3; o++) {
        if (!ot_train_wanted(ctx, o)) continue;
        dims[br] = cols[o][0], dims[br + 1] = cols[o][1];
        otter_tensor *y = ot_ctx_output(ctx, o, OTTER_DTYPE_FLOAT, br + 2, dims);
        if (!y) return ctx->output_status;
        *outs[o] = y->data;
    }
    if (n * T * S == 0) {
        for (size_t o = 0; o < 3; o++)
            if (*outs[o]) memset(*outs[o], 0, (size_t)(n * cols[o][0] * cols[o][1]) * sizeof(float));
        return OTTER_OK;
    }
    ot_parallel_for(ctx, n, 1 + 65536 / (T * S * (dv + dk) + 1), core_grad_batches, &g);
    return g.status == OTTER_OK ? OTTER_OK : ot_ctx_error(ctx, g.status, "out of memory for a batch's scores");
}
