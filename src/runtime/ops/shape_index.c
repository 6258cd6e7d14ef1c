/* Indexing kernels: Gather, GatherElements, GatherND, Scatter, ScatterElements, ScatterND. */
#include <string.h>

#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/strided.h"

/* ---- Gather family ----------------------------------------------------------------------------- */

otter_status ot_kernel_gather(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *ind;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    OT_TRY(ot_ctx_need_input(ctx, 1, &ind));
    if (!ot_is_index_type(ind->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' must be int32 or int64", ot_ctx_input_name(ctx, 1));
    int64_t axis;
    OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis));
    int64_t ax = axis;
    if (!ot_norm_axis(&ax, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for input '%s' of rank %d", (long long)axis,
                            ot_ctx_input_name(ctx, 0), x->rank);
    int r = x->rank - 1 + ind->rank;
    if (r > OTTER_MAX_RANK) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "result rank too large");
    int64_t d[OTTER_MAX_RANK];
    int k = 0;
    for (int i = 0; i < ax; i++) d[k++] = x->dims[i];
    for (int i = 0; i < ind->rank; i++) d[k++] = ind->dims[i];
    for (int i = (int)ax + 1; i < x->rank; i++) d[k++] = x->dims[i];
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, r, d);
    if (!y) return ctx->output_status;
    int64_t outer = 1, inner = 1, D = x->dims[ax], ni = otter_tensor_numel(ind);
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = (int)ax + 1; i < x->rank; i++) inner *= x->dims[i];
    size_t es = ot_elem_size(x->dtype);
    for (int64_t j = 0; j < ni; j++) {
        int64_t v = ot_index_at(ind, j);
        if (v < -D || v >= D)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' value %lld out of range [-%lld, %lld)",
                                ot_ctx_input_name(ctx, 1), (long long)v, (long long)D, (long long)D);
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < ni; j++) {
            int64_t v = ot_index_at(ind, j);
            if (v < 0) v += D;
            ot_copy_elems((char *)y->data + (size_t)((o * ni + j) * inner) * es,
                          (const char *)x->data + (size_t)((o * D + v) * inner) * es, inner, x->dtype);
        }
    return OTTER_OK;
}

/* Offset of element i of an index-shaped tensor in data, with the axis coordinate replaced by v. */
static int64_t elem_offset(const int64_t *dims, int rank, int64_t i, const int64_t *dst_st, int64_t ax, int64_t v) {
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; d--) {
        int64_t c = i % dims[d];
        i /= dims[d];
        off += (d == ax ? v : c) * dst_st[d];
    }
    return off;
}

otter_status ot_kernel_gather_elements(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *ind;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    OT_TRY(ot_ctx_need_input(ctx, 1, &ind));
    if (!ot_is_index_type(ind->dtype) || ind->rank != x->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' must be int32/int64 with the rank of data",
                            ot_ctx_input_name(ctx, 1));
    int64_t axis;
    OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis));
    int64_t ax = axis;
    if (!ot_norm_axis(&ax, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range", (long long)axis);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, ind->rank, ind->dims);
    if (!y) return ctx->output_status;
    int64_t st[OTTER_MAX_RANK], n = otter_tensor_numel(ind), D = x->dims[ax];
    ot_contiguous_strides(x->rank, x->dims, st);
    size_t es = ot_elem_size(x->dtype);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = ot_index_at(ind, i);
        if (v < -D || v >= D)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' value %lld out of range for axis size %lld",
                                ot_ctx_input_name(ctx, 1), (long long)v, (long long)D);
        if (v < 0) v += D;
        int64_t off = elem_offset(ind->dims, ind->rank, i, st, ax, v);
        ot_copy_elems((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)off * es, 1, x->dtype);
    }
    return OTTER_OK;
}

