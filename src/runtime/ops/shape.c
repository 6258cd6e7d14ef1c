/* Shape and data-movement kernels: Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Concat, Split,
 * Slice, Pad, Tile, Expand, DepthToSpace, SpaceToDepth, ReverseSequence, Compress; most are one
 * strided copy (strided.h). Gather and Scatter: shape_index.c; Resize: resize.c. */
#include <string.h>

#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/strided.h"

/* Output = input with new dims (same data). */
static otter_status reshape_out(ot_kernel_ctx *ctx, const otter_tensor *x, int rank, const int64_t *dims) {
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, rank, dims);
    if (!y) return ctx->output_status;
    if (y->data != x->data) ot_copy_elems(y->data, x->data, otter_tensor_numel(x), x->dtype);
    return OTTER_OK;
}

/* ---- Reshape / Flatten / Squeeze / Unsqueeze ---------------------------------------------------- */

otter_status ot_kernel_reshape(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t shape[OTTER_MAX_RANK], n;
    if (ctx->opset < 5) {
        const otter_attr *a = otter_node_attr(ctx->node, "shape");
        if (!a) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'shape' is missing");
        if (a->n_ints > OTTER_MAX_RANK) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "shape has too many dims");
        n = (int64_t)a->n_ints;
        memcpy(shape, a->ints, sizeof(int64_t) * a->n_ints);
    } else {
        OT_TRY(ot_ctx_input_ints(ctx, 1, shape, OTTER_MAX_RANK, &n));
    }
    int64_t allowzero;
    OT_TRY(ot_ctx_attr_int(ctx, "allowzero", &allowzero));
    int64_t known = 1, infer = -1, total = otter_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        if (shape[i] == 0 && !allowzero) {
            if (i >= x->rank)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "shape[%lld] = 0 copies a dim input '%s' doesn't have",
                                    (long long)i, ot_ctx_input_name(ctx, 0));
            shape[i] = x->dims[i];
        }
        if (shape[i] == -1) {
            if (infer >= 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "shape has more than one -1");
            infer = i;
            continue;
        }
        if (shape[i] < 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "shape[%lld] = %lld", (long long)i, (long long)shape[i]);
        known *= shape[i];
    }
    if (infer >= 0) {
        if (known == 0 || total % known != 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "cannot infer the -1 dim: %lld elements into blocks of %lld",
                                (long long)total, (long long)known);
        shape[infer] = total / known;
        known *= shape[infer];
    }
    if (known != total) {
        char b[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' %s has %lld elements, the new shape %lld",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(b, sizeof b, x->rank, x->dims), (long long)total,
                            (long long)known);
    }
    return reshape_out(ctx, x, (int)n, shape);
}

otter_status ot_kernel_flatten(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t axis0;
    OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis0));
    int64_t axis = axis0 < 0 ? axis0 + x->rank : axis0;
    if (axis < 0 || axis > x->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axis0, x->rank);
    int64_t d[2] = {1, 1};
    for (int i = 0; i < x->rank; i++) d[i < axis ? 0 : 1] *= x->dims[i];
    return reshape_out(ctx, x, 2, d);
}

/* axes from the attribute (opset < 13) or input 1; *n = -1 when none given. */
static otter_status axes_arg(const ot_kernel_ctx *ctx, int64_t *axes, int64_t *n) {
    *n = -1;
    if (ctx->opset < 13) {
        const otter_attr *a = otter_node_attr(ctx->node, "axes");
        if (!a) return OTTER_OK;
        if (a->n_ints > OTTER_MAX_RANK) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "too many axes");
        memcpy(axes, a->ints, sizeof(int64_t) * a->n_ints);
        *n = (int64_t)a->n_ints;
        return OTTER_OK;
    }
    if (!ot_ctx_input(ctx, 1)) return OTTER_OK;
    return ot_ctx_input_ints(ctx, 1, axes, OTTER_MAX_RANK, n);
}

otter_status ot_kernel_squeeze(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t axes[OTTER_MAX_RANK], n;
    OT_TRY(axes_arg(ctx, axes, &n));
    bool drop[OTTER_MAX_RANK] = {false};
    if (n < 0) {
        for (int i = 0; i < x->rank; i++) drop[i] = x->dims[i] == 1;
    } else {
        for (int64_t i = 0; i < n; i++) {
            int64_t a = axes[i];
            if (!ot_norm_axis(&a, x->rank))
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for input '%s' of rank %d",
                                    (long long)axes[i], ot_ctx_input_name(ctx, 0), x->rank);
            if (x->dims[a] != 1)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "cannot squeeze axis %lld of input '%s': size %lld",
                                    (long long)axes[i], ot_ctx_input_name(ctx, 0), (long long)x->dims[a]);
            drop[a] = true;
        }
    }
    int64_t d[OTTER_MAX_RANK];
    int r = 0;
    for (int i = 0; i < x->rank; i++)
        if (!drop[i]) d[r++] = x->dims[i];
    return reshape_out(ctx, x, r, d);
}

