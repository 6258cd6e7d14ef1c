/* Shape and data-movement kernels: Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Concat, Split,
 * Slice, Gather*, Scatter*, Pad, Tile, Expand, DepthToSpace, SpaceToDepth, Resize, Upsample,
 * ReverseSequence, Compress.
 *
 * Most of them are one strided copy: every output element comes from input offset
 * sum(index[d] * src_stride[d]). copy_strided() merges dimensions that stay contiguous, copies
 * contiguous runs with memcpy, transposes the last two dimensions in cache tiles when that is
 * what the strides describe, and splits the rows over the session's threads. Any dtype works
 * (elements are moved as bytes); STRING elements are duplicated. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/broadcast.h"

static const char *in_name(const ot_kernel_ctx *ctx, size_t i) { return ot_ctx_input_name(ctx, i); }

static size_t esize(otter_dtype t) { return t == OTTER_DTYPE_STRING ? sizeof(otter_bytes) : otter_dtype_size(t); }

/* Copy n elements; strings are duplicated. */
static void copy_elems(void *dst, const void *src, int64_t n, otter_dtype dt) {
    if (n <= 0) return;
    if (dt != OTTER_DTYPE_STRING) {
        memcpy(dst, src, (size_t)n * otter_dtype_size(dt));
        return;
    }
    otter_bytes *d = dst;
    const otter_bytes *s = src;
    for (int64_t i = 0; i < n; i++) {
        ot_free(d[i].data);
        d[i].data = ot_malloc(s[i].len + 1);
        if (d[i].data) {
            if (s[i].len) memcpy(d[i].data, s[i].data, s[i].len);
            d[i].data[s[i].len] = 0;
            d[i].len = s[i].len;
        } else {
            d[i].len = 0;
        }
    }
}

/* ---- strided copy ---------------------------------------------------------------------------- */

typedef struct sc_args {
    char *dst;
    const char *src;
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    int64_t st[OTTER_MAX_RANK]; /* source strides in elements (may be negative or 0) */
    size_t es;
    otter_dtype dt;
    int64_t row_len; /* dims[rank-1] */
} sc_args;

static void sc_rows(void *arg, int64_t r0, int64_t r1) {
    sc_args *a = arg;
    int64_t n = a->row_len, s = a->st[a->rank - 1];
    for (int64_t r = r0; r < r1; r++) {
        int64_t off = 0, q = r;
        for (int d = a->rank - 2; d >= 0; d--) {
            off += (q % a->dims[d]) * a->st[d];
            q /= a->dims[d];
        }
        char *dst = a->dst + (size_t)(r * n) * a->es;
        const char *src = a->src + off * (int64_t)a->es;
        if (a->dt == OTTER_DTYPE_STRING) {
            for (int64_t i = 0; i < n; i++) copy_elems(dst + (size_t)i * a->es, src + i * s * (int64_t)a->es, 1, a->dt);
        } else if (s == 1) {
            memcpy(dst, src, (size_t)n * a->es);
        } else if (a->es == 4) {
            uint32_t *d = (uint32_t *)(void *)dst;
            const uint32_t *sp = (const uint32_t *)(const void *)src;
            for (int64_t i = 0; i < n; i++) d[i] = sp[i * s];
        } else if (a->es == 8) {
            uint64_t *d = (uint64_t *)(void *)dst;
            const uint64_t *sp = (const uint64_t *)(const void *)src;
            for (int64_t i = 0; i < n; i++) d[i] = sp[i * s];
        } else if (a->es == 1) {
            for (int64_t i = 0; i < n; i++) dst[i] = src[i * s];
        } else if (a->es == 2) {
            uint16_t *d = (uint16_t *)(void *)dst;
            const uint16_t *sp = (const uint16_t *)(const void *)src;
            for (int64_t i = 0; i < n; i++) d[i] = sp[i * s];
        } else {
            for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * a->es, src + i * s * (int64_t)a->es, a->es);
        }
    }
}

/* Tiled transpose of the last two dims: output [.., R, C] where the source has stride 1 along R
 * (st[rank-2] == 1) and st[rank-1] along C. Items are the outer matrices. */
static void sc_tiles(void *arg, int64_t m0, int64_t m1) {
    sc_args *a = arg;
    const int64_t R = a->dims[a->rank - 2], C = a->dims[a->rank - 1], sc = a->st[a->rank - 1];
    const int T = 32;
    for (int64_t m = m0; m < m1; m++) {
        int64_t off = 0, q = m;
        for (int d = a->rank - 3; d >= 0; d--) {
            off += (q % a->dims[d]) * a->st[d];
            q /= a->dims[d];
        }
        char *dst = a->dst + (size_t)(m * R * C) * a->es;
        const char *src = a->src + off * (int64_t)a->es;
        for (int64_t r0 = 0; r0 < R; r0 += T)
            for (int64_t c0 = 0; c0 < C; c0 += T) {
                int64_t r1 = r0 + T < R ? r0 + T : R, c1 = c0 + T < C ? c0 + T : C;
                if (a->es == 4) {
                    uint32_t *d = (uint32_t *)(void *)dst;
                    const uint32_t *sp = (const uint32_t *)(const void *)src;
                    for (int64_t r = r0; r < r1; r++)
                        for (int64_t c = c0; c < c1; c++) d[r * C + c] = sp[r + c * sc];
                } else {
                    for (int64_t r = r0; r < r1; r++)
                        for (int64_t c = c0; c < c1; c++)
                            memcpy(dst + (size_t)(r * C + c) * a->es, src + (r + c * sc) * (int64_t)a->es, a->es);
                }
            }
    }
}

