/* Training kernels over indices and layout: GatherGrad, GatherElementsGrad, GatherNDGrad,
 * SliceGrad (scatter-adds of dY into a zero tensor of the forward input's shape, given as an
 * int64 shape input; com.otter SlicesGrad, several slices' gradients summed), ConcatTraining and
 * SplitTraining (any element type, moved as bytes). */
#include <string.h>

#include "runtime/ops/kernels.h"
#include "runtime/ops/training_internal.h"

/* Allocate a zeroed float-computed dX of the shape held by input shape_i. */
static otter_status zero_dx(ot_kernel_ctx *ctx, size_t shape_i, otter_dtype dt, otter_tensor **dx, float **DX,
                            float **tmp) {
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    OT_TRY(ot_train_shape_input(ctx, shape_i, &rank, dims));
    OT_TRY(ot_train_out(ctx, 0, dt, rank, dims, dx, DX, tmp));
    int64_t n = otter_tensor_numel(*dx);
    if (n) memset(*DX, 0, (size_t)n * sizeof(float));
    return OTTER_OK;
}

static otter_status index_at(const ot_kernel_ctx *ctx, const otter_tensor *ind, int64_t k, int64_t dim, int64_t *out) {
    *out = 0; /* set on every path: callers read it only on success, but -O3 can't tell */
    int64_t v = ot_get_i64(ind->data, ind->dtype, k);
    if (v < -dim || v >= dim)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "index %lld out of range for a dimension of %lld", (long long)v,
                            (long long)dim);
    *out = v < 0 ? v + dim : v;
    return OTTER_OK;
}

static otter_status check_indices(const ot_kernel_ctx *ctx, size_t i, const otter_tensor *t) {
    if (t->dtype != OTTER_DTYPE_INT64 && t->dtype != OTTER_DTYPE_INT32)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' must be int32 or int64, not %s",
                            ot_ctx_input_name(ctx, i), otter_dtype_name(t->dtype));
    return OTTER_OK;
}

/* Finish a scatter kernel: convert/free buffers. */
static otter_status finish(otter_status s, otter_tensor *dx, float *ty, float *t0) {
    if (s == OTTER_OK)
        ot_output_f32_done(dx, ty);
    else
        ot_free(ty);
    ot_free(t0);
    return s;
}

/* GatherGrad(shape, indices, dY; axis) -> dX: dX[pre, indices[j], post] += dY[pre, j, post]. */
otter_status ot_kernel_gather_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *sh, *ind, *dy;
    OT_TRY(ot_train_need(ctx, 0, "shape", &sh));
    OT_TRY(ot_train_need(ctx, 1, "indices", &ind));
    OT_TRY(ot_train_need(ctx, 2, "dY", &dy));
    OT_TRY(check_indices(ctx, 1, ind));
    const float *DY;
    float *t0 = NULL, *ty = NULL, *DX;
    otter_tensor *dx;
    OT_TRY(ot_train_in(ctx, 2, &DY, &t0));
    otter_status s = zero_dx(ctx, 0, dy->dtype, &dx, &DX, &ty);
    if (s != OTTER_OK) return finish(s, NULL, ty, t0);
    int64_t axis = ot_ctx_attr_int_or(ctx, "axis", 0); /* ONNX Runtime's operator: no ONNX schema */
    if (!ot_norm_axis(&axis, dx->rank))
        return finish(
            ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axis, dx->rank), dx,
            ty, t0);
    int64_t outer = 1, inner = 1, A = dx->dims[axis], nidx = otter_tensor_numel(ind);
    for (int i = 0; i < dx->rank; i++)
        if (i < axis)
            outer *= dx->dims[i];
        else if (i > axis)
            inner *= dx->dims[i];
    if (otter_tensor_numel(dy) != outer * nidx * inner)
        return finish(ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' has %lld elements, expected %lld",
                                   ot_ctx_input_name(ctx, 2), (long long)otter_tensor_numel(dy),
                                   (long long)(outer * nidx * inner)),
                      dx, ty, t0);
    for (int64_t j = 0; j < nidx && s == OTTER_OK; j++) {
        int64_t k;
        s = index_at(ctx, ind, j, A, &k);
        for (int64_t o = 0; s == OTTER_OK && o < outer; o++) {
            float *d = DX + (o * A + k) * inner;
            const float *g = DY + (o * nidx + j) * inner;
            for (int64_t i = 0; i < inner; i++) d[i] += g[i];
        }
    }
    return finish(s, dx, ty, t0);
}

