/* Attention (ai.onnx 23 and 24): softmax(Q K^T * scale [softcap] + bias) V per (batch, query head).
 *
 * Fused: each task is a block of query rows of one (batch, head); its scores (rows x keys) are one
 * gemm into a scratch block, the bias (mask, causal frontier, padding) is applied row by row while
 * the row is in cache, the softmax runs in place and a second gemm multiplies by V into Y. The
 * broadcast mask is read through strides and GQA's shared KV heads through the head index (query
 * head h reads KV head h / (q_heads / kv_heads)), so neither is materialized; past and new keys
 * are two segments of the key axis, so the concatenation is only written when present_key /
 * present_value are asked for. Keys no row of a block can attend (beyond the causal frontier, the
 * mask's length or nonpad_kv_seqlen) are not computed unless qk_matmul_output shows them.
 * A fully-masked row gives a zero row (ONNX 1.23's errata), in Y and in the mode-3 output.
 * float16 / bfloat16 / double run in float (softmax_precision is met or exceeded for the half
 * types; double loses precision to float). */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/gemm.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/vec_math.h"

/* One operand's rows for a given (batch, head): base + row * ld. */
typedef struct seg {
    const float *data;
    int64_t batch_stride, head_stride, ld, len; /* len: rows (sequence positions) */
} seg;

typedef struct attn_args {
    int64_t batch, q_heads, kv_heads, q_len, total, head_size, v_head_size;
    int64_t rows_per_task, tasks_per_head;
    float scale, softcap;
    seg q, k[2], v[2]; /* k[0] / v[0]: past (len 0 when absent), k[1] / v[1]: the new keys / values */
    float *y;
    int64_t y_batch_stride, y_head_stride, y_ld;
    /* bias sources */
    const float *mask_f;         /* float mask, or NULL */
    const unsigned char *mask_b; /* bool mask, or NULL */
    int64_t mask_stride[3];      /* batch, head, query row (0: broadcast); columns are contiguous */
    int64_t mask_len;            /* the mask's key length; keys beyond it are masked */
    bool causal;
    int64_t past_len;      /* causal offset with an internal cache */
    const int64_t *nonpad; /* nonpad_kv_seqlen (batch,), or NULL */
    float *qk_out;         /* qk_matmul_output [batch, q_heads, q_len, total], or NULL */
    int qk_mode;
    otter_status status; /* first failure of a task (gemm packing memory) */
} attn_args;

static inline int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

static const float *seg_rows(const seg *s, int64_t b, int64_t h) {
    return s->data + b * s->batch_stride + h * s->head_stride;
}

/* The causal offset of batch b: keys j <= i + offset are visible to query row i. */
static int64_t causal_offset(const attn_args *a, int64_t b) {
    return a->nonpad && a->past_len == 0 ? a->nonpad[b] - a->q_len : a->past_len;
}

/* The keys [0, limit) some row in [i0, i1) may attend; the rest stay masked for the whole block. */
static int64_t key_limit(const attn_args *a, int64_t b, int64_t i1) {
    int64_t limit = a->total;
    if (a->mask_f || a->mask_b) limit = min_i64(limit, a->mask_len);
    if (a->nonpad) limit = min_i64(limit, a->nonpad[b]);
    if (a->causal) limit = min_i64(limit, i1 - 1 + causal_offset(a, b) + 1);
    return limit < 0 ? 0 : limit;
}

static void softcap_row(float *s, int64_t cols, float cap) {
    float inv = 1.0f / cap;
    for (int64_t j = 0; j < cols; j++) s[j] = cap * tanhf(s[j] * inv);
}

/* Adds the bias of query position qi (batch b, head h) to its scores over keys [0, cols). */
static void bias_row(const attn_args *a, int64_t b, int64_t h, int64_t qi, float *s, int64_t cols) {
    int64_t visible = cols;
    if (a->mask_f || a->mask_b) {
        int64_t off = b * a->mask_stride[0] + h * a->mask_stride[1] + qi * a->mask_stride[2];
        int64_t n = min_i64(cols, a->mask_len);
        if (a->mask_f) {
            const float *m = a->mask_f + off;
            for (int64_t j = 0; j < n; j++) s[j] += m[j];
        } else {
            const unsigned char *m = a->mask_b + off;
            for (int64_t j = 0; j < n; j++) s[j] = m[j] ? s[j] : -INFINITY;
        }
        visible = n;
    }
    if (a->nonpad) visible = min_i64(visible, a->nonpad[b]);
    if (a->causal) visible = min_i64(visible, qi + causal_offset(a, b) + 1);
    for (int64_t j = visible < 0 ? 0 : visible; j < cols; j++) s[j] = -INFINITY;
}