/* dst (contiguous, shape dims) [i] = src[sum i_d * st_d]. ctx may be NULL (one thread). */
static void copy_strided(const ot_kernel_ctx *ctx, void *dst, const void *src, otter_dtype dt, int rank,
                         const int64_t *dims, const int64_t *st) {
    sc_args a = {.dst = dst, .src = src, .es = esize(dt), .dt = dt, .rank = 0};
    int64_t numel = 1;
    for (int d = 0; d < rank; d++) numel *= dims[d];
    if (numel == 0) return;
    /* drop size-1 dims, merge dims contiguous in the source */
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1) continue;
        if (a.rank > 0 && a.st[a.rank - 1] == st[d] * dims[d]) {
            a.dims[a.rank - 1] *= dims[d];
            a.st[a.rank - 1] = st[d];
            continue;
        }
        a.dims[a.rank] = dims[d], a.st[a.rank] = st[d];
        a.rank++;
    }
    if (a.rank == 0) a.dims[0] = 1, a.st[0] = 1, a.rank = 1;
    a.row_len = a.dims[a.rank - 1];
    if (a.rank >= 2 && a.st[a.rank - 2] == 1 && a.st[a.rank - 1] != 1 && dt != OTTER_DTYPE_STRING &&
        a.dims[a.rank - 2] >= 8) {
        int64_t mats = numel / (a.dims[a.rank - 2] * a.dims[a.rank - 1]);
        if (ctx && mats > 1)
            ot_parallel_for(ctx, mats, 1, sc_tiles, &a);
        else if (ctx && mats == 1 && a.dims[a.rank - 2] * a.dims[a.rank - 1] > 65536) {
            /* one big matrix: split its output rows (as rows of a rank-2 strided copy) */
            ot_parallel_for(ctx, numel / a.row_len, 64, sc_rows, &a);
        } else
            sc_tiles(&a, 0, mats);
        return;
    }
    int64_t rows = numel / a.row_len;
    if (ctx && dt != OTTER_DTYPE_STRING)
        ot_parallel_for(ctx, rows, 1 + 32768 / (a.row_len + 1), sc_rows, &a);
    else
        sc_rows(&a, 0, rows);
}

static void contiguous_strides(int rank, const int64_t *dims, int64_t *st) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) st[d] = s, s *= dims[d];
}

/* Output = input with new dims (same data). */
static otter_status reshape_out(ot_kernel_ctx *ctx, const otter_tensor *x, int rank, const int64_t *dims) {
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, rank, dims);
    if (!y) return ctx->output_status;
    if (y->data != x->data) copy_elems(y->data, x->data, otter_tensor_numel(x), x->dtype);
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
    bool allowzero = otter_node_attr_int(ctx->node, "allowzero", 0) != 0;
    int64_t known = 1, infer = -1, total = otter_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        if (shape[i] == 0 && !allowzero) {
            if (i >= x->rank)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "shape[%lld] = 0 copies a dim input '%s' doesn't have",
                                    (long long)i, in_name(ctx, 0));
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
                            in_name(ctx, 0), ot_shape_str(b, sizeof b, x->rank, x->dims), (long long)total,
                            (long long)known);
    }
    return reshape_out(ctx, x, (int)n, shape);
}

otter_status ot_kernel_flatten(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t axis = otter_node_attr_int(ctx->node, "axis", 1);
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis > x->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for rank %d",
                            (long long)otter_node_attr_int(ctx->node, "axis", 1), x->rank);
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
                                    (long long)axes[i], in_name(ctx, 0), x->rank);
            if (x->dims[a] != 1)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "cannot squeeze axis %lld of input '%s': size %lld",
                                    (long long)axes[i], in_name(ctx, 0), (long long)x->dims[a]);
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
    contiguous_strides(rank, dims, st);
    for (int i = 0; i < rank; i++) od[i] = dims[perm[i]], ost[i] = st[perm[i]];
    otter_tensor *y = ot_ctx_output(ctx, out_idx, x->dtype, rank, od);
    if (!y) return ctx->output_status;
    copy_strided(ctx, y->data, data, x->dtype, rank, od, ost);
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
                                in_name(ctx, 0), x->rank);
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

otter_status ot_kernel_concat(ot_kernel_ctx *ctx) {
    const otter_tensor *x0 = NULL;
    for (size_t i = 0; i < ctx->n_inputs && !x0; i++) x0 = ot_ctx_input(ctx, i);
    if (!x0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "no inputs");
    int64_t axis = otter_node_attr_int(ctx->node, "axis", ctx->opset < 4 ? 1 : INT64_MIN);
    if (axis == INT64_MIN) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'axis' is missing");
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
                                i, in_name(ctx, i), otter_dtype_name(t->dtype),
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
    size_t es = esize(x0->dtype);
    int64_t off = 0;
    for (size_t i = 0; i < ctx->n_inputs; i++) {
        const otter_tensor *t = ot_ctx_input(ctx, i);
        if (!t) continue;
        int64_t blk = t->dims[ax] * inner;
        /* a strided copy of t into the output's sub-block [.., off:off+blk] */
        if (outer == 1 || blk == d[ax] * inner) {
            copy_elems((char *)y->data + (size_t)off * es, t->data, outer * blk, t->dtype);
        } else {
            for (int64_t o = 0; o < outer; o++)
                copy_elems((char *)y->data + (size_t)(o * d[ax] * inner + off) * es,
                           (const char *)t->data + (size_t)(o * blk) * es, blk, t->dtype);
        }
        off += blk;
    }
    return OTTER_OK;
}