otter_status ot_kernel_unsqueeze(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t axes[OTTER_MAX_RANK], n;
    OT_TRY(axes_arg(ctx, axes, &n));
    if (n < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axes are missing");
    int r = x->rank + (int)n;
    if (r > OTTER_MAX_RANK) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "result rank %d is too large", r);
    bool ins[OTTER_MAX_RANK] = {false};
    for (int64_t i = 0; i < n; i++) {
        int64_t a = axes[i];
        if (!ot_norm_axis(&a, r) || ins[a])
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range or repeated (output rank %d)",
                                (long long)axes[i], r);
        ins[a] = true;
    }
    int64_t d[OTTER_MAX_RANK];
    for (int i = 0, j = 0; i < r; i++) d[i] = ins[i] ? 1 : x->dims[j++];
    return reshape_out(ctx, x, r, d);
}

/* ---- Transpose ------------------------------------------------------------------------------ */

static otter_status permute(ot_kernel_ctx *ctx, size_t out_idx, const otter_tensor *x, const void *data, int rank,
                            const int64_t *dims, const int64_t *perm, otter_tensor **yout) {
    int64_t st[OTTER_MAX_RANK], ost[OTTER_MAX_RANK], od[OTTER_MAX_RANK];
    ot_contiguous_strides(rank, dims, st);
    for (int i = 0; i < rank; i++) od[i] = dims[perm[i]], ost[i] = st[perm[i]];
    otter_tensor *y = ot_ctx_output(ctx, out_idx, x->dtype, rank, od);
    if (!y) return ctx->output_status;
    ot_copy_strided(ctx, y->data, data, x->dtype, rank, od, ost);
    if (yout) *yout = y;
    return OTTER_OK;
}

otter_status ot_kernel_transpose(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t perm[OTTER_MAX_RANK];
    const otter_attr *a = otter_node_attr(ctx->node, "perm");
    if (a && a->n_ints > 0) {
        if ((int)a->n_ints != x->rank)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "perm has %zu values for input '%s' of rank %d", a->n_ints,
                                ot_ctx_input_name(ctx, 0), x->rank);
        bool seen[OTTER_MAX_RANK] = {false};
        for (int i = 0; i < x->rank; i++) {
            perm[i] = a->ints[i];
            if (perm[i] < 0) perm[i] += x->rank;
            if (perm[i] < 0 || perm[i] >= x->rank || seen[perm[i]])
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "perm is not a permutation of 0..%d", x->rank - 1);
            seen[perm[i]] = true;
        }
    } else {
        for (int i = 0; i < x->rank; i++) perm[i] = x->rank - 1 - i;
    }
    return permute(ctx, 0, x, x->data, x->rank, x->dims, perm, NULL);
}

/* ---- Concat / Split ------------------------------------------------------------------------ */

#define OT_CONCAT_MAX_INPUTS 64 /* more inputs copy on one thread */

/* Concat's copies: outer rows of each input into its columns of the output, (row, input) pairs
 * split over the session's threads (squeezenet's channel concats move 2-6 MB an image batch). Row by
 * row, so a thread copies whole images (all their inputs), the images the convolutions around it
 * give that thread: its copies read what its core wrote and leave the result where the next layer
 * reads it (input by input, each thread had half of every image: squeezenet batch 32, 2 threads,
 * 1.05x). */
typedef struct concat_copies {
    char *y;
    const char *src[OT_CONCAT_MAX_INPUTS];
    int64_t blk[OT_CONCAT_MAX_INPUTS], off[OT_CONCAT_MAX_INPUTS]; /* elements a row, offset in the output row */
    int64_t n_inputs, outer, row;                                 /* row: output elements a row */
    size_t es;
    otter_dtype dtype;
} concat_copies;

static void concat_rows(void *arg, int64_t t0, int64_t t1) {
    const concat_copies *c = arg;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t o = t / c->n_inputs, i = t % c->n_inputs;
        ot_copy_elems(c->y + (size_t)(o * c->row + c->off[i]) * c->es, c->src[i] + (size_t)(o * c->blk[i]) * c->es,
                      c->blk[i], c->dtype);
    }
}