/* GatherElementsGrad(dY, shape, indices; axis) -> dX: dX[p with p[axis] = indices[p]] += dY[p]. */
otter_status ot_kernel_gather_elements_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *sh, *ind;
    OT_TRY(ot_train_need(ctx, 0, "dY", &dy));
    OT_TRY(ot_train_need(ctx, 1, "shape", &sh));
    OT_TRY(ot_train_need(ctx, 2, "indices", &ind));
    OT_TRY(check_indices(ctx, 2, ind));
    const float *DY;
    float *t0 = NULL, *ty = NULL, *DX;
    otter_tensor *dx;
    OT_TRY(ot_train_in(ctx, 0, &DY, &t0));
    otter_status s = zero_dx(ctx, 1, dy->dtype, &dx, &DX, &ty);
    if (s != OTTER_OK) return finish(s, NULL, ty, t0);
    int64_t axis = ot_ctx_attr_int_or(ctx, "axis", 0); /* ONNX Runtime's operator: no ONNX schema */
    bool ok = ot_norm_axis(&axis, dx->rank) && ind->rank == dx->rank && ot_train_same_shape(ind, dy);
    for (int i = 0; ok && i < dx->rank; i++) ok = ind->dims[i] <= dx->dims[i] || i == axis;
    if (!ok)
        return finish(ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                   "indices '%s' must have dY's shape and the rank of dX; axis %lld must be in range",
                                   ot_ctx_input_name(ctx, 2), (long long)ot_ctx_attr_int_or(ctx, "axis", 0)),
                      dx, ty, t0);
    int64_t n = otter_tensor_numel(ind), st[OTTER_MAX_RANK];
    int64_t acc = 1;
    for (int i = dx->rank - 1; i >= 0; i--) st[i] = acc, acc *= dx->dims[i];
    for (int64_t p = 0; p < n && s == OTTER_OK; p++) {
        int64_t r = p, off = 0, k = 0;
        s = index_at(ctx, ind, p, dx->dims[axis], &k);
        for (int i = ind->rank - 1; i >= 0; i--) {
            int64_t c = r % ind->dims[i];
            r /= ind->dims[i];
            off += (i == axis ? k : c) * st[i];
        }
        if (s == OTTER_OK) DX[off] += DY[p];
    }
    return finish(s, dx, ty, t0);
}

/* GatherNDGrad(shape, indices, update; batch_dims) -> dX: the slices GatherND read get update
 * added (per batch of the leading batch_dims axes). */
otter_status ot_kernel_gather_nd_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *sh, *ind, *up;
    OT_TRY(ot_train_need(ctx, 0, "shape", &sh));
    OT_TRY(ot_train_need(ctx, 1, "indices", &ind));
    OT_TRY(ot_train_need(ctx, 2, "update", &up));
    OT_TRY(check_indices(ctx, 1, ind));
    const float *UP;
    float *t0 = NULL, *ty = NULL, *DX;
    otter_tensor *dx;
    OT_TRY(ot_train_in(ctx, 2, &UP, &t0));
    otter_status s = zero_dx(ctx, 0, up->dtype, &dx, &DX, &ty);
    if (s != OTTER_OK) return finish(s, NULL, ty, t0);
    int64_t b = ot_ctx_attr_int_or(ctx, "batch_dims", 0); /* ONNX Runtime's operator: no ONNX schema */
    int q = ind->rank;
    int64_t last = q ? ind->dims[q - 1] : 0;
    if (q < 1 || b < 0 || b >= q || b + last > dx->rank)
        return finish(ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                   "indices '%s' (rank %d, last dim %lld) and batch_dims %lld "
                                   "don't fit data of rank %d",
                                   ot_ctx_input_name(ctx, 1), q, (long long)last, (long long)b, dx->rank),
                      dx, ty, t0);
    int64_t batches = 1, per = 1, slice = 1;
    for (int i = 0; i < b; i++) batches *= dx->dims[i];
    for (int i = (int)b; i < q - 1; i++) per *= ind->dims[i];
    for (int i = (int)(b + last); i < dx->rank; i++) slice *= dx->dims[i];
    int64_t bstride = 1; /* elements of dX per batch */
    for (int i = (int)b; i < dx->rank; i++) bstride *= dx->dims[i];
    if (otter_tensor_numel(up) != batches * per * slice)
        return finish(ot_ctx_error(ctx, OTTER_ERR_INVALID, "update '%s' has %lld elements, expected %lld",
                                   ot_ctx_input_name(ctx, 2), (long long)otter_tensor_numel(up),
                                   (long long)(batches * per * slice)),
                      dx, ty, t0);
    for (int64_t bi = 0; bi < batches && s == OTTER_OK; bi++)
        for (int64_t j = 0; j < per && s == OTTER_OK; j++) {
            int64_t tuple = (bi * per + j) * last, off = 0;
            for (int64_t k = 0; k < last && s == OTTER_OK; k++) {
                int64_t v = 0;
                s = index_at(ctx, ind, tuple + k, dx->dims[b + k], &v);
                off = off * dx->dims[b + k] + v;
            }
            if (s != OTTER_OK) break;
            float *d = DX + bi * bstride + off * slice;
            const float *g = UP + (bi * per + j) * slice;
            for (int64_t i = 0; i < slice; i++) d[i] += g[i];
        }
    return finish(s, dx, ty, t0);
}