otter_status ot_kernel_split(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t axis = otter_node_attr_int(ctx->node, "axis", 0), ax = axis;
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
    size_t es = esize(x->dtype);
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
            copy_elems((char *)y->data + (size_t)(o * blk) * es,
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
    contiguous_strides(r, x->dims, st);
    bool seen[OTTER_MAX_RANK] = {false};
    for (int i = 0; i < r; i++) d[i] = x->dims[i], begin[i] = 0, step[i] = 1;
    for (int64_t i = 0; i < ns; i++) {
        int64_t ax = na >= 0 ? axes[i] : i;
        if (!ot_norm_axis(&ax, r) || seen[ax])
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range or repeated for input '%s' of rank %d",
                                (long long)(na >= 0 ? axes[i] : i), in_name(ctx, 0), r);
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
    copy_strided(ctx, y->data, (const char *)x->data + (size_t)off * esize(x->dtype), x->dtype, r, d, ost);
    return OTTER_OK;
}

/* ---- Gather family ----------------------------------------------------------------------------- */

static bool is_index_type(otter_dtype t) { return t == OTTER_DTYPE_INT64 || t == OTTER_DTYPE_INT32; }
static int64_t idx_at(const otter_tensor *t, int64_t i) {
    return t->dtype == OTTER_DTYPE_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

otter_status ot_kernel_gather(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *ind;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    OT_TRY(ot_ctx_need_input(ctx, 1, &ind));
    if (!is_index_type(ind->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' must be int32 or int64", in_name(ctx, 1));
    int64_t axis = otter_node_attr_int(ctx->node, "axis", 0), ax = axis;
    if (!ot_norm_axis(&ax, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for input '%s' of rank %d", (long long)axis,
                            in_name(ctx, 0), x->rank);
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
    size_t es = esize(x->dtype);
    for (int64_t j = 0; j < ni; j++) {
        int64_t v = idx_at(ind, j);
        if (v < -D || v >= D)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' value %lld out of range [-%lld, %lld)",
                                in_name(ctx, 1), (long long)v, (long long)D, (long long)D);
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < ni; j++) {
            int64_t v = idx_at(ind, j);
            if (v < 0) v += D;
            copy_elems((char *)y->data + (size_t)((o * ni + j) * inner) * es,
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
    if (!is_index_type(ind->dtype) || ind->rank != x->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' must be int32/int64 with the rank of data",
                            in_name(ctx, 1));
    int64_t axis = otter_node_attr_int(ctx->node, "axis", 0), ax = axis;
    if (!ot_norm_axis(&ax, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range", (long long)axis);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, ind->rank, ind->dims);
    if (!y) return ctx->output_status;
    int64_t st[OTTER_MAX_RANK], n = otter_tensor_numel(ind), D = x->dims[ax];
    contiguous_strides(x->rank, x->dims, st);
    size_t es = esize(x->dtype);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = idx_at(ind, i);
        if (v < -D || v >= D)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' value %lld out of range for axis size %lld",
                                in_name(ctx, 1), (long long)v, (long long)D);
        if (v < 0) v += D;
        int64_t off = elem_offset(ind->dims, ind->rank, i, st, ax, v);
        copy_elems((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)off * es, 1, x->dtype);
    }
    return OTTER_OK;
}

otter_status ot_kernel_gathernd(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *ind;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    OT_TRY(ot_ctx_need_input(ctx, 1, &ind));
    int64_t b = otter_node_attr_int(ctx->node, "batch_dims", 0);
    if (!is_index_type(ind->dtype) || ind->rank < 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' must be int32/int64 of rank >= 1", in_name(ctx, 1));
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
    contiguous_strides(x->rank, x->dims, st);
    for (int i = 0; i < b; i++) batch *= ind->dims[i];
    for (int i = (int)b; i < ind->rank - 1; i++) per_batch *= ind->dims[i];
    for (int i = (int)(b + q); i < x->rank; i++) inner *= x->dims[i];
    int64_t bstride = b > 0 ? st[b - 1] : 0;
    size_t es = esize(x->dtype);
    for (int64_t bi = 0; bi < batch; bi++)
        for (int64_t j = 0; j < per_batch; j++) {
            int64_t row = bi * per_batch + j, off = bi * bstride;
            for (int64_t k = 0; k < q; k++) {
                int64_t v = idx_at(ind, row * q + k), D = x->dims[b + k];
                if (v < -D || v >= D)
                    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' value %lld out of range for size %lld",
                                        in_name(ctx, 1), (long long)v, (long long)D);
                off += (v < 0 ? v + D : v) * st[b + k];
            }
            copy_elems((char *)y->data + (size_t)(row * inner) * es, (const char *)x->data + (size_t)off * es, inner,
                       x->dtype);
        }
    return OTTER_OK;
}

/* ---- Scatter family ------------------------------------------------------------------------------ */

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

static otter_status reduction_attr(const ot_kernel_ctx *ctx, int *red) {
    const char *s = otter_node_attr_string(ctx->node, "reduction", "none");
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
        size_t es = esize(dt);
        copy_elems((char *)dst + (size_t)i * es, (const char *)src + (size_t)j * es, 1, dt);
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
    if (!is_index_type(ind->dtype) || ind->rank != x->rank || upd->rank != ind->rank || upd->dtype != x->dtype)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "indices '%s' (int32/int64) and updates '%s' must have the rank of data, updates its dtype",
                            in_name(ctx, 1), in_name(ctx, 2));
    for (int i = 0; i < ind->rank; i++)
        if (ind->dims[i] != upd->dims[i])
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' and updates '%s' differ in shape",
                                in_name(ctx, 1), in_name(ctx, 2));
    int red = RED_NONE;
    OT_TRY(reduction_attr(ctx, &red));
    int64_t axis = otter_node_attr_int(ctx->node, "axis", 0), ax = axis;
    if (!ot_norm_axis(&ax, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range", (long long)axis);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    if (y->data != x->data) copy_elems(y->data, x->data, otter_tensor_numel(x), x->dtype);
    int64_t st[OTTER_MAX_RANK], n = otter_tensor_numel(ind), D = x->dims[ax];
    contiguous_strides(x->rank, x->dims, st);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = idx_at(ind, i);
        if (v < -D || v >= D)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' value %lld out of range for axis size %lld",
                                in_name(ctx, 1), (long long)v, (long long)D);
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
    if (!is_index_type(ind->dtype) || ind->rank < 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' must be int32/int64 of rank >= 1", in_name(ctx, 1));
    int64_t q = ind->dims[ind->rank - 1];
    if (q > x->rank || upd->dtype != x->dtype)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "indices '%s' depth %lld exceeds data rank %d or updates dtype differs", in_name(ctx, 1),
                            (long long)q, x->rank);
    int red = RED_NONE;
    OT_TRY(reduction_attr(ctx, &red));
    int64_t st[OTTER_MAX_RANK], inner = 1, rows = 1;
    contiguous_strides(x->rank, x->dims, st);
    for (int i = (int)q; i < x->rank; i++) inner *= x->dims[i];
    for (int i = 0; i < ind->rank - 1; i++) rows *= ind->dims[i];
    if (otter_tensor_numel(upd) != rows * inner)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "updates '%s' has %lld elements, expected %lld", in_name(ctx, 2),
                            (long long)otter_tensor_numel(upd), (long long)(rows * inner));
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    if (y->data != x->data) copy_elems(y->data, x->data, otter_tensor_numel(x), x->dtype);
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0;
        for (int64_t k = 0; k < q; k++) {
            int64_t v = idx_at(ind, r * q + k), D = x->dims[k];
            if (v < -D || v >= D)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' value %lld out of range for size %lld",
                                    in_name(ctx, 1), (long long)v, (long long)D);
            off += (v < 0 ? v + D : v) * st[k];
        }
        for (int64_t e = 0; e < inner; e++) scatter_one(y->data, off + e, upd->data, r * inner + e, x->dtype, red);
    }
    return OTTER_OK;
}

/* ---- Pad ---------------------------------------------------------------------------------------- */

otter_status ot_kernel_pad(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int r = x->rank;
    int64_t pads[2 * OTTER_MAX_RANK] = {0}, np = 0;
    const char *mode = otter_node_attr_string(ctx->node, "mode", "constant");
    int m = strcmp(mode, "constant") == 0  ? 0
            : strcmp(mode, "reflect") == 0 ? 1
            : strcmp(mode, "edge") == 0    ? 2
            : strcmp(mode, "wrap") == 0    ? 3
                                           : -1;
    if (m < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown mode '%s'", mode);
    size_t es = esize(x->dtype);
    char cval[16] = {0};
    if (ctx->opset < 11) {
        const otter_attr *a = otter_node_attr(ctx->node, ctx->opset < 2 ? "paddings" : "pads");
        if (!a) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'pads' is missing");
        if (a->n_ints != (size_t)(2 * r))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "pads has %zu values, expected %d", a->n_ints, 2 * r);
        memcpy(pads, a->ints, sizeof(int64_t) * a->n_ints);
        np = 2 * r;
        if (x->dtype != OTTER_DTYPE_STRING) ot_set_f64(cval, x->dtype, 0, otter_node_attr_float(ctx->node, "value", 0));
    } else {
        int64_t raw[2 * OTTER_MAX_RANK], axes[OTTER_MAX_RANK], na = -1;
        OT_TRY(ot_ctx_input_ints(ctx, 1, raw, 2 * OTTER_MAX_RANK, &np));
        if (ot_ctx_input(ctx, 3)) OT_TRY(ot_ctx_input_ints(ctx, 3, axes, OTTER_MAX_RANK, &na));
        if (na < 0) {
            if (np != 2 * r)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "pads '%s' has %lld values, expected %d", in_name(ctx, 1),
                                    (long long)np, 2 * r);
            memcpy(pads, raw, sizeof(int64_t) * (size_t)np);
        } else {
            if (np != 2 * na) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "pads and axes lengths disagree");
            for (int64_t i = 0; i < na; i++) {
                int64_t ax = axes[i];
                if (!ot_norm_axis(&ax, r)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis out of range");
                pads[ax] = raw[i], pads[r + ax] = raw[na + i];
            }
        }
        const otter_tensor *cv = ot_ctx_input(ctx, 2);
        if (cv && otter_tensor_numel(cv) > 0 && x->dtype != OTTER_DTYPE_STRING) {
            if (cv->dtype != x->dtype)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "constant_value '%s' dtype %s differs from data's %s",
                                    in_name(ctx, 2), otter_dtype_name(cv->dtype), otter_dtype_name(x->dtype));
            memcpy(cval, cv->data, es);
        }
    }
    int64_t d[OTTER_MAX_RANK];
    for (int i = 0; i < r; i++) {
        d[i] = x->dims[i] + pads[i] + pads[r + i];
        if (d[i] < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "pads make axis %d negative", i);
        if (m != 0 && x->dims[i] == 0 && d[i] > 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "cannot %s-pad an empty axis %d", mode, i);
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, r, d);
    if (!y) return ctx->output_status;
    int64_t ny = otter_tensor_numel(y);
    if (ny == 0) return OTTER_OK;
    /* per-axis source index maps (-1: constant) */
    int64_t total = 0;
    for (int i = 0; i < r; i++) total += d[i];
    int64_t *map = ot_malloc((size_t)(total > 0 ? total : 1) * sizeof(int64_t)), *mp[OTTER_MAX_RANK];
    if (!map) return OT_NOMEM();
    int64_t acc = 0;
    for (int i = 0; i < r; i++) {
        mp[i] = map + acc;
        acc += d[i];
        int64_t n = x->dims[i];
        for (int64_t o = 0; o < d[i]; o++) {
            int64_t s = o - pads[i];
            if (s < 0 || s >= n) {
                if (m == 0) {
                    s = -1;
                } else if (m == 2) {
                    s = s < 0 ? 0 : n - 1;
                } else if (m == 3) {
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
    int64_t st[OTTER_MAX_RANK];
    contiguous_strides(r, x->dims, st);
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
                copy_elems(dst + (size_t)o * es, (const char *)x->data + (size_t)(off + s) * es, 1, x->dtype);
            }
        }
    }
    ot_free(map);
    return OTTER_OK;
}

/* ---- Tile / Expand ------------------------------------------------------------------------------- */

otter_status ot_kernel_tile(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t reps[OTTER_MAX_RANK], n;
    OT_TRY(ot_ctx_input_ints(ctx, 1, reps, OTTER_MAX_RANK, &n));
    if (n != x->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "repeats '%s' has %lld values for input '%s' of rank %d",
                            in_name(ctx, 1), (long long)n, in_name(ctx, 0), x->rank);
    int64_t d[OTTER_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
        if (reps[i] < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "negative repeat on axis %d", i);
        d[i] = x->dims[i] * reps[i];
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, d);
    if (!y) return ctx->output_status;
    /* view the output as [rep0, dim0, rep1, dim1, ...] with source strides [0, st0, 0, st1, ...] */
    int64_t dd[OTTER_MAX_RANK * 2], ss[OTTER_MAX_RANK * 2], st[OTTER_MAX_RANK];
    contiguous_strides(x->rank, x->dims, st);
    int k = 0;
    for (int i = 0; i < x->rank; i++) dd[k] = reps[i], ss[k++] = 0, dd[k] = x->dims[i], ss[k++] = st[i];
    if (k > OTTER_MAX_RANK) {
        /* copy_strided handles at most OTTER_MAX_RANK dims: fall back to a per-element walk */
        int64_t ny = otter_tensor_numel(y);
        size_t es = esize(x->dtype);
        for (int64_t i = 0; i < ny; i++) {
            int64_t q = i, off = 0;
            for (int a = x->rank - 1; a >= 0; a--) {
                off += ((q % d[a]) % x->dims[a]) * st[a];
                q /= d[a];
            }
            copy_elems((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)off * es, 1, x->dtype);
        }
        return OTTER_OK;
    }
    copy_strided(ctx, y->data, x->data, x->dtype, k, dd, ss);
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
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' %s does not broadcast with shape %s", in_name(ctx, 0),
                            ot_shape_str(b1, sizeof b1, x->rank, x->dims), ot_shape_str(b2, sizeof b2, (int)n, shape));
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, r, d);
    if (!y) return ctx->output_status;
    int64_t st[OTTER_MAX_RANK], ss[OTTER_MAX_RANK];
    contiguous_strides(x->rank, x->dims, st);
    for (int i = 0; i < r; i++) {
        int j = i - (r - x->rank);
        ss[i] = j < 0 || x->dims[j] == 1 ? 0 : st[j];
    }
    copy_strided(ctx, y->data, x->data, x->dtype, r, d, ss);
    return OTTER_OK;
}