static void attend_block(attn_args *a, int64_t task, float *scores) {
    int64_t bh = task / a->tasks_per_head, blk = task % a->tasks_per_head;
    int64_t b = bh / a->q_heads, h = bh % a->q_heads, kvh = h / (a->q_heads / a->kv_heads);
    int64_t i0 = blk * a->rows_per_task, i1 = min_i64(a->q_len, i0 + a->rows_per_task), rows = i1 - i0;
    int64_t cols = a->qk_out ? a->total : key_limit(a, b, i1);
    float *y = a->y + b * a->y_batch_stride + h * a->y_head_stride + i0 * a->y_ld;
    if (cols == 0) {
        for (int64_t r = 0; r < rows; r++) memset(y + r * a->y_ld, 0, (size_t)a->v_head_size * sizeof(float));
        return;
    }
    const float *q = seg_rows(&a->q, b, h) + i0 * a->q.ld;
    otter_status s = OTTER_OK;
    for (int64_t k = 0, c0 = 0; k < 2 && s == OTTER_OK; c0 += a->k[k].len, k++) {
        int64_t n = min_i64(a->k[k].len, cols - c0);
        if (n > 0)
            s = ot_sgemm(NULL, false, true, rows, n, a->head_size, a->scale, q, a->q.ld, seg_rows(&a->k[k], b, kvh),
                         a->k[k].ld, 0.0f, scores + c0, cols);
    }
    float *qk = a->qk_out ? a->qk_out + ((b * a->q_heads + h) * a->q_len + i0) * a->total : NULL;
    for (int64_t r = 0; r < rows; r++) {
        float *row = scores + r * cols;
        if (a->softcap > 0) softcap_row(row, cols, a->softcap);
        if (qk && a->qk_mode <= 1) memcpy(qk + r * cols, row, (size_t)cols * sizeof(float));
        bias_row(a, b, h, i0 + r, row, cols);
        if (qk && a->qk_mode == 2) memcpy(qk + r * cols, row, (size_t)cols * sizeof(float));
        ot_softmax_row(row, cols);
        if (qk && a->qk_mode == 3) memcpy(qk + r * cols, row, (size_t)cols * sizeof(float));
    }
    for (int64_t k = 0, c0 = 0; k < 2 && s == OTTER_OK; c0 += a->v[k].len, k++) {
        int64_t n = min_i64(a->v[k].len, cols - c0);
        if (n > 0)
            s = ot_sgemm(NULL, false, false, rows, a->v_head_size, n, 1.0f, scores + c0, cols,
                         seg_rows(&a->v[k], b, kvh), a->v[k].ld, c0 == 0 ? 0.0f : 1.0f, y, a->y_ld);
    }
    if (s != OTTER_OK) a->status = s; /* only OTTER_ERR_NOMEM; any task's report will do */
}

static void attend_range(void *arg, int64_t begin, int64_t end) {
    attn_args *a = arg;
    float *scores = ot_malloc((size_t)(a->rows_per_task * a->total) * sizeof(float) + sizeof(float));
    if (!scores) {
        a->status = OTTER_ERR_NOMEM;
        return;
    }
    for (int64_t t = begin; t < end; t++) attend_block(a, t, scores);
    ot_free(scores);
}

/* Copy the concatenation of past ([B, H, P, D] contiguous) and new (rows of seg cur) into present. */
static void write_present(const attn_args *a, const seg *past, const seg *cur, int64_t width, float *present) {
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t h = 0; h < a->kv_heads; h++) {
            float *dst = present + (b * a->kv_heads + h) * a->total * width;
            if (past->len) memcpy(dst, seg_rows(past, b, h), (size_t)(past->len * width) * sizeof(float));
            const float *src = seg_rows(cur, b, h);
            for (int64_t r = 0; r < cur->len; r++)
                memcpy(dst + (past->len + r) * width, src + r * cur->ld, (size_t)width * sizeof(float));
        }
}

