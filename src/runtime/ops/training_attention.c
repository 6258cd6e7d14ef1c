/* com.otter AttentionCoreGrad (runtime/fuse.c): the gradient of Y = Softmax(S) V with S = Qs Kt, as ONNX
 * Runtime's gradient builders write it for an exported attention (two products for dP and dV, SoftmaxGrad,
 * two products for dQs and dKt), one batch (head) at a time so that its T x S scores stay in cache:
 *
 *     dP = dY V^T, dV = P^T dY, dS = P * (dP - rowsum(dP * P)), dQs = alpha_q dS Kt^T, dKt = alpha_k Qs^T dS
 *
 * Inputs (dY, V, P, Kt, Qs): [N..., T, dv], [N..., S, dv], [N..., T, S], [N..., dk, S], [N..., T, dk] with
 * the same batch dims N..., or one batch that every batch shares. Outputs (dQs, dKt, dV), each optional,
 * with dY's batch dims. The unfused nodes' products per batch and SoftmaxGrad's lines: the same bits.
 *
 * Layouts (attributes layout_dY, layout_V, layout_Kt, layout_Qs, layout_dQs, layout_dKt, layout_dV; 0 when
 * absent): a rank-3 operand [N, rows, cols] stored as the heads of PyTorch's attention export lie, so that
 * fuse.c drops the Transposes around it: 1 stores it [rows, N, cols] (a Transpose perm [1, 0, 2] away), 2 as
 * [N, cols, rows] (perm [0, 2, 1]), 3 as [cols, N, rows] (perm [1, 2, 0]; as an output, [2, 0, 1]). Such an
 * input head is copied into a buffer in its unfused layout, in cache, as is a transposed output head out of one;
 * an output head of rows (layout 1) is written where it lies: the products are the unfused ones, and the copy
 * of one head replaces the Transpose's pass through memory. */
#include <string.h>

#include "ops/shape_math.h"
#include "runtime/ops/gemm.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/training_internal.h"

/* A head's matrix of one operand, rows x cols at base + t * bstride: element (i, j) at i * rs + j * cs (contiguous
 * rows, cs 1 and rs cols, in layout 0). */
typedef struct head_view {
    float *base; /* const for the inputs */
    int64_t rows, cols, rs, cs, bstride;
    bool copy; /* an input in another layout: read through a contiguous buffer */
} head_view;

enum { IN_DY, IN_V, IN_P, IN_KT, IN_QS, N_IN };
enum { OUT_DQS, OUT_DKT, OUT_DV, N_OUT };

typedef struct core_grad {
    head_view in[N_IN], out[N_OUT]; /* an output's base NULL: not wanted */
    int64_t T, S, dv_w, dk;
    int64_t buf_floats; /* a thread's buffers: dS, then a head of each copied input and each transposed output */
    float alpha_q, alpha_k;
    _Atomic otter_status status;
} core_grad;

/* Input head t as contiguous rows: where it lies, or copied into buf, reading the stored rows in order (a head's
 * rows 32 KB apart, as the encoder's [128, 32 * 4, 64] heads lie, fall in one set of L1 ways and the products'
 * tiles re-read them from L2: read in place, AttentionCoreGrad took 1.6x as long, 60 -> 95 ms a step). */
static const float *head_in(const head_view *v, int64_t t, float *buf) {
    const float *h = v->base + t * v->bstride;
    if (!v->copy) return h;
    if (v->cs == 1)
        for (int64_t i = 0; i < v->rows; i++) memcpy(buf + i * v->cols, h + i * v->rs, (size_t)v->cols * sizeof(float));
    else /* transposed: stored row j holds column j */
        for (int64_t j = 0; j < v->cols; j++)
            for (int64_t i = 0; i < v->rows; i++) buf[i * v->cols + j] = h[j * v->cs + i];
    return buf;
}

/* Output head t: where to compute it, rows *ld apart: where it lies when its rows are contiguous (written once,
 * their stride costs nothing), else buf (head_out_done stores it). */
static float *head_out(const head_view *v, int64_t t, float *buf, int64_t *ld) {
    *ld = v->cs == 1 ? v->rs : v->cols;
    return v->cs == 1 ? v->base + t * v->bstride : buf;
}

/* Output head t of a transposed layout from buf to where it lies (nothing for the others). */
static void head_out_done(const head_view *v, int64_t t, const float *buf) {
    float *h = v->base + t * v->bstride;
    for (int64_t j = 0; v->cs != 1 && j < v->cols; j++)
        for (int64_t i = 0; i < v->rows; i++) h[j * v->cs + i] = buf[i * v->cols + j];
}