otter_status ot_kernel_concat(ot_kernel_ctx *ctx) {
    const otter_tensor *x0 = NULL;
    for (size_t i = 0; i < ctx->n_inputs && !x0; i++) x0 = ot_ctx_input(ctx, i);
    if (!x0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "no inputs");
    int64_t axis;
    /* Concat-1 gives its default 1 in the description only; from Concat-4 the axis is required. */
    if (ctx->opset < 4)
        axis = ot_ctx_attr_int_or(ctx, "axis", 1);
    else
        OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis));
    int64_t ax = axis;
    if (!ot_norm_axis(&ax, x0->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axis, x0->rank);
    int64_t d[OTTER_MAX_RANK];
    memcpy(d, x0->dims, sizeof(int64_t) * (size_t)x0->rank);
    d[ax] = 0;
    for (size_t i = 0; i < ctx->n_inputs; i++) {
        const otter_tensor *t = ot_ctx_input(ctx, i);
        if (!t) continue;
        bool ok = t->rank == x0->rank && t->dtype == x0->dtype;
        for (int k = 0; ok && k < t->rank; k++) ok = k == ax || t->dims[k] == x0->dims[k];
        if (!ok) {
            char b1[128], b2[128];
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' %s %s doesn't match input 0 %s %s on axis %lld",
                                i, ot_ctx_input_name(ctx, i), otter_dtype_name(t->dtype),
                                ot_shape_str(b1, sizeof b1, t->rank, t->dims), otter_dtype_name(x0->dtype),
                                ot_shape_str(b2, sizeof b2, x0->rank, x0->dims), (long long)axis);
        }
        d[ax] += t->dims[ax];
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x0->dtype, x0->rank, d);
    if (!y) return ctx->output_status;
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < ax; k++) outer *= d[k];
    for (int k = (int)ax + 1; k < x0->rank; k++) inner *= d[k];
    size_t es = ot_elem_size(x0->dtype);
    if (x0->dtype != OTTER_DTYPE_STRING && ctx->n_inputs <= OT_CONCAT_MAX_INPUTS && ctx->n_threads > 1 && outer > 1) {
        concat_copies c = {.y = y->data, .outer = outer, .row = d[ax] * inner, .es = es, .dtype = x0->dtype};
        for (size_t i = 0, off = 0; i < ctx->n_inputs; i++) {
            const otter_tensor *t = ot_ctx_input(ctx, i);
            if (!t) continue;
            c.src[c.n_inputs] = t->data, c.blk[c.n_inputs] = t->dims[ax] * inner, c.off[c.n_inputs] = (int64_t)off;
            off += (size_t)c.blk[c.n_inputs++];
        }
        /* rows of at least 16 KB a task */
        const int64_t avg = c.row / c.n_inputs + 1, grain = 1 + (int64_t)(16384 / es) / avg;
        ot_parallel_for(ctx, c.n_inputs * outer, grain, concat_rows, &c);
        return OTTER_OK;
    }
    int64_t off = 0;
    for (size_t i = 0; i < ctx->n_inputs; i++) {
        const otter_tensor *t = ot_ctx_input(ctx, i);
        if (!t) continue;
        int64_t blk = t->dims[ax] * inner;
        /* a strided copy of t into the output's sub-block [.., off:off+blk] */
        if (outer == 1 || blk == d[ax] * inner) {
            ot_copy_elems((char *)y->data + (size_t)off * es, t->data, outer * blk, t->dtype);
        } else {
            for (int64_t o = 0; o < outer; o++)
                ot_copy_elems((char *)y->data + (size_t)(o * d[ax] * inner + off) * es,
                              (const char *)t->data + (size_t)(o * blk) * es, blk, t->dtype);
        }
        off += blk;
    }
    return OTTER_OK;
}

otter_status ot_kernel_split(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t axis;
    /* Split-1 gives no default for its axis (Split-2 has 0, what Split-1 did). */
    if (ctx->opset < 2)
        axis = ot_ctx_attr_int_or(ctx, "axis", 0);
    else
        OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis));
    int64_t ax = axis;
    if (!ot_norm_axis(&ax, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axis, x->rank);
    size_t nout = ctx->n_outputs;
    if (nout == 0) return OTTER_OK;
    int64_t *sp = ot_calloc(nout, sizeof(int64_t)), n = -1;
    if (!sp) return OT_NOMEM();
    otter_status s = OTTER_OK;
    const otter_attr *sa = otter_node_attr(ctx->node, "split");
    if ((ctx->opset >= 13 || ctx->opset < 2) && ot_ctx_input(ctx, 1)) {
        s = ot_ctx_input_ints(ctx, 1, sp, (int64_t)nout, &n);
    } else if (sa && sa->n_ints > 0) {
        if (sa->n_ints != nout) {
            n = (int64_t)sa->n_ints;
        } else {
            memcpy(sp, sa->ints, sizeof(int64_t) * nout);
            n = (int64_t)nout;
        }
    }
    int64_t D = x->dims[ax];
    if (s == OTTER_OK && n >= 0) {
        int64_t sum = 0;
        for (int64_t i = 0; i < n && i < (int64_t)nout; i++) sum += sp[i];
        if (n != (int64_t)nout || sum != D)
            s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "split has %lld parts summing to %lld, expected %zu parts of %lld",
                             (long long)n, (long long)sum, nout, (long long)D);
    } else if (s == OTTER_OK) {
        int64_t chunk = (D + (int64_t)nout - 1) / (int64_t)nout;
        for (size_t i = 0; i < nout; i++) {
            int64_t start = (int64_t)i * chunk;
            sp[i] = start >= D ? 0 : (start + chunk > D ? D - start : chunk);
        }
    }
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < ax; k++) outer *= x->dims[k];
    for (int k = (int)ax + 1; k < x->rank; k++) inner *= x->dims[k];
    size_t es = ot_elem_size(x->dtype);
    int64_t off = 0;
    for (size_t i = 0; s == OTTER_OK && i < nout; i++) {
        int64_t d[OTTER_MAX_RANK];
        memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
        d[ax] = sp[i];
        otter_tensor *y = ot_ctx_output(ctx, i, x->dtype, x->rank, d);
        if (!y) {
            s = ctx->output_status;
            break;
        }
        int64_t blk = sp[i] * inner;
        for (int64_t o = 0; o < outer; o++)
            ot_copy_elems((char *)y->data + (size_t)(o * blk) * es,
                          (const char *)x->data + (size_t)(o * D * inner + off) * es, blk, x->dtype);
        off += blk;
    }
    ot_free(sp);
    return s;
}