/* ---- DepthToSpace / SpaceToDepth ------------------------------------------------------------------ */

static otter_status depth_space(ot_kernel_ctx *ctx, bool to_space) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t bs = otter_node_attr_int(ctx->node, "blocksize", 0);
    if (x->rank != 4 || bs < 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' must be 4-D and blocksize >= 1", in_name(ctx, 0));
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t d6[6], perm[6], out[4];
    if (to_space) {
        if (C % (bs * bs))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "channels %lld not divisible by blocksize^2", (long long)C);
        bool crd = strcmp(otter_node_attr_string(ctx->node, "mode", "DCR"), "CRD") == 0;
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
    contiguous_strides(6, d6, st);
    for (int i = 0; i < 6; i++) od[i] = d6[perm[i]], ost[i] = st[perm[i]];
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, 4, out);
    if (!y) return ctx->output_status;
    copy_strided(ctx, y->data, x->data, x->dtype, 6, od, ost);
    return OTTER_OK;
}

otter_status ot_kernel_depthtospace(ot_kernel_ctx *ctx) { return depth_space(ctx, true); }
otter_status ot_kernel_spacetodepth(ot_kernel_ctx *ctx) { return depth_space(ctx, false); }

/* ---- Resize / Upsample ----------------------------------------------------------------------------- */