static void core_grad_batches(void *arg, int64_t t0, int64_t t1) {
    core_grad *g = arg;
    const int64_t T = g->T, S = g->S, dv = g->dv_w, dk = g->dk;
    float *ds = ot_malloc((size_t)g->buf_floats * sizeof(float)); /* T * S > 0: the kernel returned before */
    otter_status s = ds ? OTTER_OK : OTTER_ERR_NOMEM;
    for (int64_t t = t0; t < t1 && s == OTTER_OK; t++) {
        float *buf = ds + T * S;
        const float *x[N_IN];
        for (int i = 0; i < N_IN; i++) {
            x[i] = head_in(&g->in[i], t, buf);
            if (g->in[i].copy) buf += g->in[i].rows * g->in[i].cols;
        }
        float *y[N_OUT] = {NULL, NULL, NULL};
        int64_t ldy[N_OUT];
        for (int o = 0; o < N_OUT; o++) {
            if (!g->out[o].base) continue;
            y[o] = head_out(&g->out[o], t, buf, &ldy[o]);
            if (g->out[o].cs != 1) buf += g->out[o].rows * g->out[o].cols;
        }
        const float *dy = x[IN_DY], *p = x[IN_P];
        s = ot_sgemm(NULL, false, true, T, S, dv, 1.0f, dy, dv, x[IN_V], dv, 0.0f, ds, S); /* dP */
        if (s == OTTER_OK && y[OUT_DV])
            s = ot_sgemm(NULL, true, false, S, dv, T, 1.0f, p, S, dy, dv, 0.0f, y[OUT_DV], ldy[OUT_DV]);
        for (int64_t r = 0; s == OTTER_OK && r < T; r++)
            ot_softmax_grad_line(false, ds + r * S, p + r * S, ds + r * S, S, 1);
        if (s == OTTER_OK && y[OUT_DQS])
            s = ot_sgemm(NULL, false, true, T, dk, S, g->alpha_q, ds, S, x[IN_KT], S, 0.0f, y[OUT_DQS], ldy[OUT_DQS]);
        if (s == OTTER_OK && y[OUT_DKT])
            s = ot_sgemm(NULL, true, false, dk, S, T, g->alpha_k, x[IN_QS], dk, ds, S, 0.0f, y[OUT_DKT], ldy[OUT_DKT]);
        for (int o = 0; s == OTTER_OK && o < N_OUT; o++)
            if (y[o]) head_out_done(&g->out[o], t, y[o]);
    }
    ot_free(ds);
    if (s != OTTER_OK) g->status = s;
}

/* The stored dims of an operand [n, rows, cols] in layout L. */
static void stored_dims(int L, int64_t n, int64_t rows, int64_t cols, int64_t *d) {
    d[ot_head_layout_axes[L][0]] = n, d[ot_head_layout_axes[L][1]] = rows, d[ot_head_layout_axes[L][2]] = cols;
}

/* The view of a head of an operand [n, rows, cols] stored in layout L at base. */
static head_view layout_view(int L, float *base, int64_t n, int64_t rows, int64_t cols) {
    switch (L) {
    case 1: /* [rows, n, cols] */
        return (head_view){base, rows, cols, n * cols, 1, cols, true};
    case 2: /* [n, cols, rows] */
        return (head_view){base, rows, cols, 1, rows, rows * cols, true};
    case 3: /* [cols, n, rows] */
        return (head_view){base, rows, cols, 1, n * rows, rows, true};
    default:
        return (head_view){base, rows, cols, cols, 1, rows * cols, false};
    }
}

/* x's dims as its layout L reads them: [n, rows, cols] (rank 3) from the stored order. */
static void logical_dims(const otter_tensor *x, int L, int64_t *d) {
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    for (int k = 0; L && k < 3; k++) d[k] = x->dims[ot_head_layout_axes[L][k]];
}

static const char *const layout_attr[N_IN + N_OUT] = {"layout_dY", "layout_V",   "layout_P",   "layout_Kt",
                                                      "layout_Qs", "layout_dQs", "layout_dKt", "layout_dV"};

/* Operand i's layout attribute (inputs, then outputs at N_IN + o), checked: 0 to 3, rank 3 unless 0. */
static otter_status core_layout(const ot_kernel_ctx *ctx, size_t i, int rank, int *L) {
    const int64_t v = ot_ctx_attr_int_or(ctx, layout_attr[i], 0);
    if (v < 0 || v > 3 || (v != 0 && rank != 3))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "%s %lld: want 0 to 3, and a rank-3 operand unless 0 (rank %d)",
                            layout_attr[i], (long long)v, rank);
    *L = (int)v;
    return OTTER_OK;
}

/* Input i as [batches..., rows, cols] (through its layout): its head view, checked against the n batches of
 * dims bd (rank br) and the rows x cols it must have; one batch that all share (bstride 0) only as stored. */