/* ---- Slice ------------------------------------------------------------------------------------ */

otter_status ot_kernel_slice(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int r = x->rank;
    int64_t starts[OTTER_MAX_RANK], ends[OTTER_MAX_RANK], axes[OTTER_MAX_RANK], steps[OTTER_MAX_RANK];
    int64_t ns = 0, ne = 0, na = -1, nst = -1;
    if (ctx->opset < 10) {
        const otter_attr *a = otter_node_attr(ctx->node, "starts"), *b = otter_node_attr(ctx->node, "ends"),
                         *c = otter_node_attr(ctx->node, "axes");
        if (!a || !b) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attributes 'starts' and 'ends' are required");
        if (a->n_ints > OTTER_MAX_RANK || b->n_ints > OTTER_MAX_RANK || (c && c->n_ints > OTTER_MAX_RANK))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "too many axes");
        ns = (int64_t)a->n_ints, ne = (int64_t)b->n_ints;
        memcpy(starts, a->ints, sizeof(int64_t) * a->n_ints);
        memcpy(ends, b->ints, sizeof(int64_t) * b->n_ints);
        if (c) na = (int64_t)c->n_ints, memcpy(axes, c->ints, sizeof(int64_t) * c->n_ints);
    } else {
        OT_TRY(ot_ctx_input_ints(ctx, 1, starts, OTTER_MAX_RANK, &ns));
        OT_TRY(ot_ctx_input_ints(ctx, 2, ends, OTTER_MAX_RANK, &ne));
        if (ot_ctx_input(ctx, 3)) OT_TRY(ot_ctx_input_ints(ctx, 3, axes, OTTER_MAX_RANK, &na));
        if (ot_ctx_input(ctx, 4)) OT_TRY(ot_ctx_input_ints(ctx, 4, steps, OTTER_MAX_RANK, &nst));
    }
    if (ns != ne || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "starts, ends, axes and steps differ in length");
    int64_t st[OTTER_MAX_RANK], d[OTTER_MAX_RANK], begin[OTTER_MAX_RANK], step[OTTER_MAX_RANK];
    ot_contiguous_strides(r, x->dims, st);
    bool seen[OTTER_MAX_RANK] = {false};
    for (int i = 0; i < r; i++) d[i] = x->dims[i], begin[i] = 0, step[i] = 1;
    for (int64_t i = 0; i < ns; i++) {
        int64_t ax = na >= 0 ? axes[i] : i;
        if (!ot_norm_axis(&ax, r) || seen[ax])
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range or repeated for input '%s' of rank %d",
                                (long long)(na >= 0 ? axes[i] : i), ot_ctx_input_name(ctx, 0), r);
        seen[ax] = true;
        int64_t sp = nst >= 0 ? steps[i] : 1, dim = x->dims[ax], s = starts[i], e = ends[i];
        if (sp == 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "step 0 on axis %lld", (long long)ax);
        if (s < 0) s = s < -dim ? 0 - (sp < 0) * 1 : s + dim;
        if (e < 0) e = e < -dim ? -1 : e + dim;
        if (sp > 0) {
            s = s < 0 ? 0 : s > dim ? dim : s;
            e = e < 0 ? 0 : e > dim ? dim : e;
            d[ax] = e > s ? (e - s + sp - 1) / sp : 0;
        } else {
            s = s < 0 ? -1 : s > dim - 1 ? dim - 1 : s;
            e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
            d[ax] = s > e ? (s - e + (-sp) - 1) / (-sp) : 0;
        }
        begin[ax] = s, step[ax] = sp;
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, r, d);
    if (!y) return ctx->output_status;
    int64_t off = 0, ost[OTTER_MAX_RANK], numel = 1;
    for (int i = 0; i < r; i++) off += begin[i] * st[i], ost[i] = st[i] * step[i], numel *= d[i];
    if (numel == 0) return OTTER_OK;
    ot_copy_strided(ctx, y->data, (const char *)x->data + (size_t)off * ot_elem_size(x->dtype), x->dtype, r, d, ost);
    return OTTER_OK;
}