enum { RM_NEAREST, RM_LINEAR, RM_CUBIC };
enum {
    CT_HALF_PIXEL,
    CT_PYTORCH_HALF_PIXEL,
    CT_ALIGN_CORNERS,
    CT_ASYMMETRIC,
    CT_TF_HALF_PIXEL_NN,
    CT_TF_CROP,
    CT_HALF_SYM
};
enum { NM_ROUND_FLOOR, NM_ROUND_CEIL, NM_FLOOR, NM_CEIL };

typedef struct tap_set {
    int n;        /* taps per output coordinate */
    int64_t *idx; /* [out][n] source index (-1: extrapolation value) */
    double *w;    /* [out][n] */
} tap_set;

static double cubic_w(double x, double A) {
    x = fabs(x);
    if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0;
}

/* out_len: the resized length as the coordinate formulas see it (in * scale, unrounded, when
 * scales are given; onnx's reference does the same). */
static otter_status make_taps(int mode, int ct, int nm, double A, bool exclude, int64_t in, int64_t out, double out_len,
                              double scale, double roi_s, double roi_e, tap_set *t) {
    t->n = mode == RM_NEAREST ? 1 : mode == RM_LINEAR ? 2 : 4;
    t->idx = ot_malloc((size_t)(out * t->n + 1) * sizeof(int64_t));
    t->w = ot_malloc((size_t)(out * t->n + 1) * sizeof(double));
    if (!t->idx || !t->w) return OT_NOMEM();
    for (int64_t o = 0; o < out; o++) {
        double x;
        bool outside = false;
        switch (ct) {
        case CT_HALF_PIXEL:
            x = ((double)o + 0.5) / scale - 0.5;
            break;
        case CT_HALF_SYM: {
            double adj = (double)out / (scale * (double)in), center = (double)in / 2;
            double off = center * (1 - adj);
            x = off + ((double)o + 0.5) / scale - 0.5;
            break;
        }
        case CT_PYTORCH_HALF_PIXEL:
            x = out_len > 1 ? ((double)o + 0.5) / scale - 0.5 : 0;
            break;
        case CT_ALIGN_CORNERS:
            x = out_len == 1 ? 0 : (double)o * (double)(in - 1) / (out_len - 1);
            break;
        case CT_ASYMMETRIC:
            x = (double)o / scale;
            break;
        case CT_TF_HALF_PIXEL_NN:
            x = ((double)o + 0.5) / scale;
            break;
        default: /* tf_crop_and_resize */
            x = out_len > 1 ? roi_s * (double)(in - 1) + (double)o * (roi_e - roi_s) * (double)(in - 1) / (out_len - 1)
                            : 0.5 * (roi_s + roi_e) * (double)(in - 1);
            outside = x < 0 || x > (double)(in - 1);
            break;
        }
        int64_t *ix = t->idx + o * t->n;
        double *w = t->w + o * t->n;
        if (outside) {
            for (int k = 0; k < t->n; k++) ix[k] = -1, w[k] = k == 0 ? 1 : 0;
            continue;
        }
        if (mode == RM_NEAREST) {
            double f = floor(x), r;
            switch (nm) {
            case NM_ROUND_FLOOR:
                r = x - f == 0.5 ? f : round(x);
                break;
            case NM_ROUND_CEIL:
                r = x - f == 0.5 ? f + 1 : round(x);
                break;
            case NM_FLOOR:
                r = f;
                break;
            default:
                r = ceil(x);
                break;
            }
            int64_t i = (int64_t)r;
            ix[0] = i < 0 ? 0 : i >= in ? in - 1 : i;
            w[0] = 1;
        } else if (mode == RM_LINEAR) {
            double xc = x < 0 ? 0 : x > (double)(in - 1) ? (double)(in - 1) : x;
            int64_t i0 = (int64_t)floor(xc), i1 = i0 + 1 < in ? i0 + 1 : in - 1;
            double f = xc - (double)i0;
            ix[0] = i0, ix[1] = i1, w[0] = 1 - f, w[1] = f;
        } else {
            int64_t i0 = (int64_t)floor(x);
            double f = x - (double)i0, sum = 0;
            for (int k = 0; k < 4; k++) {
                int64_t i = i0 - 1 + k;
                double wk = cubic_w(f - (double)(k - 1), A);
                if (exclude && (i < 0 || i >= in)) wk = 0;
                ix[k] = i < 0 ? 0 : i >= in ? in - 1 : i;
                w[k] = wk;
                sum += wk;
            }
            if (exclude && sum != 0)
                for (int k = 0; k < 4; k++) w[k] /= sum;
        }
    }
    return OTTER_OK;
}