/* Where a Slice read in a tensor of dX's dims: per axis the first index, the step and the count. */
typedef struct slice_box {
    int64_t st[OTTER_MAX_RANK], stp[OTTER_MAX_RANK], cnt[OTTER_MAX_RANK];
} slice_box;

/* The box of Slice(starts, ends, axes?, steps?) given as inputs at..at+3, checked against dY (input dy_i). */
static otter_status slice_box_of(ot_kernel_ctx *ctx, size_t at, size_t dy_i, const otter_tensor *dx, slice_box *b) {
    const otter_tensor *dy;
    OT_TRY(ot_train_need(ctx, dy_i, "dY", &dy));
    int64_t starts[OTTER_MAX_RANK], ends[OTTER_MAX_RANK], axes[OTTER_MAX_RANK], steps[OTTER_MAX_RANK];
    int64_t ns, ne, na, nst;
    OT_TRY(ot_ctx_input_ints(ctx, at, starts, OTTER_MAX_RANK, &ns));
    OT_TRY(ot_ctx_input_ints(ctx, at + 1, ends, OTTER_MAX_RANK, &ne));
    if (ns != ne) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "starts and ends differ in length");
    if (ot_ctx_input(ctx, at + 2)) {
        OT_TRY(ot_ctx_input_ints(ctx, at + 2, axes, OTTER_MAX_RANK, &na));
        if (na != ns) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axes and starts differ in length");
    } else {
        for (int64_t i = 0; i < ns; i++) axes[i] = i;
    }
    if (ot_ctx_input(ctx, at + 3)) {
        OT_TRY(ot_ctx_input_ints(ctx, at + 3, steps, OTTER_MAX_RANK, &nst));
        if (nst != ns) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "steps and starts differ in length");
    } else {
        for (int64_t i = 0; i < ns; i++) steps[i] = 1;
    }
    const int r = dx->rank;
    for (int i = 0; i < r; i++) b->st[i] = 0, b->stp[i] = 1, b->cnt[i] = dx->dims[i];
    for (int64_t k = 0; k < ns; k++) {
        int64_t a = axes[k];
        if (!ot_norm_axis(&a, r) || steps[k] == 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range or step 0", (long long)axes[k]);
        int64_t d = dx->dims[a], lo = starts[k], hi = ends[k], sp = steps[k];
        if (lo < 0) lo += d;
        if (hi < 0) hi += d;
        if (sp > 0) {
            lo = lo < 0 ? 0 : lo > d ? d : lo;
            hi = hi < 0 ? 0 : hi > d ? d : hi;
            b->cnt[a] = hi > lo ? (hi - lo + sp - 1) / sp : 0;
        } else {
            lo = lo < 0 ? -1 : lo > d - 1 ? d - 1 : lo;
            hi = hi < -1 ? -1 : hi > d - 1 ? d - 1 : hi;
            b->cnt[a] = lo > hi ? (lo - hi + (-sp) - 1) / (-sp) : 0;
        }
        b->st[a] = lo, b->stp[a] = sp;
    }
    bool ok = dy->rank == r;
    for (int i = 0; ok && i < r; i++) ok = dy->dims[i] == b->cnt[i];
    if (!ok) {
        char s1[128], s2[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' %s does not have the slice's shape %s",
                            ot_ctx_input_name(ctx, dy_i), ot_shape_str(s1, sizeof s1, dy->rank, dy->dims),
                            ot_shape_str(s2, sizeof s2, r, b->cnt));
    }
    return OTTER_OK;
}