static otter_status core_operand(const ot_kernel_ctx *ctx, size_t i, int br, const int64_t *bd, int64_t rows,
                                 int64_t cols, head_view *v) {
    const otter_tensor *x = ot_ctx_input(ctx, i);
    if (!x || x->dtype != OTTER_DTYPE_FLOAT || x->rank < 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' must be a float32 tensor of rank 2 or more", i,
                            ot_ctx_input_name(ctx, i));
    int L = 0;
    OT_TRY(core_layout(ctx, i, x->rank, &L));
    int64_t d[OTTER_MAX_RANK];
    logical_dims(x, L, d);
    int64_t n = 1, want = 1;
    for (int k = 0; k < x->rank - 2; k++) n *= d[k];
    for (int k = 0; k < br; k++) want *= bd[k];
    bool same = x->rank - 2 == br;
    for (int k = 0; same && k < br; k++) same = d[k] == bd[k];
    if ((!same && (n != 1 || L)) || d[x->rank - 2] != rows || d[x->rank - 1] != cols) {
        char got[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "input %zu '%s' %s (%s %d): want %lld x %lld matrices, as many batches as dY (%lld) or "
                            "one",
                            i, ot_ctx_input_name(ctx, i), ot_shape_str(got, sizeof got, x->rank, x->dims),
                            layout_attr[i], L, (long long)rows, (long long)cols, (long long)want);
    }
    *v = layout_view(L, x->data, n, rows, cols);
    if (n == 1 && want != 1) v->bstride = 0;
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
    int L_dy = 0, L_kt = 0;
    OT_TRY(core_layout(ctx, IN_DY, dy->rank, &L_dy));
    OT_TRY(core_layout(ctx, IN_KT, kt->rank, &L_kt));
    /* dY's batch dims and T x dv, and dk, as the layouts read them */
    const int br = dy->rank - 2;
    int64_t bd[OTTER_MAX_RANK], kd[OTTER_MAX_RANK];
    logical_dims(dy, L_dy, bd);
    logical_dims(kt, L_kt, kd);
    const int64_t T = bd[br], dv = bd[br + 1], S = p->dims[p->rank - 1], dk = kd[kt->rank - 2];
    core_grad g = {.T = T,
                   .S = S,
                   .dv_w = dv,
                   .dk = dk,
                   .buf_floats = T * S,
                   .alpha_q = ot_ctx_attr_float_or(ctx, "alpha_q", 1.0f),
                   .alpha_k = ot_ctx_attr_float_or(ctx, "alpha_k", 1.0f),
                   .status = OTTER_OK};
    const int64_t in_shape[N_IN][2] = {{T, dv}, {S, dv}, {T, S}, {dk, S}, {T, dk}};
    for (size_t i = 0; i < N_IN; i++) OT_TRY(core_operand(ctx, i, br, bd, in_shape[i][0], in_shape[i][1], &g.in[i]));
    int64_t n = 1;
    for (int k = 0; k < br; k++) n *= bd[k];
    const int64_t out_shape[N_OUT][2] = {{T, dk}, {dk, S}, {S, dv}};
    for (size_t o = 0; o < N_OUT; o++) {
        int L = 0;
        OT_TRY(core_layout(ctx, N_IN + o, br + 2, &L));
        if (!ot_train_wanted(ctx, o)) continue;
        int64_t dims[OTTER_MAX_RANK];
        memcpy(dims, bd, sizeof dims);
        dims[br] = out_shape[o][0], dims[br + 1] = out_shape[o][1];
        if (L) stored_dims(L, n, out_shape[o][0], out_shape[o][1], dims);
        otter_tensor *y = ot_ctx_output(ctx, o, OTTER_DTYPE_FLOAT, br + 2, dims);
        if (!y) return ctx->output_status;
        g.out[o] = layout_view(L, y->data, n, out_shape[o][0], out_shape[o][1]);
    }
    for (size_t i = 0; i < N_IN; i++)
        if (g.in[i].copy) g.buf_floats += g.in[i].rows * g.in[i].cols;
    for (size_t o = 0; o < N_OUT; o++)
        if (g.out[o].cs != 1) g.buf_floats += g.out[o].rows * g.out[o].cols;
    if (n * T * S == 0) {
        for (size_t o = 0; o < N_OUT; o++)
            if (g.out[o].base)
                memset(g.out[o].base, 0, (size_t)(n * out_shape[o][0] * out_shape[o][1]) * sizeof(float));
        return OTTER_OK;
    }
    ot_parallel_for(ctx, n, 1 + 65536 / (T * S * (dv + dk) + 1), core_grad_batches, &g);
    return g.status == OTTER_OK ? OTTER_OK : ot_ctx_error(ctx, g.status, "out of memory for a batch's scores");
}