typedef struct resize_args {
    int rank;
    const int64_t *in_dims, *out_dims;
    tap_set *taps;
    const double *X;
    double *Y;
    double extrapolation;
} resize_args;

static void resize_rows(void *arg, int64_t e0, int64_t e1) {
    resize_args *a = arg;
    int r = a->rank;
    int64_t st[OTTER_MAX_RANK];
    contiguous_strides(r, a->in_dims, st);
    for (int64_t e = e0; e < e1; e++) {
        int64_t oi[OTTER_MAX_RANK], q = e;
        for (int d = r - 1; d >= 0; d--) oi[d] = q % a->out_dims[d], q /= a->out_dims[d];
        /* sum over the tap product */
        int k[OTTER_MAX_RANK] = {0};
        double acc = 0;
        bool extrap = false;
        for (;;) {
            double w = 1;
            int64_t off = 0;
            for (int d = 0; d < r; d++) {
                const tap_set *t = &a->taps[d];
                int64_t i = t->idx[oi[d] * t->n + k[d]];
                if (i < 0) extrap = true;
                w *= t->w[oi[d] * t->n + k[d]];
                off += (i < 0 ? 0 : i) * st[d];
            }
            if (extrap) break;
            if (w != 0) acc += w * a->X[off];
            int d = r - 1;
            while (d >= 0 && ++k[d] == a->taps[d].n) k[d--] = 0;
            if (d < 0) break;
        }
        a->Y[e] = extrap ? a->extrapolation : acc;
    }
}