/* ---- Pad ---------------------------------------------------------------------------------------- */

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP };

static otter_status pad_mode(const ot_kernel_ctx *ctx, const char **mode, int *m) {
    OT_TRY(ot_ctx_attr_string(ctx, "mode", mode));
    *m = strcmp(*mode, "constant") == 0  ? PAD_CONSTANT
         : strcmp(*mode, "reflect") == 0 ? PAD_REFLECT
         : strcmp(*mode, "edge") == 0    ? PAD_EDGE
         : strcmp(*mode, "wrap") == 0    ? PAD_WRAP
                                         : -1;
    return *m < 0 ? ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown mode '%s'", *mode) : OTTER_OK;
}

/* pads [begin..., end...] for each of the r axes, from the int64 inputs pads_in and, when given,
 * axes_in (opset 18: pads name only those axes). */
static otter_status pad_inputs(const ot_kernel_ctx *ctx, size_t pads_in, size_t axes_in, int r, int64_t *pads) {
    int64_t raw[2 * OTTER_MAX_RANK], axes[OTTER_MAX_RANK], np, na = -1;
    OT_TRY(ot_ctx_input_ints(ctx, pads_in, raw, 2 * OTTER_MAX_RANK, &np));
    if (ot_ctx_input(ctx, axes_in)) OT_TRY(ot_ctx_input_ints(ctx, axes_in, axes, OTTER_MAX_RANK, &na));
    if (na < 0) {
        if (np != 2 * r)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "pads '%s' has %lld values, expected %d",
                                ot_ctx_input_name(ctx, pads_in), (long long)np, 2 * r);
        memcpy(pads, raw, sizeof(int64_t) * (size_t)np);
        return OTTER_OK;
    }
    if (np != 2 * na) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "pads and axes lengths disagree");
    for (int64_t i = 0; i < na; i++) {
        int64_t ax = axes[i];
        if (!ot_norm_axis(&ax, r)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis out of range");
        pads[ax] = raw[i], pads[r + ax] = raw[na + i];
    }
    return OTTER_OK;
}

/* For each axis i and index o of the padded axis (length d[i]), the index of x that Pad copies
 * there, or -1 for the constant: mp[i] points into the returned array (NULL: out of memory; the
 * caller frees it). Non-constant modes need non-empty axes. */
static int64_t *pad_sources(int r, const int64_t *xdims, const int64_t *d, const int64_t *pads, int m, int64_t **mp) {
    int64_t total = 0;
    for (int i = 0; i < r; i++) total += d[i];
    int64_t *map = ot_malloc((size_t)(total > 0 ? total : 1) * sizeof(int64_t));
    if (!map) return NULL;
    int64_t acc = 0;
    for (int i = 0; i < r; i++) {
        mp[i] = map + acc;
        acc += d[i];
        int64_t n = xdims[i];
        for (int64_t o = 0; o < d[i]; o++) {
            int64_t s = o - pads[i];
            if (s < 0 || s >= n) {
                if (m == PAD_CONSTANT) {
                    s = -1;
                } else if (m == PAD_EDGE) {
                    s = s < 0 ? 0 : n - 1;
                } else if (m == PAD_WRAP) {
                    s = ((s % n) + n) % n;
                } else if (n == 1) {
                    s = 0;
                } else {
                    int64_t period = 2 * (n - 1);
                    s = ((s % period) + period) % period;
                    if (s >= n) s = period - s;
                }
            }
            mp[i][o] = s;
        }
    }
    return map;
}

/* Whether non-constant mode m can fill axis i: it needs values to copy. */
static otter_status pad_check_axis(const ot_kernel_ctx *ctx, int m, const char *mode, int i, int64_t n, int64_t d) {
    if (m != PAD_CONSTANT && n == 0 && d > 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "cannot %s-pad an empty axis %d", mode, i);
    return OTTER_OK;
}