/* The boxes (steps +-1 on every axis) are disjoint and cover all of dX: their parts can be copied
 * into dX without zeroing it first. */
static bool boxes_tile(const slice_box *b, size_t n, const otter_tensor *dx) {
    int64_t covered = 0;
    for (size_t g = 0; g < n; g++) {
        int64_t vol = 1;
        for (int i = 0; i < dx->rank; i++) {
            if (b[g].stp[i] != 1 && b[g].stp[i] != -1) return false;
            vol *= b[g].cnt[i];
        }
        covered += vol;
        for (size_t h = 0; vol && h < g; h++) {
            bool apart = false; /* some axis on which the two index ranges don't meet */
            for (int i = 0; i < dx->rank && !apart; i++) {
                int64_t lo_g = b[g].stp[i] > 0 ? b[g].st[i] : b[g].st[i] - b[g].cnt[i] + 1;
                int64_t lo_h = b[h].stp[i] > 0 ? b[h].st[i] : b[h].st[i] - b[h].cnt[i] + 1;
                apart = lo_g + b[g].cnt[i] <= lo_h || lo_h + b[h].cnt[i] <= lo_g || !b[h].cnt[i];
            }
            if (!apart) return false;
        }
    }
    return covered == otter_tensor_numel(dx);
}

/* dY row by row (its last axis), each row added to (or, with copy, stored in) dX along its last axis
 * from the row's offset; the offsets advance as an odometer over the other axes. The per-element
 * divisions this replaced were 12% of a transformer encoder's training step. */
static void scatter_box(float *DX, const otter_tensor *dx, const float *DY, int64_t n, const slice_box *b, bool copy) {
    const int r = dx->rank;
    int64_t xs[OTTER_MAX_RANK], idx[OTTER_MAX_RANK] = {0}, acc = 1, off = 0;
    for (int i = r - 1; i >= 0; i--) xs[i] = acc, acc *= dx->dims[i], off += b->st[i] * xs[i];
    const int64_t row = r ? b->cnt[r - 1] : 1, step = r ? b->stp[r - 1] : 1;
    for (int64_t p = 0; p < n; p += row) {
        float *restrict d = DX + off;
        const float *restrict g = DY + p;
        if (copy && step == 1)
            memcpy(d, g, (size_t)row * sizeof *g);
        else if (copy)
            for (int64_t j = 0; j < row; j++) d[j * step] = g[j];
        else if (step == 1)
            for (int64_t j = 0; j < row; j++) d[j] += g[j];
        else
            for (int64_t j = 0; j < row; j++) d[j * step] += g[j];
        for (int i = r - 2; i >= 0; i--) {
            if (++idx[i] < b->cnt[i]) {
                off += b->stp[i] * xs[i];
                break;
            }
            off -= (b->cnt[i] - 1) * b->stp[i] * xs[i];
            idx[i] = 0;
        }
    }
}

/* SliceGrad(dY, shape, starts, ends, axes?, steps?) -> dX: zeros with dY written where Slice read.
 * com.otter SlicesGrad (fuse.c) takes further parts, (dY, starts, ends, axes, steps) each after
 * those six inputs, and sums them all: the gradient of q, k and v sliced from one projection, dX
 * written once (each part copied in place when they tile it) instead of three zeroed tensors and
 * their Sum (7% of a transformer encoder's training step). */
otter_status ot_kernel_slice_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy;
    OT_TRY(ot_train_need(ctx, 0, "dY", &dy));
    const size_t parts = ctx->n_inputs <= 6 ? 1 : 1 + (ctx->n_inputs - 6 + 4) / 5;
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    OT_TRY(ot_train_shape_input(ctx, 1, &rank, dims));
    float *ty = NULL, *DX;
    otter_tensor *dx;
    OT_TRY(ot_train_out(ctx, 0, dy->dtype, rank, dims, &dx, &DX, &ty));
    slice_box *box = ot_ctx_scratch(ctx, parts * sizeof *box);
    otter_status s = box ? OTTER_OK : OTTER_ERR_NOMEM;
    /* part g's dY: input 0 for the first part, else the first of its five; its starts: input 2 + 5 g */
    for (size_t g = 0; g < parts && s == OTTER_OK; g++)
        s = slice_box_of(ctx, 2 + 5 * g, g ? 1 + 5 * g : 0, dx, &box[g]);
    const bool tiled = s == OTTER_OK && boxes_tile(box, parts, dx);
    if (s == OTTER_OK && !tiled && otter_tensor_numel(dx)) memset(DX, 0, (size_t)otter_tensor_numel(dx) * sizeof *DX);
    for (size_t g = 0; g < parts && s == OTTER_OK; g++) {
        const size_t dy_i = g ? 1 + 5 * g : 0;
        const float *DY;
        float *t0 = NULL;
        s = ot_train_in(ctx, dy_i, &DY, &t0);
        if (s == OTTER_OK) scatter_box(DX, dx, DY, otter_tensor_numel(ot_ctx_input(ctx, dy_i)), &box[g], tiled);
        ot_free(t0);
    }
    return finish(s, dx, ty, NULL);
}