static otter_status resize_common(ot_kernel_ctx *ctx, bool upsample) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int r = x->rank;
    const char *ms = otter_node_attr_string(ctx->node, "mode", "nearest");
    int mode = strcmp(ms, "nearest") == 0                                 ? RM_NEAREST
               : strcmp(ms, "linear") == 0 || strcmp(ms, "bilinear") == 0 ? RM_LINEAR
               : strcmp(ms, "cubic") == 0                                 ? RM_CUBIC
                                                                          : -1;
    if (mode < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown mode '%s'", ms);
    bool v11 = !upsample && ctx->opset >= 11;
    int ct = CT_ASYMMETRIC, nm = NM_FLOOR;
    if (v11) {
        const char *cs = otter_node_attr_string(ctx->node, "coordinate_transformation_mode", "half_pixel");
        ct = strcmp(cs, "half_pixel") == 0             ? CT_HALF_PIXEL
             : strcmp(cs, "pytorch_half_pixel") == 0   ? CT_PYTORCH_HALF_PIXEL
             : strcmp(cs, "align_corners") == 0        ? CT_ALIGN_CORNERS
             : strcmp(cs, "asymmetric") == 0           ? CT_ASYMMETRIC
             : strcmp(cs, "tf_half_pixel_for_nn") == 0 ? CT_TF_HALF_PIXEL_NN
             : strcmp(cs, "tf_crop_and_resize") == 0   ? CT_TF_CROP
             : strcmp(cs, "half_pixel_symmetric") == 0 ? CT_HALF_SYM
                                                       : -1;
        if (ct < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown coordinate_transformation_mode '%s'", cs);
        const char *ns = otter_node_attr_string(ctx->node, "nearest_mode", "round_prefer_floor");
        nm = strcmp(ns, "round_prefer_floor") == 0  ? NM_ROUND_FLOOR
             : strcmp(ns, "round_prefer_ceil") == 0 ? NM_ROUND_CEIL
             : strcmp(ns, "floor") == 0             ? NM_FLOOR
             : strcmp(ns, "ceil") == 0              ? NM_CEIL
                                                    : -1;
        if (nm < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown nearest_mode '%s'", ns);
    }
    double scales[OTTER_MAX_RANK], roi[2 * OTTER_MAX_RANK];
    int64_t out[OTTER_MAX_RANK];
    for (int i = 0; i < r; i++) roi[i] = 0, roi[r + i] = 1;
    const otter_tensor *sc = NULL, *sz = NULL, *ro = NULL;
    if (upsample && ctx->opset < 9) {
        const otter_attr *a = otter_node_attr(ctx->node, "scales");
        if (!a || (int)a->n_floats != r)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'scales' must have %d values", r);
        for (int i = 0; i < r; i++) scales[i] = a->floats[i];
    } else {
        size_t si = v11 ? 2 : 1;
        sc = ot_ctx_input(ctx, si);
        sz = v11 ? ot_ctx_input(ctx, 3) : NULL;
        ro = v11 ? ot_ctx_input(ctx, 1) : NULL;
        if (sc && otter_tensor_numel(sc) == 0) sc = NULL;
        if (ro && otter_tensor_numel(ro) == 0) ro = NULL;
        if (sz && otter_tensor_numel(sz) == 0) sz = NULL;
        if (!sc && !sz) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs scales or sizes");
        if (sc) {
            if (otter_tensor_numel(sc) != r || !otter_dtype_is_float(sc->dtype))
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scales '%s' must hold %d floats", in_name(ctx, si), r);
            for (int i = 0; i < r; i++) scales[i] = ot_get_f64(sc->data, sc->dtype, i);
        }
        if (ro) {
            if (otter_tensor_numel(ro) != 2 * r)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "roi '%s' must hold %d values", in_name(ctx, 1), 2 * r);
            for (int i = 0; i < 2 * r; i++) roi[i] = ot_get_f64(ro->data, ro->dtype, i);
        }
    }
    if (sz) {
        int64_t n;
        OT_TRY(ot_ctx_input_ints(ctx, 3, out, OTTER_MAX_RANK, &n));
        if (n != r) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "sizes '%s' must hold %d values", in_name(ctx, 3), r);
        for (int i = 0; i < r; i++) scales[i] = x->dims[i] ? (double)out[i] / (double)x->dims[i] : 1.0;
    } else {
        for (int i = 0; i < r; i++) {
            if (!(scales[i] > 0)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scale %d must be > 0", i);
            out[i] = (int64_t)floor((double)x->dims[i] * (double)(float)scales[i] + 1e-9);
        }
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, r, out);
    if (!y) return ctx->output_status;
    int64_t ny = otter_tensor_numel(y), nx = otter_tensor_numel(x);
    if (ny == 0) return OTTER_OK;
    tap_set taps[OTTER_MAX_RANK];
    memset(taps, 0, sizeof taps);
    double A = otter_node_attr_float(ctx->node, "cubic_coeff_a", -0.75f);
    bool exclude = otter_node_attr_int(ctx->node, "exclude_outside", 0) != 0;
    otter_status s = OTTER_OK;
    for (int i = 0; s == OTTER_OK && i < r; i++) {
        /* dims that keep their size with scale 1 take the identity */
        bool ident = out[i] == x->dims[i] && scales[i] == 1.0 && ct != CT_TF_CROP;
        s = make_taps(ident ? RM_NEAREST : mode, ident ? CT_ASYMMETRIC : ct, ident ? NM_FLOOR : nm, A, exclude,
                      x->dims[i], out[i], sz ? (double)out[i] : (double)x->dims[i] * scales[i], scales[i], roi[i],
                      roi[r + i], &taps[i]);
    }
    double *X = NULL, *Y = NULL;
    if (s == OTTER_OK) {
        X = ot_malloc((size_t)(nx > 0 ? nx : 1) * sizeof(double));
        Y = ot_malloc((size_t)ny * sizeof(double));
        if (!X || !Y) s = OT_NOMEM();
    }
    if (s == OTTER_OK && !ot_convert(X, OTTER_DTYPE_DOUBLE, x->data, x->dtype, nx))
        s = ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input '%s': dtype %s not supported", in_name(ctx, 0),
                         otter_dtype_name(x->dtype));
    if (s == OTTER_OK) {
        resize_args a = {.rank = r,
                         .in_dims = x->dims,
                         .out_dims = out,
                         .taps = taps,
                         .X = X,
                         .Y = Y,
                         .extrapolation = otter_node_attr_float(ctx->node, "extrapolation_value", 0.0f)};
        ot_parallel_for(ctx, ny, 4096, resize_rows, &a);
        if (!otter_dtype_is_float(x->dtype))
            for (int64_t i = 0; i < ny; i++) Y[i] = nearbyint(Y[i]);
        ot_convert(y->data, y->dtype, Y, OTTER_DTYPE_DOUBLE, ny);
    }
    for (int i = 0; i < r; i++) ot_free(taps[i].idx), ot_free(taps[i].w);
    ot_free(X), ot_free(Y);
    return s;
}