/* Rows of a 4D [B, H, S, D] tensor, or of a 3D [B, S, H * D] one split into `heads` heads. */
static otter_status make_seg(const ot_kernel_ctx *ctx, size_t idx, const otter_tensor *t, int64_t heads,
                             const float *data, seg *s, int64_t *width) {
    if (t->rank == 4) {
        if (t->dims[1] != heads)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' has %lld heads, expected %lld",
                                ot_ctx_input_name(ctx, idx), (long long)t->dims[1], (long long)heads);
        *width = t->dims[3];
        *s = (seg){data, t->dims[1] * t->dims[2] * t->dims[3], t->dims[2] * t->dims[3], t->dims[3], t->dims[2]};
    } else {
        if (heads < 1 || t->dims[2] % heads != 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s': hidden size %lld is not a multiple of %lld heads",
                                ot_ctx_input_name(ctx, idx), (long long)t->dims[2], (long long)heads);
        *width = t->dims[2] / heads;
        *s = (seg){data, t->dims[1] * t->dims[2], *width, t->dims[2], t->dims[1]};
    }
    return OTTER_OK;
}

/* The float inputs (converted when not float), freed together. */
typedef struct f32_inputs {
    const float *p[6];
    float *tmp[6];
} f32_inputs;

static void f32_inputs_free(f32_inputs *in) {
    for (int i = 0; i < 6; i++) ot_free(in->tmp[i]);
}

static otter_status check_mask(const ot_kernel_ctx *ctx, const otter_tensor *m, const attn_args *a) {
    const int64_t want[3] = {a->batch, a->q_heads, a->q_len};
    bool ok = m->rank >= 1 && m->rank <= 4;
    for (int d = 0; ok && d < m->rank - 1; d++) {
        int64_t md = m->dims[m->rank - 2 - d], wd = want[2 - d];
        ok = md == 1 || md == wd;
    }
    if (ok) return OTTER_OK;
    char buf[128];
    return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                        "attn_mask '%s' %s does not broadcast to (batch %lld, heads %lld, queries %lld, keys)",
                        ot_ctx_input_name(ctx, 3), ot_shape_str(buf, sizeof buf, m->rank, m->dims), (long long)a->batch,
                        (long long)a->q_heads, (long long)a->q_len);
}