/* ConcatTraining(inputs...; axis) -> concat_result, per_input_length? (int64 [n]: each input's
 * size along axis). */
otter_status ot_kernel_concat_training(ot_kernel_ctx *ctx) {
    const otter_tensor *first = NULL;
    for (size_t i = 0; i < ctx->n_inputs && !first; i++) first = ot_ctx_input(ctx, i);
    if (!first) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs at least one input");
    if (first->dtype == OTTER_DTYPE_STRING)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "string tensors are not supported");
    int64_t axis = ot_ctx_attr_int_or(ctx, "axis", 0); /* ONNX Runtime's operator: no ONNX schema */
    if (!ot_norm_axis(&axis, first->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axis, first->rank);
    int64_t dims[OTTER_MAX_RANK], total = 0;
    memcpy(dims, first->dims, sizeof(int64_t) * (size_t)first->rank);
    for (size_t i = 0; i < ctx->n_inputs; i++) {
        const otter_tensor *t = ot_ctx_input(ctx, i);
        if (!t) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is missing", i);
        bool ok = t->rank == first->rank && t->dtype == first->dtype;
        for (int d = 0; ok && d < t->rank; d++) ok = d == axis || t->dims[d] == first->dims[d];
        if (!ok) {
            char s1[128];
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' %s does not match input 0 off axis %lld", i,
                                ot_ctx_input_name(ctx, i), ot_shape_str(s1, sizeof s1, t->rank, t->dims),
                                (long long)axis);
        }
        total += t->dims[axis];
    }
    dims[axis] = total;
    otter_tensor *y = ot_ctx_output(ctx, 0, first->dtype, first->rank, dims);
    if (!y) return ctx->output_status;
    size_t es = otter_dtype_size(first->dtype);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < first->rank; d++)
        if (d < axis)
            outer *= dims[d];
        else if (d > axis)
            inner *= dims[d];
    int64_t at = 0;
    for (size_t i = 0; i < ctx->n_inputs; i++) {
        const otter_tensor *t = ot_ctx_input(ctx, i);
        int64_t rows = t->dims[axis] * inner;
        for (int64_t o = 0; o < outer && rows; o++)
            memcpy((char *)y->data + (size_t)((o * total * inner + at) * (int64_t)es),
                   (const char *)t->data + (size_t)(o * rows * (int64_t)es), (size_t)rows * es);
        at += rows;
    }
    if (ot_train_wanted(ctx, 1)) {
        int64_t n = (int64_t)ctx->n_inputs;
        otter_tensor *len = ot_ctx_output(ctx, 1, OTTER_DTYPE_INT64, 1, &n);
        if (!len) return ctx->output_status;
        for (size_t i = 0; i < ctx->n_inputs; i++) ((int64_t *)len->data)[i] = ot_ctx_input(ctx, i)->dims[axis];
    }
    return OTTER_OK;
}

/* SplitTraining(input, split; axis) -> outputs: split holds each output's length along axis (empty
 * or omitted: equal parts). */