otter_status ot_kernel_pad(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int r = x->rank;
    int64_t pads[2 * OTTER_MAX_RANK] = {0};
    const char *mode;
    int m;
    OT_TRY(pad_mode(ctx, &mode, &m));
    size_t es = ot_elem_size(x->dtype);
    char cval[16] = {0};
    if (ctx->opset < 11) {
        const int64_t *pv;
        size_t npv;
        OT_TRY(ot_ctx_attr_ints(ctx, ctx->opset < 2 ? "paddings" : "pads", &pv, &npv));
        if (npv != (size_t)(2 * r))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "pads has %zu values, expected %d", npv, 2 * r);
        memcpy(pads, pv, sizeof(int64_t) * npv);
        float value;
        OT_TRY(ot_ctx_attr_float(ctx, "value", &value));
        if (x->dtype != OTTER_DTYPE_STRING) ot_set_f64(cval, x->dtype, 0, value);
    } else {
        OT_TRY(pad_inputs(ctx, 1, 3, r, pads));
        const otter_tensor *cv = ot_ctx_input(ctx, 2);
        if (cv && otter_tensor_numel(cv) > 0 && x->dtype != OTTER_DTYPE_STRING) {
            if (cv->dtype != x->dtype)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "constant_value '%s' dtype %s differs from data's %s",
                                    ot_ctx_input_name(ctx, 2), otter_dtype_name(cv->dtype), otter_dtype_name(x->dtype));
            memcpy(cval, cv->data, es);
        }
    }
    int64_t d[OTTER_MAX_RANK];
    for (int i = 0; i < r; i++) {
        d[i] = x->dims[i] + pads[i] + pads[r + i];
        if (d[i] < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "pads make axis %d negative", i);
        OT_TRY(pad_check_axis(ctx, m, mode, i, x->dims[i], d[i]));
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, r, d);
    if (!y) return ctx->output_status;
    int64_t ny = otter_tensor_numel(y);
    if (ny == 0) return OTTER_OK;
    int64_t *mp[OTTER_MAX_RANK], *map = pad_sources(r, x->dims, d, pads, m, mp);
    if (!map) return OT_NOMEM();
    int64_t st[OTTER_MAX_RANK];
    ot_contiguous_strides(r, x->dims, st);
    int64_t last = r > 0 ? d[r - 1] : 1, rows = ny / last;
    for (int64_t row = 0; row < rows; row++) {
        int64_t q = row, off = 0;
        bool constant = false;
        for (int i = r - 2; i >= 0; i--) {
            int64_t s = mp[i][q % d[i]];
            q /= d[i];
            if (s < 0) constant = true;
            off += s * st[i];
        }
        char *dst = (char *)y->data + (size_t)(row * last) * es;
        for (int64_t o = 0; o < last; o++) {
            int64_t s = r > 0 ? mp[r - 1][o] : 0;
            if (constant || s < 0) {
                if (x->dtype == OTTER_DTYPE_STRING) {
                    otter_bytes *b = (otter_bytes *)(void *)(dst + (size_t)o * es);
                    b->data = ot_strdup("");
                    b->len = 0;
                } else {
                    memcpy(dst + (size_t)o * es, cval, es);
                }
            } else {
                ot_copy_elems(dst + (size_t)o * es, (const char *)x->data + (size_t)(off + s) * es, 1, x->dtype);
            }
        }
    }
    ot_free(map);
    return OTTER_OK;
}

/* com.otter PadGrad(dY, X_shape, pads, axes?; mode), Pad's gradient in every mode: each element of dY
 * is added to the element of X that Pad copied into it, so reflect, edge and wrap fold the border
 * back onto X, and constant borders give nothing. */
otter_status ot_kernel_pad_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy;
    OT_TRY(ot_ctx_float_input(ctx, 0, &dy));
    int r = dy->rank;
    int64_t xd[OTTER_MAX_RANK], nx, pads[2 * OTTER_MAX_RANK] = {0};
    OT_TRY(ot_ctx_input_ints(ctx, 1, xd, OTTER_MAX_RANK, &nx));
    if (nx != r)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X_shape '%s' has %lld values for dY '%s' of rank %d",
                            ot_ctx_input_name(ctx, 1), (long long)nx, ot_ctx_input_name(ctx, 0), r);
    const char *mode;
    int m;
    OT_TRY(pad_mode(ctx, &mode, &m));
    OT_TRY(pad_inputs(ctx, 2, 3, r, pads));
    for (int i = 0; i < r; i++) {
        if (xd[i] < 0 || xd[i] + pads[i] + pads[r + i] != dy->dims[i])
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "dY '%s' has %lld on axis %d, not X's %lld padded by %lld, %lld",
                                ot_ctx_input_name(ctx, 0), (long long)dy->dims[i], i, (long long)xd[i],
                                (long long)pads[i], (long long)pads[r + i]);
        OT_TRY(pad_check_axis(ctx, m, mode, i, xd[i], dy->dims[i]));
    }
    otter_tensor *dx = ot_ctx_output(ctx, 0, dy->dtype, r, xd);
    if (!dx) return ctx->output_status;
    const float *g;
    float *g_tmp = NULL, *out, *out_tmp = NULL;
    OT_TRY(ot_ctx_input_f32(ctx, 0, dy, &g, &g_tmp));
    otter_status s = ot_output_f32(dx, &out, &out_tmp);
    int64_t *mp[OTTER_MAX_RANK], *map = s == OTTER_OK ? pad_sources(r, xd, dy->dims, pads, m, mp) : NULL;
    if (s == OTTER_OK && !map) s = OT_NOMEM();
    if (s == OTTER_OK) {
        memset(out, 0, sizeof(float) * (size_t)otter_tensor_numel(dx));
        int64_t st[OTTER_MAX_RANK], ny = otter_tensor_numel(dy);
        ot_contiguous_strides(r, xd, st);
        for (int64_t e = 0; e < ny; e++) {
            int64_t q = e, off = 0;
            bool copied = true;
            for (int i = r - 1; i >= 0 && copied; i--) {
                int64_t src = mp[i][q % dy->dims[i]];
                q /= dy->dims[i];
                copied = src >= 0;
                off += src * st[i];
            }
            if (copied) out[off] += g[e];
        }
    }
    ot_free(map);
    ot_free(g_tmp);
    ot_output_f32_done(s == OTTER_OK ? dx : NULL, out_tmp);
    return s;
}