otter_status ot_kernel_gathernd(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *ind;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    OT_TRY(ot_ctx_need_input(ctx, 1, &ind));
    int64_t b;
    OT_TRY(ot_ctx_attr_int(ctx, "batch_dims", &b));
    if (!ot_is_index_type(ind->dtype) || ind->rank < 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' must be int32/int64 of rank >= 1",
                            ot_ctx_input_name(ctx, 1));
    int64_t q = ind->dims[ind->rank - 1];
    if (b < 0 || b >= ind->rank || b >= x->rank || q < 1 || b + q > x->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "batch_dims %lld / index depth %lld don't fit data rank %d",
                            (long long)b, (long long)q, x->rank);
    int64_t d[OTTER_MAX_RANK];
    int r = 0;
    for (int i = 0; i < ind->rank - 1; i++) d[r++] = ind->dims[i];
    for (int i = (int)(b + q); i < x->rank; i++) d[r++] = x->dims[i];
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, r, d);
    if (!y) return ctx->output_status;
    int64_t st[OTTER_MAX_RANK], batch = 1, inner = 1, per_batch = 1;
    ot_contiguous_strides(x->rank, x->dims, st);
    for (int i = 0; i < b; i++) batch *= ind->dims[i];
    for (int i = (int)b; i < ind->rank - 1; i++) per_batch *= ind->dims[i];
    for (int i = (int)(b + q); i < x->rank; i++) inner *= x->dims[i];
    int64_t bstride = b > 0 ? st[b - 1] : 0;
    size_t es = ot_elem_size(x->dtype);
    for (int64_t bi = 0; bi < batch; bi++)
        for (int64_t j = 0; j < per_batch; j++) {
            int64_t row = bi * per_batch + j, off = bi * bstride;
            for (int64_t k = 0; k < q; k++) {
                int64_t v = ot_index_at(ind, row * q + k), D = x->dims[b + k];
                if (v < -D || v >= D)
                    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' value %lld out of range for size %lld",
                                        ot_ctx_input_name(ctx, 1), (long long)v, (long long)D);
                off += (v < 0 ? v + D : v) * st[b + k];
            }
            ot_copy_elems((char *)y->data + (size_t)(row * inner) * es, (const char *)x->data + (size_t)off * es, inner,
                          x->dtype);
        }
    return OTTER_OK;
}

/* ---- Scatter family ------------------------------------------------------------------------------ */

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