static otter_status run_attention(ot_kernel_ctx *ctx, attn_args *a, f32_inputs *in) {
    const otter_tensor *q = ctx->inputs[0], *k = ctx->inputs[1], *v = ctx->inputs[2];
    const otter_tensor *mask = ot_ctx_input(ctx, 3), *past_k = ot_ctx_input(ctx, 4), *past_v = ot_ctx_input(ctx, 5);
    const otter_tensor *nonpad = ctx->opset >= 24 ? ot_ctx_input(ctx, 6) : NULL;
    if (q->rank != k->rank || q->rank != v->rank || (q->rank != 3 && q->rank != 4))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "Q, K and V must all be 3D or all 4D, not ranks %d, %d, %d",
                            q->rank, k->rank, v->rank);
    if (!past_k != !past_v) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "past_key and past_value go together");
    if (q->rank == 3) {
        a->q_heads = ot_ctx_attr_int_or(ctx, "q_num_heads", 0);
        a->kv_heads = ot_ctx_attr_int_or(ctx, "kv_num_heads", 0);
        if (a->q_heads < 1 || a->kv_heads < 1)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "3D inputs need attributes q_num_heads and kv_num_heads");
    } else {
        a->q_heads = q->dims[1], a->kv_heads = k->dims[1];
    }
    if (a->kv_heads < 1 || a->q_heads % a->kv_heads != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "%lld query heads are not a multiple of %lld key/value heads",
                            (long long)a->q_heads, (long long)a->kv_heads);
    a->batch = q->dims[0];
    if (k->dims[0] != a->batch || v->dims[0] != a->batch)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "Q, K and V have different batch sizes");
    const otter_tensor *f32_src[6] = {q, k, v, mask && mask->dtype != OTTER_DTYPE_BOOL ? mask : NULL, past_k, past_v};
    for (size_t i = 0; i < 6; i++)
        if (f32_src[i]) OT_TRY(ot_ctx_input_f32(ctx, i, f32_src[i], &in->p[i], &in->tmp[i]));
    int64_t k_width, v_width, q_width;
    OT_TRY(make_seg(ctx, 0, q, a->q_heads, in->p[0], &a->q, &q_width));
    OT_TRY(make_seg(ctx, 1, k, a->kv_heads, in->p[1], &a->k[1], &k_width));
    OT_TRY(make_seg(ctx, 2, v, a->kv_heads, in->p[2], &a->v[1], &v_width));
    if (q_width != k_width || k->dims[q->rank - 2] != v->dims[v->rank - 2])
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "Q's head size %lld differs from K's %lld, or K and V have different lengths",
                            (long long)q_width, (long long)k_width);
    a->head_size = q_width, a->v_head_size = v_width, a->q_len = a->q.len;
    a->k[0] = a->v[0] = (seg){0};
    if (past_k) {
        if (past_k->rank != 4 || past_v->rank != 4 || past_k->dims[0] != a->batch || past_k->dims[1] != a->kv_heads ||
            past_k->dims[3] != k_width || past_v->dims[0] != a->batch || past_v->dims[1] != a->kv_heads ||
            past_v->dims[2] != past_k->dims[2] || past_v->dims[3] != v_width)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "past_key / past_value shapes don't match K and V");
        OT_TRY(make_seg(ctx, 4, past_k, a->kv_heads, in->p[4], &a->k[0], &k_width));
        OT_TRY(make_seg(ctx, 5, past_v, a->kv_heads, in->p[5], &a->v[0], &v_width));
    }
    a->past_len = a->k[0].len;
    a->total = a->k[0].len + a->k[1].len;

    float scale = ot_ctx_attr_float_or(ctx, "scale", 0.0f);
    a->scale = ot_ctx_attr_set(ctx, "scale") ? scale : 1.0f / sqrtf((float)a->head_size);
    a->softcap = ot_ctx_attr_float_or(ctx, "softcap", 0.0f);
    a->causal = ot_ctx_attr_int_or(ctx, "is_causal", 0) != 0;
    a->qk_mode = (int)ot_ctx_attr_int_or(ctx, "qk_matmul_output_mode", 0);
    if (a->qk_mode < 0 || a->qk_mode > 3)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "qk_matmul_output_mode %d is not 0, 1, 2 or 3", a->qk_mode);
    if (mask) {
        OT_TRY(check_mask(ctx, mask, a));
        int64_t stride = mask->dims[mask->rank - 1];
        a->mask_len = stride;
        if (a->mask_len > a->total)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attn_mask '%s' covers %lld keys, more than the %lld there are",
                                ot_ctx_input_name(ctx, 3), (long long)a->mask_len, (long long)a->total);
        for (int d = 0; d < 3; d++) {
            int md = mask->rank - 2 - d; /* query row, head, batch */
            int64_t dim = md >= 0 ? mask->dims[md] : 1;
            a->mask_stride[2 - d] = dim == 1 ? 0 : stride;
            stride *= dim;
        }
        if (mask->dtype == OTTER_DTYPE_BOOL)
            a->mask_b = mask->data;
        else
            a->mask_f = in->p[3];
    }
    if (nonpad) {
        if (nonpad->dtype != OTTER_DTYPE_INT64 || otter_tensor_numel(nonpad) != a->batch)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "nonpad_kv_seqlen '%s' must be int64 of shape (batch %lld)",
                                ot_ctx_input_name(ctx, 6), (long long)a->batch);
        a->nonpad = nonpad->data;
        for (int64_t b = 0; b < a->batch; b++)
            if (a->nonpad[b] < 0 || a->nonpad[b] > a->total)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "nonpad_kv_seqlen[%lld] = %lld is outside [0, %lld]",
                                    (long long)b, (long long)a->nonpad[b], (long long)a->total);
    }

    /* outputs */
    int64_t ydims[4] = {a->batch, a->q_heads, a->q_len, a->v_head_size};
    if (q->rank == 3) ydims[1] = a->q_len, ydims[2] = a->q_heads * a->v_head_size;
    otter_tensor *y = ot_ctx_output(ctx, 0, q->dtype, q->rank, ydims);
    if (!y) return ctx->output_status;
    otter_tensor *outs[4] = {y, NULL, NULL, NULL};
    const int64_t pk_dims[4] = {a->batch, a->kv_heads, a->total, a->head_size};
    const int64_t pv_dims[4] = {a->batch, a->kv_heads, a->total, a->v_head_size};
    const int64_t qk_dims[4] = {a->batch, a->q_heads, a->q_len, a->total};
    const int64_t *dims[4] = {ydims, pk_dims, pv_dims, qk_dims};
    for (size_t o = 1; o < 4; o++)
        if (o < ctx->node->n_outputs && !ot_str_empty(ctx->node->outputs[o]) &&
            !(outs[o] = ot_ctx_output(ctx, o, o == 2 ? v->dtype : q->dtype, 4, dims[o])))
            return ctx->output_status;
    float *out_f[4] = {0}, *out_tmp[4] = {0};
    otter_status s = OTTER_OK;
    for (size_t o = 0; o < 4 && s == OTTER_OK; o++)
        if (outs[o]) s = ot_output_f32(outs[o], &out_f[o], &out_tmp[o]);
    if (s == OTTER_OK) {
        a->y = out_f[0];
        a->y_ld = q->rank == 4 ? a->v_head_size : a->q_heads * a->v_head_size;
        a->y_head_stride = q->rank == 4 ? a->q_len * a->v_head_size : a->v_head_size;
        a->y_batch_stride = a->q_heads * a->q_len * a->v_head_size;
        a->qk_out = out_f[3];
        if (out_f[1]) write_present(a, &a->k[0], &a->k[1], a->head_size, out_f[1]);
        if (out_f[2]) write_present(a, &a->v[0], &a->v[1], a->v_head_size, out_f[2]);
        /* Blocks of query rows: whole heads when there are enough of them for the threads. */
        int64_t heads = a->batch * a->q_heads, want_tasks = 4 * (int64_t)ctx->n_threads;
        int64_t per_head = heads >= want_tasks ? 1 : (want_tasks + heads - 1) / heads;
        /* at least 16 rows (gemm-sized), at most a 256 KiB score block (in cache) or, causal, 64 rows
         * (each block computes the keys its last row sees), in multiples of the gemm's 6-row tiles so
         * that only the last block of a head has an edge tile */
        int64_t rows = (a->q_len + per_head - 1) / per_head, cap = 65536 / (a->total > 0 ? a->total : 1);
        if (a->causal && cap > 64) cap = 64;
        rows = rows > cap ? cap : rows;
        rows = rows < 16 ? 16 : rows;
        a->rows_per_task = rows < a->q_len ? (rows + OT_SGEMM_MR - 1) / OT_SGEMM_MR * OT_SGEMM_MR : rows;
        a->tasks_per_head = a->q_len > 0 ? (a->q_len + a->rows_per_task - 1) / a->rows_per_task : 0;
        a->status = OTTER_OK;
        int64_t cost = a->rows_per_task * a->total * (a->head_size + a->v_head_size);
        ot_parallel_for(ctx, heads * a->tasks_per_head, 1 + 65536 / (cost + 1), attend_range, a);
        s = a->status == OTTER_OK ? OTTER_OK : OT_NOMEM();
    }
    for (size_t o = 0; o < 4; o++) ot_output_f32_done(s == OTTER_OK ? outs[o] : NULL, out_tmp[o]);
    return s;
}

otter_status ot_kernel_attention(ot_kernel_ctx *ctx) {
    const otter_tensor *t;
    for (size_t i = 0; i < 3; i++) OT_TRY(ot_ctx_float_input(ctx, i, &t));
    attn_args a = {0};
    f32_inputs in = {0};
    otter_status s = run_attention(ctx, &a, &in);
    f32_inputs_free(&in);
    return s;
}
