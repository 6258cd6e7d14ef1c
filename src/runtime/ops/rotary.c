/* RotaryEmbedding (ai.onnx 23): rotates the first rotary_embedding_dim values of each head by the
 * angle of the token's position: pairs (x1, x2) -> (cos x1 - sin x2, sin x1 + cos x2), the pair
 * being (i, i + dim / 2) or, interleaved, (2i, 2i + 1); the rest of the head is copied. cos / sin
 * rows come from the caches at position_ids[b, s], or are the caches' [b, s] rows without them.
 * Float (the half types convert); one task per (batch, position) row of heads. */
#include <string.h>

#include "core/core.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"

typedef struct rope_args {
    const float *x, *cos, *sin;
    float *y;
    const int64_t *pos; /* NULL: caches indexed by (b, s) */
    int64_t seq, heads, head_size, half;
    int64_t head_stride, seq_stride, batch_stride; /* x / y element strides */
    bool interleaved;
} rope_args;

static void rope_rows(void *arg, int64_t begin, int64_t end) {
    const rope_args *a = arg;
    for (int64_t bs = begin; bs < end; bs++) {
        int64_t b = bs / a->seq, s = bs % a->seq;
        int64_t row = a->pos ? a->pos[bs] : bs;
        const float *c = a->cos + row * a->half, *sn = a->sin + row * a->half;
        for (int64_t h = 0; h < a->heads; h++) {
            int64_t off = b * a->batch_stride + s * a->seq_stride + h * a->head_stride;
            const float *x = a->x + off;
            float *y = a->y + off;
            if (a->interleaved) {
                for (int64_t i = 0; i < a->half; i++) {
                    float x1 = x[2 * i], x2 = x[2 * i + 1];
                    y[2 * i] = c[i] * x1 - sn[i] * x2;
                    y[2 * i + 1] = sn[i] * x1 + c[i] * x2;
                }
            } else {
                /* four lanes at a time (y may be x: each step loads before it stores) */
                const float *x2 = x + a->half;
                int64_t i = 0;
                for (; i + 4 <= a->half; i += 4) {
                    const ot_v4 ci = ot_v4_load(c + i), si = ot_v4_load(sn + i), v1 = ot_v4_load(x + i),
                                v2 = ot_v4_load(x2 + i);
                    ot_v4_store(y + i, ci * v1 - si * v2);
                    ot_v4_store(y + a->half + i, si * v1 + ci * v2);
                }
                for (; i < a->half; i++) {
                    const float v1 = x[i], v2 = x2[i];
                    y[i] = c[i] * v1 - sn[i] * v2;
                    y[a->half + i] = sn[i] * v1 + c[i] * v2;
                }
            }
            int64_t rot = 2 * a->half;
            memcpy(y + rot, x + rot, (size_t)(a->head_size - rot) * sizeof(float));
        }
    }
}

otter_status ot_kernel_rotary_embedding(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *cos, *sin, *pos = ot_ctx_input(ctx, 3);
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    OT_TRY(ot_ctx_float_input(ctx, 1, &cos));
    OT_TRY(ot_ctx_float_input(ctx, 2, &sin));
    rope_args a = {.interleaved = ot_ctx_attr_int_or(ctx, "interleaved", 0) != 0}; /* opset 23: no 1.12 schema */
    if (x->rank == 4) {
        a.heads = x->dims[1], a.seq = x->dims[2], a.head_size = x->dims[3];
        a.seq_stride = a.head_size, a.head_stride = a.seq * a.head_size;
    } else if (x->rank == 3) {
        a.heads = ot_ctx_attr_int_or(ctx, "num_heads", 0), a.seq = x->dims[1];
        if (a.heads < 1 || x->dims[2] % a.heads != 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "3D input '%s' needs num_heads dividing its hidden size %lld",
                                ot_ctx_input_name(ctx, 0), (long long)x->dims[2]);
        a.head_size = x->dims[2] / a.heads;
        a.seq_stride = x->dims[2], a.head_stride = a.head_size;
    } else {
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' must be 3D or 4D, not rank %d",
                            ot_ctx_input_name(ctx, 0), x->rank);
    }
    int64_t batch = x->dims[0], rot = ot_ctx_attr_int_or(ctx, "rotary_embedding_dim", 0);
    if (rot == 0) rot = a.head_size;
    if (rot < 0 || rot > a.head_size || rot % 2 != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "rotary_embedding_dim %lld must be even and at most head size %lld",
                            (long long)rot, (long long)a.head_size);
    a.half = rot / 2;
    a.batch_stride = a.heads * a.seq * a.head_size;
    int want_rank = pos ? 2 : 3;
    int64_t rows = pos ? cos->dims[0] : batch * a.seq;
    if (cos->rank != want_rank || sin->rank != want_rank || cos->dims[want_rank - 1] != a.half ||
        otter_tensor_numel(sin) != otter_tensor_numel(cos) ||
        (!pos && (cos->dims[0] != batch || cos->dims[1] != a.seq)))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "cos_cache / sin_cache must be %s x %lld (rotary_embedding_dim / 2)",
                            pos ? "[positions]" : "[batch, sequence]", (long long)a.half);
    if (pos) {
        if (pos->dtype != OTTER_DTYPE_INT64 || otter_tensor_numel(pos) != batch * a.seq)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "position_ids '%s' must be int64 [batch, sequence]",
                                ot_ctx_input_name(ctx, 3));
        a.pos = pos->data;
        for (int64_t i = 0; i < batch * a.seq; i++)
            if (a.pos[i] < 0 || a.pos[i] >= rows)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "position_ids[%lld] = %lld is outside the %lld cached rows",
                                    (long long)i, (long long)a.pos[i], (long long)rows);
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    float *tx = NULL, *tc = NULL, *ts = NULL, *ty = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, x, &a.x, &tx);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 1, cos, &a.cos, &tc);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 2, sin, &a.sin, &ts);
    if (s == OTTER_OK) s = ot_output_f32(y, &a.y, &ty);
    if (s == OTTER_OK) {
        ot_parallel_for(ctx, batch * a.seq, 1 + 4096 / (a.heads * a.head_size + 1), rope_rows, &a);
        ot_output_f32_done(y, ty);
    } else {
        ot_free(ty);
    }
    ot_free(tx), ot_free(tc), ot_free(ts);
    return s;
}