/* ---- Tile / Expand ------------------------------------------------------------------------------- */

otter_status ot_kernel_tile(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t reps[OTTER_MAX_RANK], n;
    OT_TRY(ot_ctx_input_ints(ctx, 1, reps, OTTER_MAX_RANK, &n));
    if (n != x->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "repeats '%s' has %lld values for input '%s' of rank %d",
                            ot_ctx_input_name(ctx, 1), (long long)n, ot_ctx_input_name(ctx, 0), x->rank);
    int64_t d[OTTER_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
        if (reps[i] < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "negative repeat on axis %d", i);
        d[i] = x->dims[i] * reps[i];
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, d);
    if (!y) return ctx->output_status;
    /* view the output as [rep0, dim0, rep1, dim1, ...] with source strides [0, st0, 0, st1, ...] */
    int64_t dd[OTTER_MAX_RANK * 2], ss[OTTER_MAX_RANK * 2], st[OTTER_MAX_RANK];
    ot_contiguous_strides(x->rank, x->dims, st);
    int k = 0;
    for (int i = 0; i < x->rank; i++) dd[k] = reps[i], ss[k++] = 0, dd[k] = x->dims[i], ss[k++] = st[i];
    if (k > OTTER_MAX_RANK) {
        /* copy_strided handles at most OTTER_MAX_RANK dims: fall back to a per-element walk */
        int64_t ny = otter_tensor_numel(y);
        size_t es = ot_elem_size(x->dtype);
        for (int64_t i = 0; i < ny; i++) {
            int64_t q = i, off = 0;
            for (int a = x->rank - 1; a >= 0; a--) {
                off += ((q % d[a]) % x->dims[a]) * st[a];
                q /= d[a];
            }
            ot_copy_elems((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)off * es, 1, x->dtype);
        }
        return OTTER_OK;
    }
    ot_copy_strided(ctx, y->data, x->data, x->dtype, k, dd, ss);
    return OTTER_OK;
}

otter_status ot_kernel_expand(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t shape[OTTER_MAX_RANK], n, d[OTTER_MAX_RANK];
    OT_TRY(ot_ctx_input_ints(ctx, 1, shape, OTTER_MAX_RANK, &n));
    int r;
    if (!ot_broadcast_shape2(x->rank, x->dims, (int)n, shape, &r, d)) {
        char b1[128], b2[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' %s does not broadcast with shape %s",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(b1, sizeof b1, x->rank, x->dims),
                            ot_shape_str(b2, sizeof b2, (int)n, shape));
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, r, d);
    if (!y) return ctx->output_status;
    int64_t st[OTTER_MAX_RANK], ss[OTTER_MAX_RANK];
    ot_contiguous_strides(x->rank, x->dims, st);
    for (int i = 0; i < r; i++) {
        int j = i - (r - x->rank);
        ss[i] = j < 0 || x->dims[j] == 1 ? 0 : st[j];
    }
    ot_copy_strided(ctx, y->data, x->data, x->dtype, r, d, ss);
    return OTTER_OK;
}

/* ---- DepthToSpace / SpaceToDepth ------------------------------------------------------------------ */