otter_status ot_kernel_resize(ot_kernel_ctx *ctx) { return resize_common(ctx, false); }
otter_status ot_kernel_upsample(ot_kernel_ctx *ctx) { return resize_common(ctx, true); }

/* ---- ReverseSequence / Compress ------------------------------------------------------------------- */

otter_status ot_kernel_reversesequence(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *lens;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    OT_TRY(ot_ctx_need_input(ctx, 1, &lens));
    int64_t ba = otter_node_attr_int(ctx->node, "batch_axis", 1), ta = otter_node_attr_int(ctx->node, "time_axis", 0);
    if (x->rank < 2 || !ot_norm_axis(&ba, x->rank) || !ot_norm_axis(&ta, x->rank) || ba == ta)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "bad batch_axis/time_axis for input '%s' of rank %d",
                            in_name(ctx, 0), x->rank);
    if (!is_index_type(lens->dtype) || otter_tensor_numel(lens) != x->dims[ba])
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "sequence_lens '%s' must hold %lld int32/int64 values",
                            in_name(ctx, 1), (long long)x->dims[ba]);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(x), st[OTTER_MAX_RANK];
    contiguous_strides(x->rank, x->dims, st);
    size_t es = esize(x->dtype);
    for (int64_t i = 0; i < n; i++) {
        int64_t b = (i / st[ba]) % x->dims[ba], t = (i / st[ta]) % x->dims[ta], L = idx_at(lens, b), src = i;
        if (L > x->dims[ta]) L = x->dims[ta];
        if (t < L) src = i + (L - 1 - 2 * t) * st[ta];
        copy_elems((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)src * es, 1, x->dtype);
    }
    return OTTER_OK;
}

otter_status ot_kernel_compress(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *cond;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    OT_TRY(ot_ctx_need_input(ctx, 1, &cond));
    if (cond->rank != 1 || cond->dtype != OTTER_DTYPE_BOOL)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "condition '%s' must be a 1-D bool tensor", in_name(ctx, 1));
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
    size_t es = esize(x->dtype);
    int64_t k = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < nc; i++)
            if (c[i]) {
                copy_elems((char *)y->data + (size_t)(k * inner) * es,
                           (const char *)x->data + (size_t)((o * D + i) * inner) * es, inner, x->dtype);
                k++;
            }
    return OTTER_OK;
}