static otter_status reduction_attr(const ot_kernel_ctx *ctx, int *red) {
    const char *s = "none"; /* Scatter, ScatterElements' deprecated first form, has no reduction */
    if (strcmp(ctx->node->op_type, "Scatter") != 0) OT_TRY(ot_ctx_attr_string(ctx, "reduction", &s));
    *red = strcmp(s, "none") == 0  ? RED_NONE
           : strcmp(s, "add") == 0 ? RED_ADD
           : strcmp(s, "mul") == 0 ? RED_MUL
           : strcmp(s, "max") == 0 ? RED_MAX
           : strcmp(s, "min") == 0 ? RED_MIN
                                   : -1;
    if (*red < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown reduction '%s'", s);
    return OTTER_OK;
}

/* dst[i] = reduce(dst[i], src[j]) for one element. */
static void scatter_one(void *dst, int64_t i, const void *src, int64_t j, otter_dtype dt, int red) {
    if (red == RED_NONE || dt == OTTER_DTYPE_STRING) {
        size_t es = ot_elem_size(dt);
        ot_copy_elems((char *)dst + (size_t)i * es, (const char *)src + (size_t)j * es, 1, dt);
        return;
    }
    if (dt == OTTER_DTYPE_INT64 || dt == OTTER_DTYPE_UINT64) {
        int64_t a = ot_get_i64(dst, dt, i), b = ot_get_i64(src, dt, j), v;
        v = red == RED_ADD ? a + b : red == RED_MUL ? a * b : red == RED_MAX ? (a > b ? a : b) : (a < b ? a : b);
        memcpy((char *)dst + (size_t)i * 8, &v, 8);
        return;
    }
    double a = ot_get_f64(dst, dt, i), b = ot_get_f64(src, dt, j);
    double v = red == RED_ADD ? a + b : red == RED_MUL ? a * b : red == RED_MAX ? (a > b ? a : b) : (a < b ? a : b);
    ot_set_f64(dst, dt, i, v);
}

otter_status ot_kernel_scatter_elements(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *ind, *upd;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    OT_TRY(ot_ctx_need_input(ctx, 1, &ind));
    OT_TRY(ot_ctx_need_input(ctx, 2, &upd));
    if (!ot_is_index_type(ind->dtype) || ind->rank != x->rank || upd->rank != ind->rank || upd->dtype != x->dtype)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "indices '%s' (int32/int64) and updates '%s' must have the rank of data, updates its dtype",
                            ot_ctx_input_name(ctx, 1), ot_ctx_input_name(ctx, 2));
    for (int i = 0; i < ind->rank; i++)
        if (ind->dims[i] != upd->dims[i])
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' and updates '%s' differ in shape",
                                ot_ctx_input_name(ctx, 1), ot_ctx_input_name(ctx, 2));
    int red = RED_NONE;
    OT_TRY(reduction_attr(ctx, &red));
    int64_t axis;
    OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis));
    int64_t ax = axis;
    if (!ot_norm_axis(&ax, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range", (long long)axis);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    if (y->data != x->data) ot_copy_elems(y->data, x->data, otter_tensor_numel(x), x->dtype);
    int64_t st[OTTER_MAX_RANK], n = otter_tensor_numel(ind), D = x->dims[ax];
    ot_contiguous_strides(x->rank, x->dims, st);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = ot_index_at(ind, i);
        if (v < -D || v >= D)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' value %lld out of range for axis size %lld",
                                ot_ctx_input_name(ctx, 1), (long long)v, (long long)D);
        if (v < 0) v += D;
        scatter_one(y->data, elem_offset(ind->dims, ind->rank, i, st, ax, v), upd->data, i, x->dtype, red);
    }
    return OTTER_OK;
}

otter_status ot_kernel_scatternd(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *ind, *upd;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    OT_TRY(ot_ctx_need_input(ctx, 1, &ind));
    OT_TRY(ot_ctx_need_input(ctx, 2, &upd));
    if (!ot_is_index_type(ind->dtype) || ind->rank < 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' must be int32/int64 of rank >= 1",
                            ot_ctx_input_name(ctx, 1));
    int64_t q = ind->dims[ind->rank - 1];
    if (q > x->rank || upd->dtype != x->dtype)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "indices '%s' depth %lld exceeds data rank %d or updates dtype differs",
                            ot_ctx_input_name(ctx, 1), (long long)q, x->rank);
    int red = RED_NONE;
    OT_TRY(reduction_attr(ctx, &red));
    int64_t st[OTTER_MAX_RANK], inner = 1, rows = 1;
    ot_contiguous_strides(x->rank, x->dims, st);
    for (int i = (int)q; i < x->rank; i++) inner *= x->dims[i];
    for (int i = 0; i < ind->rank - 1; i++) rows *= ind->dims[i];
    if (otter_tensor_numel(upd) != rows * inner)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "updates '%s' has %lld elements, expected %lld",
                            ot_ctx_input_name(ctx, 2), (long long)otter_tensor_numel(upd), (long long)(rows * inner));
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    if (y->data != x->data) ot_copy_elems(y->data, x->data, otter_tensor_numel(x), x->dtype);
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0;
        for (int64_t k = 0; k < q; k++) {
            int64_t v = ot_index_at(ind, r * q + k), D = x->dims[k];
            if (v < -D || v >= D)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' value %lld out of range for size %lld",
                                    ot_ctx_input_name(ctx, 1), (long long)v, (long long)D);
            off += (v < 0 ? v + D : v) * st[k];
        }
        for (int64_t e = 0; e < inner; e++) scatter_one(y->data, off + e, upd->data, r * inner + e, x->dtype, red);
    }
    return OTTER_OK;
}