static otter_status depth_space(ot_kernel_ctx *ctx, bool to_space) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t bs;
    OT_TRY(ot_ctx_attr_int(ctx, "blocksize", &bs));
    if (x->rank != 4 || bs < 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' must be 4-D and blocksize >= 1",
                            ot_ctx_input_name(ctx, 0));
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t d6[6], perm[6], out[4];
    if (to_space) {
        if (C % (bs * bs))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "channels %lld not divisible by blocksize^2", (long long)C);
        const char *mode;
        OT_TRY(ot_ctx_attr_string(ctx, "mode", &mode));
        bool crd = strcmp(mode, "CRD") == 0;
        int64_t c2 = C / (bs * bs);
        if (crd) {
            int64_t a[6] = {N, c2, bs, bs, H, W}, p[6] = {0, 1, 4, 2, 5, 3};
            memcpy(d6, a, sizeof a), memcpy(perm, p, sizeof p);
        } else {
            int64_t a[6] = {N, bs, bs, c2, H, W}, p[6] = {0, 3, 4, 1, 5, 2};
            memcpy(d6, a, sizeof a), memcpy(perm, p, sizeof p);
        }
        out[0] = N, out[1] = c2, out[2] = H * bs, out[3] = W * bs;
    } else {
        if (H % bs || W % bs)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "spatial dims not divisible by blocksize %lld", (long long)bs);
        int64_t a[6] = {N, C, H / bs, bs, W / bs, bs}, p[6] = {0, 3, 5, 1, 2, 4};
        memcpy(d6, a, sizeof a), memcpy(perm, p, sizeof p);
        out[0] = N, out[1] = C * bs * bs, out[2] = H / bs, out[3] = W / bs;
    }
    int64_t st[6], od[6], ost[6];
    ot_contiguous_strides(6, d6, st);
    for (int i = 0; i < 6; i++) od[i] = d6[perm[i]], ost[i] = st[perm[i]];
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, 4, out);
    if (!y) return ctx->output_status;
    ot_copy_strided(ctx, y->data, x->data, x->dtype, 6, od, ost);
    return OTTER_OK;
}

otter_status ot_kernel_depthtospace(ot_kernel_ctx *ctx) { return depth_space(ctx, true); }
otter_status ot_kernel_spacetodepth(ot_kernel_ctx *ctx) { return depth_space(ctx, false); }

/* ---- ReverseSequence / Compress ------------------------------------------------------------------- */

otter_status ot_kernel_reversesequence(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *lens;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    OT_TRY(ot_ctx_need_input(ctx, 1, &lens));
    int64_t ba, ta;
    OT_TRY(ot_ctx_attr_int(ctx, "batch_axis", &ba));
    OT_TRY(ot_ctx_attr_int(ctx, "time_axis", &ta));
    if (x->rank < 2 || !ot_norm_axis(&ba, x->rank) || !ot_norm_axis(&ta, x->rank) || ba == ta)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "bad batch_axis/time_axis for input '%s' of rank %d",
                            ot_ctx_input_name(ctx, 0), x->rank);
    if (!ot_is_index_type(lens->dtype) || otter_tensor_numel(lens) != x->dims[ba])
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "sequence_lens '%s' must hold %lld int32/int64 values",
                            ot_ctx_input_name(ctx, 1), (long long)x->dims[ba]);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(x), st[OTTER_MAX_RANK];
    ot_contiguous_strides(x->rank, x->dims, st);
    size_t es = ot_elem_size(x->dtype);
    for (int64_t i = 0; i < n; i++) {
        int64_t b = (i / st[ba]) % x->dims[ba], t = (i / st[ta]) % x->dims[ta], L = ot_index_at(lens, b), src = i;
        if (L > x->dims[ta]) L = x->dims[ta];
        if (t < L) src = i + (L - 1 - 2 * t) * st[ta];
        ot_copy_elems((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)src * es, 1, x->dtype);
    }
    return OTTER_OK;
}

otter_status ot_kernel_compress(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *cond;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    OT_TRY(ot_ctx_need_input(ctx, 1, &cond));
    if (cond->rank != 1 || cond->dtype != OTTER_DTYPE_BOOL)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "condition '%s' must be a 1-D bool tensor",
                            ot_ctx_input_name(ctx, 1));
    const otter_attr *aa = otter_node_attr(ctx->node, "axis");
    int64_t ax = aa ? aa->i : 0, outer = 1, inner = 1, D;
    if (aa && !ot_norm_axis(&ax, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range", (long long)aa->i);
    if (aa) {
        D = x->dims[ax];
        for (int i = 0; i < ax; i++) outer *= x->dims[i];
        for (int i = (int)ax + 1; i < x->rank; i++) inner *= x->dims[i];
    } else {
        D = otter_tensor_numel(x);
    }
    const uint8_t *c = cond->data;
    int64_t nc = cond->dims[0] < D ? cond->dims[0] : D, keep = 0;
    for (int64_t i = 0; i < nc; i++) keep += c[i] != 0;
    int64_t d[OTTER_MAX_RANK];
    int r = aa ? x->rank : 1;
    if (aa) {
        memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
        d[ax] = keep;
    } else {
        d[0] = keep;
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, r, d);
    if (!y) return ctx->output_status;
    size_t es = ot_elem_size(x->dtype);
    int64_t k = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < nc; i++)
            if (c[i]) {
                ot_copy_elems((char *)y->data + (size_t)(k * inner) * es,
                              (const char *)x->data + (size_t)((o * D + i) * inner) * es, inner, x->dtype);
                k++;
            }
    return OTTER_OK;
}