otter_status ot_kernel_split_training(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_train_need(ctx, 0, "input", &x));
    if (x->dtype == OTTER_DTYPE_STRING)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "string tensors are not supported");
    int64_t axis = ot_ctx_attr_int_or(ctx, "axis", 0); /* ONNX Runtime's operator: no ONNX schema */
    if (!ot_norm_axis(&axis, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axis, x->rank);
    size_t n = ctx->n_outputs;
    if (n == 0) return OTTER_OK;
    int64_t *split = ot_malloc(n * sizeof(int64_t)), cnt = 0, sum = 0, dim = x->dims[axis];
    if (!split) return OT_NOMEM();
    otter_status s = OTTER_OK;
    const otter_tensor *sp = ot_ctx_input(ctx, 1);
    if (sp && otter_tensor_numel(sp) > 0) {
        s = ot_ctx_input_ints(ctx, 1, split, (int64_t)n, &cnt);
        if (s == OTTER_OK && cnt != (int64_t)n)
            s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "split has %lld values for %zu outputs", (long long)cnt, n);
    } else if (dim % (int64_t)n != 0) {
        s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis size %lld does not split into %zu equal parts", (long long)dim,
                         n);
    } else {
        for (size_t i = 0; i < n; i++) split[i] = dim / (int64_t)n;
    }
    for (size_t i = 0; s == OTTER_OK && i < n; i++) {
        if (split[i] < 0) s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "negative split length");
        sum += split[i];
    }
    if (s == OTTER_OK && sum != dim)
        s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "split lengths sum to %lld, axis %lld has %lld", (long long)sum,
                         (long long)axis, (long long)dim);
    size_t es = otter_dtype_size(x->dtype);
    int64_t outer = 1, inner = 1, at = 0;
    for (int d = 0; d < x->rank; d++)
        if (d < axis)
            outer *= x->dims[d];
        else if (d > axis)
            inner *= x->dims[d];
    for (size_t i = 0; s == OTTER_OK && i < n; i++) {
        int64_t dims[OTTER_MAX_RANK];
        memcpy(dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
        dims[axis] = split[i];
        otter_tensor *y = ot_ctx_output(ctx, i, x->dtype, x->rank, dims);
        if (!y) {
            s = ctx->output_status;
            break;
        }
        int64_t rows = split[i] * inner;
        for (int64_t o = 0; o < outer && rows; o++)
            memcpy((char *)y->data + (size_t)(o * rows * (int64_t)es),
                   (const char *)x->data + (size_t)((o * dim * inner + at) * (int64_t)es), (size_t)rows * es);
        at += rows;
    }
    ot_free(split);
    return s;
}

/* BroadcastGradientArgs(a_shape, b_shape) -> (a_axes, b_axes), as ONNX Runtime defines it: the axes of
 * the broadcast result (numbered in it, last first) along which A, resp. B, was broadcast. An axis
 * only one of the shapes has goes to the shorter's list; equal sizes go to neither. The gradient of
 * each input is dY summed over its axes (keepdims) and reshaped to the input's shape, which a
 * gradient graph computes this way when shapes are known only at run time. */
otter_status ot_kernel_broadcast_gradient_args(ot_kernel_ctx *ctx) {
    int64_t shape[2][OTTER_MAX_RANK], rank[2];
    for (size_t k = 0; k < 2; k++) OT_TRY(ot_ctx_input_ints(ctx, k, shape[k], OTTER_MAX_RANK, &rank[k]));
    int64_t out_rank = rank[0] > rank[1] ? rank[0] : rank[1];
    int64_t axes[2][OTTER_MAX_RANK], n_axes[2] = {0, 0};
    for (int64_t k = out_rank - 1; k >= 0; k--) {
        int64_t i = k - (out_rank - rank[0]), j = k - (out_rank - rank[1]);
        if (i < 0)
            axes[0][n_axes[0]++] = k;
        else if (j < 0)
            axes[1][n_axes[1]++] = k;
        else if (shape[0][i] == shape[1][j])
            continue;
        else if (shape[0][i] == 1)
            axes[0][n_axes[0]++] = k;
        else if (shape[1][j] == 1)
            axes[1][n_axes[1]++] = k;
        else
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "'%s' and '%s' hold shapes that don't broadcast: dimension %lld of one is %lld, of "
                                "the other %lld",
                                ot_ctx_input_name(ctx, 0), ot_ctx_input_name(ctx, 1), (long long)k,
                                (long long)shape[0][i], (long long)shape[1][j]);
    }
    for (size_t k = 0; k < 2 && k < ctx->n_outputs; k++) {
        otter_tensor *y = ot_ctx_output(ctx, k, OTTER_DTYPE_INT64, 1, &n_axes[k]);
        if (!y) return ctx->output_status;
        if (n_axes[k]) memcpy(y->data, axes[k], (size_t)n_axes[k] * sizeof(int64_t));
    }
    return OTTER_OK;
}
