/* Reductions and axis-wise operators: Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, CumSum, TopK.
 *
 * Most of them view the input as [outer, R, inner] (R: the reduced / scanned extent, inner: the
 * elements after it), which turns every case into contiguous loops: inner == 1 reduces contiguous
 * runs, inner > 1 accumulates whole rows (vectorised). Reductions over axes that don't form one
 * block go through a general gather path. Compute types: float (float16/bfloat16 converted),
 * double, and int64 for integer inputs (double where the op needs exp/log/sqrt). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ops/shape_math.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/vec_math.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static bool is_numeric(otter_dtype t) {
    return t != OTTER_DTYPE_UNDEFINED && t != OTTER_DTYPE_STRING && t != OTTER_DTYPE_BOOL &&
           t != OTTER_DTYPE_COMPLEX64 && t != OTTER_DTYPE_COMPLEX128 && t < OTTER_DTYPE_COUNT_;
}

/* Input converted to compute type ct (a borrowed pointer when it already is). */
static otter_status to_compute(const otter_tensor *t, otter_dtype ct, void **data, bool *owned) {
    *owned = false; /* set on every path: callers read it only after OT_TRY, but -O3 can't tell */
    int64_t n = otter_tensor_numel(t);
    if (t->dtype == ct) {
        *data = t->data;
        *owned = false;
        return OTTER_OK;
    }
    *data = ot_malloc((size_t)(n ? n : 1) * otter_dtype_size(ct));
    if (!*data) return OT_NOMEM();
    *owned = true;
    ot_convert(*data, ct, t->data, t->dtype, n);
    return OTTER_OK;
}

/* Extent before, at and after axis. */
static void split_at(const otter_tensor *t, int axis, int64_t *outer, int64_t *r, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= t->dims[i];
    *r = t->dims[axis];
    for (int i = axis + 1; i < t->rank; i++) *inner *= t->dims[i];
}

/* ======================================================================================== */
/* Reduce*                                                                                   */
/* ======================================================================================== */

typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_LOGSUM, R_LOGSUMEXP, R_SUMSQUARE } red_kind;
typedef enum { ACC_SUM, ACC_PROD, ACC_MAX, ACC_MIN } acc_kind;
typedef enum { MAP_ID, MAP_ABS, MAP_SQ, MAP_EXPSHIFT } map_kind;

typedef struct {
    const void *x;
    void *y;
    const void *shift; /* per-output max for MAP_EXPSHIFT */
    acc_kind acc;
    map_kind map;
    int64_t outer, r, inner; /* block view (block == true) */
    bool block;
    int64_t col_chunks, col_width; /* red_f32_col_sums: a row of outputs in col_chunks ranges of col_width */
    /* general view: reduced offsets and the kept dims/strides */
    const int64_t *roff;
    int nkeep;
    int64_t kdims[OTTER_MAX_RANK], kstrides[OTTER_MAX_RANK];
} red_job;

#define ACC_OP(ACC, a, v)                                                                                              \
    ((ACC) == ACC_SUM    ? (a) + (v)                                                                                   \
     : (ACC) == ACC_PROD ? (a) * (v)                                                                                   \
     : (ACC) == ACC_MAX  ? ((v) > (a) ? (v) : (a))                                                                     \
                         : ((v) < (a) ? (v) : (a)))

/* One kernel per (compute type, acc, map); the switch picks it outside the loops. */
#define RED_LOOPS(T, ACC, MAP)                                                                                         \
    do {                                                                                                               \
        const T *x = j->x;                                                                                             \
        T *y = j->y;                                                                                                   \
        const T *sh = j->shift;                                                                                        \
        (void)sh;                                                                                                      \
        if (j->block && j->inner == 1) {                                                                               \
            for (int64_t o = begin; o < end; o++) {                                                                    \
                const T *p = x + o * j->r;                                                                             \
                T a = init;                                                                                            \
                for (int64_t k = 0; k < j->r; k++) {                                                                   \
                    T v = p[k];                                                                                        \
                    (void)0;                                                                                           \
                    T m = MAP(v, o);                                                                                   \
                    a = ACC_OP(ACC, a, m);                                                                             \
                }                                                                                                      \
                y[o] = a;                                                                                              \
            }                                                                                                          \
        } else if (j->block) {                                                                                         \
            int64_t in = j->inner;                                                                                     \
            for (int64_t o = begin; o < end; o++) {                                                                    \
                T *yo = y + o * in;                                                                                    \
                for (int64_t i = 0; i < in; i++) yo[i] = init;                                                         \
                for (int64_t k = 0; k < j->r; k++) {                                                                   \
                    const T *p = x + (o * j->r + k) * in;                                                              \
                    for (int64_t i = 0; i < in; i++) {                                                                 \
                        T v = p[i];                                                                                    \
                        T m = MAP(v, o * in + i);                                                                      \
                        yo[i] = ACC_OP(ACC, yo[i], m);                                                                 \
                    }                                                                                                  \
                }                                                                                                      \
            }                                                                                                          \
        } else {                                                                                                       \
            for (int64_t o = begin; o < end; o++) {                                                                    \
                int64_t base = 0, rem = o;                                                                             \
                for (int d = j->nkeep - 1; d >= 0; d--) {                                                              \
                    base += (rem % j->kdims[d]) * j->kstrides[d];                                                      \
                    rem /= j->kdims[d];                                                                                \
                }                                                                                                      \
                T a = init;                                                                                            \
                for (int64_t k = 0; k < j->r; k++) {                                                                   \
                    T v = x[base + j->roff[k]];                                                                        \
                    T m = MAP(v, o);                                                                                   \
                    a = ACC_OP(ACC, a, m);                                                                             \
                }                                                                                                      \
                y[o] = a;                                                                                              \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

#define MAP_ID_F(v, o)    (v)
#define MAP_ABS_F(v, o)   ((v) < 0 ? -(v) : (v))
#define MAP_SQ_F(v, o)    ((v) * (v))
#define MAP_EXP_F32(v, o) expf((v)-sh[o])
#define MAP_EXP_F64(v, o) exp((v)-sh[o])

#define RED_TYPE(S, T, INIT_MAX, INIT_MIN, EXPMAP)                                                                     \
    static void red_##S(void *arg, int64_t begin, int64_t end) {                                                       \
        const red_job *j = arg;                                                                                        \
        T init;                                                                                                        \
        switch (j->acc) {                                                                                              \
        case ACC_SUM:                                                                                                  \
            init = 0;                                                                                                  \
            break;                                                                                                     \
        case ACC_PROD:                                                                                                 \
            init = 1;                                                                                                  \
            break;                                                                                                     \
        case ACC_MAX:                                                                                                  \
            init = INIT_MAX;                                                                                           \
            break;                                                                                                     \
        default:                                                                                                       \
            init = INIT_MIN;                                                                                           \
            break;                                                                                                     \
        }                                                                                                              \
        if (j->acc == ACC_SUM && j->map == MAP_ID)                                                                     \
            RED_LOOPS(T, ACC_SUM, MAP_ID_F);                                                                           \
        else if (j->acc == ACC_SUM && j->map == MAP_ABS)                                                               \
            RED_LOOPS(T, ACC_SUM, MAP_ABS_F);                                                                          \
        else if (j->acc == ACC_SUM && j->map == MAP_SQ)                                                                \
            RED_LOOPS(T, ACC_SUM, MAP_SQ_F);                                                                           \
        else if (j->acc == ACC_SUM && j->map == MAP_EXPSHIFT)                                                          \
            RED_LOOPS(T, ACC_SUM, EXPMAP);                                                                             \
        else if (j->acc == ACC_PROD)                                                                                   \
            RED_LOOPS(T, ACC_PROD, MAP_ID_F);                                                                          \
        else if (j->acc == ACC_MAX)                                                                                    \
            RED_LOOPS(T, ACC_MAX, MAP_ID_F);                                                                           \
        else                                                                                                           \
            RED_LOOPS(T, ACC_MIN, MAP_ID_F);                                                                           \
    }
RED_TYPE(f32, float, -INFINITY, INFINITY, MAP_EXP_F32)
RED_TYPE(f64, double, -INFINITY, INFINITY, MAP_EXP_F64)
#define MAP_EXP_I64(v, o) (v) /* never used: exp reductions run in double */
RED_TYPE(i64, int64_t, INT64_MIN, INT64_MAX, MAP_EXP_I64)

/* ReduceSum / Mean / L1 / SumSquare over rows of r contiguous floats, in 16 running partial sums
 * added at the end: one running sum waits on each add's latency (4x slower on a whole row). */
static inline ot_v4 red_map_v4(ot_v4 v, map_kind map) {
    if (map == MAP_SQ) return v * v;
    if (map == MAP_ABS) return (ot_v4)((ot_i4)v & 0x7fffffff); /* clear the sign bits */
    return v;
}

static inline float red_map_f(float v, map_kind map) { return map == MAP_SQ ? v * v : map == MAP_ABS ? fabsf(v) : v; }

static void red_f32_row_sums(void *arg, int64_t begin, int64_t end) {
    const red_job *j = arg;
    const float *x = j->x;
    float *y = j->y;
    const map_kind map = j->map;
    if (j->r < 16) {
        /* short rows (2x2 maps' global means): the partial sums would stay zero; four rows side by
         * side instead, each summed in order, so they wait on their own adds only */
        const int64_t r = j->r;
        int64_t o = begin;
        for (; o + 4 <= end; o += 4) {
            const float *p = x + o * r;
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
            for (int64_t k = 0; k < r; k++) {
                a0 += red_map_f(p[k], map), a1 += red_map_f(p[r + k], map);
                a2 += red_map_f(p[2 * r + k], map), a3 += red_map_f(p[3 * r + k], map);
            }
            y[o] = a0, y[o + 1] = a1, y[o + 2] = a2, y[o + 3] = a3;
        }
        for (; o < end; o++) {
            float a = 0.0f;
            for (int64_t k = 0; k < r; k++) a += red_map_f(x[o * r + k], map);
            y[o] = a;
        }
        return;
    }
    for (int64_t o = begin; o < end; o++) {
        const float *p = x + o * j->r;
        ot_v4 s0 = {0, 0, 0, 0}, s1 = s0, s2 = s0, s3 = s0;
        int64_t k = 0;
        for (; k + 16 <= j->r; k += 16) {
            s0 += red_map_v4(ot_v4_load(p + k), map), s1 += red_map_v4(ot_v4_load(p + k + 4), map);
            s2 += red_map_v4(ot_v4_load(p + k + 8), map), s3 += red_map_v4(ot_v4_load(p + k + 12), map);
        }
        const ot_v4 s = (s0 + s1) + (s2 + s3);
        float a = (s[0] + s[1]) + (s[2] + s[3]);
        for (; k < j->r; k++) a += red_map_f(p[k], map);
        y[o] = a;
    }
}

/* ReduceSum / Mean / L1 / SumSquare over the middle axis of [outer][r][inner] (a bias's gradient: the sum over
 * the batch and positions of [N, T, C]) in vectors across the columns, each column summed in the order of k as
 * the scalar loop does (the same bits); fewer rows of outputs than threads are split into ranges of columns, one
 * a thread (more ranges read each row in more passes: slower from memory). The scalar loop ran on one thread at
 * 1.5 cycles an element: 2.6 ms for the encoder_d256 step's 4096 x 1024 sums. */
static void red_f32_col_sums(void *arg, int64_t begin, int64_t end) {
    const red_job *j = arg;
    const float *x = j->x;
    const map_kind map = j->map;
    for (int64_t u = begin; u < end; u++) {
        const int64_t o = u / j->col_chunks, c0 = u % j->col_chunks * j->col_width,
                      c1 = c0 + j->col_width < j->inner ? c0 + j->col_width : j->inner;
        float *y = (float *)j->y + o * j->inner;
        memset(y + c0, 0, (size_t)(c1 - c0) * sizeof(float));
        for (int64_t k = 0; k < j->r; k++) {
            const float *p = x + (o * j->r + k) * j->inner;
            int64_t i = c0;
            for (; i + 4 <= c1; i += 4) ot_v4_store(y + i, ot_v4_load(y + i) + red_map_v4(ot_v4_load(p + i), map));
            for (; i < c1; i++) y[i] += red_map_f(p[i], map);
        }
    }
}

static void red_exec(const ot_kernel_ctx *ctx, otter_dtype ct, red_job *j, int64_t nout) {
    ot_range_fn fn = ct == OTTER_DTYPE_FLOAT ? red_f32 : ct == OTTER_DTYPE_DOUBLE ? red_f64 : red_i64;
    const bool f32_sum = ct == OTTER_DTYPE_FLOAT && j->block && j->acc == ACC_SUM && j->map != MAP_EXPSHIFT;
    if (f32_sum && j->inner == 1) fn = red_f32_row_sums;
    int64_t units = j->block ? j->outer : nout, width = j->inner; /* a unit's columns */
    if (f32_sum && j->inner > 1) {
        fn = red_f32_col_sums;
        const int64_t T = ctx->n_threads, want = j->outer < T ? (T + j->outer - 1) / j->outer : 1;
        j->col_width = (j->inner + want - 1) / want;
        j->col_width = j->col_width < 64 ? 64 : (j->col_width + 15) / 16 * 16; /* whole lines */
        j->col_chunks = (j->inner + j->col_width - 1) / j->col_width;
        units = j->outer * j->col_chunks, width = j->col_width;
    }
    int64_t per = j->block ? j->r * width : j->r;
    int64_t grain = per > 0 ? (16384 + per - 1) / per : units;
    if (grain < 1) grain = 1;
    if (units > 0) ot_parallel_for(ctx, units, grain, fn, j);
}

/* The reduced axes of input 0 (axes from input 1 from opset 13 for ReduceSum and 18 for the others,
 * an attribute before); *noop: noop_with_empty_axes applies (nothing reduced, output = input). */
static otter_status reduce_axes(const ot_kernel_ctx *ctx, red_kind kind, int rank, bool *red, bool *noop) {
    bool axes_input = (kind == R_SUM && ctx->opset >= 13) || ctx->opset >= 18;
    /* The Reduce* other than ReduceSum have it from opset 18, after the ONNX 1.12 schemas. */
    bool noop_attr = axes_input && ot_ctx_attr_int_or(ctx, "noop_with_empty_axes", 0) != 0;
    int64_t axes[OTTER_MAX_RANK];
    int64_t naxes = 0;
    if (axes_input) {
        if (ot_ctx_input(ctx, 1)) OT_TRY(ot_ctx_input_ints(ctx, 1, axes, OTTER_MAX_RANK, &naxes));
    } else {
        const otter_attr *a = otter_node_attr(ctx->node, "axes");
        if (a) {
            if (a->n_ints > OTTER_MAX_RANK)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'axes' has %zu entries", a->n_ints);
            naxes = (int64_t)a->n_ints;
            memcpy(axes, a->ints, sizeof(int64_t) * a->n_ints);
        }
    }
    int64_t bad = ot_reduce_mask(rank, axes, naxes, noop_attr, red);
    if (bad >= 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld is out of range for input 0 '%s' of rank %d",
                            (long long)axes[bad], ot_ctx_input_name(ctx, 0), rank);
    *noop = naxes == 0 && noop_attr;
    return OTTER_OK;
}

/* The job's view of x: with at most one group of reduced dims (size-1 dims dropped, neighbours
 * merged) a block (outer, r, inner); otherwise the offsets of every reduced index combination
 * (*roff, the caller frees it) and the kept dims decomposed per output. r: reduced elements. */
static otter_status reduce_view(const otter_tensor *x, const bool *red, int64_t r, red_job *j, int64_t **roff) {
    int rank = x->rank;
    int64_t gsz[OTTER_MAX_RANK];
    bool gred[OTTER_MAX_RANK];
    int ng = 0;
    for (int i = 0; i < rank; i++) {
        if (x->dims[i] == 1) continue;
        if (ng > 0 && gred[ng - 1] == red[i])
            gsz[ng - 1] *= x->dims[i];
        else {
            gsz[ng] = x->dims[i];
            gred[ng++] = red[i];
        }
    }
    int nred_groups = 0;
    for (int g = 0; g < ng; g++) nred_groups += gred[g];
    if (nred_groups <= 1) {
        j->block = true;
        j->outer = 1, j->r = 1, j->inner = 1;
        bool after = false;
        for (int g = 0; g < ng; g++) {
            if (gred[g]) {
                j->r = gsz[g];
                after = true;
            } else if (after)
                j->inner *= gsz[g];
            else
                j->outer *= gsz[g];
        }
        return OTTER_OK;
    }
    j->block = false;
    j->r = r;
    *roff = ot_malloc(sizeof(int64_t) * (size_t)(r ? r : 1));
    if (!*roff) return OT_NOMEM();
    int64_t strides[OTTER_MAX_RANK], st = 1;
    for (int i = rank - 1; i >= 0; i--) {
        strides[i] = st;
        st *= x->dims[i];
    }
    for (int64_t k = 0; k < r; k++) {
        int64_t rem = k, off = 0;
        for (int i = rank - 1; i >= 0; i--)
            if (red[i]) {
                off += (rem % x->dims[i]) * strides[i];
                rem /= x->dims[i];
            }
        (*roff)[k] = off;
    }
    for (int i = 0; i < rank; i++)
        if (!red[i]) {
            j->kdims[j->nkeep] = x->dims[i];
            j->kstrides[j->nkeep++] = strides[i];
        }
    j->roff = *roff;
    return OTTER_OK;
}

/* Accumulator and element map of each reduction (LogSumExp: the max first, see reduce_common). */
static const struct {
    acc_kind acc;
    map_kind map;
} REDUCE_OPS[] = {
    [R_SUM] = {ACC_SUM, MAP_ID},       [R_MEAN] = {ACC_SUM, MAP_ID}, [R_LOGSUM] = {ACC_SUM, MAP_ID},
    [R_L1] = {ACC_SUM, MAP_ABS},       [R_L2] = {ACC_SUM, MAP_SQ},   [R_SUMSQUARE] = {ACC_SUM, MAP_SQ},
    [R_MAX] = {ACC_MAX, MAP_ID},       [R_MIN] = {ACC_MIN, MAP_ID},  [R_PROD] = {ACC_PROD, MAP_ID},
    [R_LOGSUMEXP] = {ACC_MAX, MAP_ID},
};

/* The last step of Mean, L2, LogSum and LogSumExp over the accumulated yd (nout values of ct). */
static void reduce_finish(red_kind kind, otter_dtype ct, void *yd, const void *shift, int64_t nout, int64_t r) {
    if (kind != R_MEAN && kind != R_L2 && kind != R_LOGSUM && kind != R_LOGSUMEXP) return;
    if (kind == R_MEAN && ct == OTTER_DTYPE_FLOAT) { /* as below, without the per-element type switches */
        float *p = yd;
        for (int64_t i = 0; i < nout; i++) p[i] = (float)((double)p[i] / (double)r);
        return;
    }
    for (int64_t i = 0; i < nout; i++) {
        if (ct == OTTER_DTYPE_INT64) {
            int64_t *p = yd;
            p[i] = r ? p[i] / r : 0;
            continue;
        }
        double v = ot_get_f64(yd, ct, i);
        if (kind == R_MEAN) v = v / (double)r;
        if (kind == R_L2) v = sqrt(v);
        if (kind == R_LOGSUM) v = log(v);
        if (kind == R_LOGSUMEXP) v = log(v) + ot_get_f64(shift, ct, i);
        ot_set_f64(yd, ct, i, v);
    }
}

static otter_status reduce_common(ot_kernel_ctx *ctx, red_kind kind) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    /* ReduceMax and ReduceMin take bool from opset 20 (any and all: computed as 0/1 integers) */
    bool bool_ok = x->dtype == OTTER_DTYPE_BOOL && (kind == R_MAX || kind == R_MIN);
    if (!is_numeric(x->dtype) && !bool_ok) return ot_ctx_bad_type(ctx, 0, x->dtype);
    int rank = x->rank;
    bool red[OTTER_MAX_RANK], noop = false;
    OT_TRY(reduce_axes(ctx, kind, rank, red, &noop));
    if (noop) {
        otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
        if (!y) return ctx->output_status;
        if (y->data != x->data) memcpy(y->data, x->data, otter_tensor_nbytes(x));
        return OTTER_OK;
    }
    int src[OTTER_MAX_RANK];
    int64_t odims[OTTER_MAX_RANK];
    int64_t keepdims;
    OT_TRY(ot_ctx_attr_int(ctx, "keepdims", &keepdims));
    int orank = ot_reduce_out_axes(rank, red, keepdims != 0, src);
    for (int j = 0; j < orank; j++) odims[j] = src[j] >= 0 ? x->dims[src[j]] : 1;
    int64_t r = 1, nout = 1;
    for (int i = 0; i < rank; i++) {
        if (red[i])
            r *= x->dims[i];
        else
            nout *= x->dims[i];
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, orank, odims);
    if (!y) return ctx->output_status;
    if (nout == 0) return OTTER_OK;

    /* compute type */
    bool needs_float = kind == R_L2 || kind == R_LOGSUM || kind == R_LOGSUMEXP;
    otter_dtype ct = x->dtype == OTTER_DTYPE_DOUBLE                  ? OTTER_DTYPE_DOUBLE
                     : otter_dtype_is_float(x->dtype)                ? OTTER_DTYPE_FLOAT
                     : needs_float || x->dtype == OTTER_DTYPE_UINT64 ? OTTER_DTYPE_DOUBLE
                                                                     : OTTER_DTYPE_INT64;
    size_t cs = otter_dtype_size(ct);
    void *xd = NULL, *yd = NULL, *shift = NULL;
    int64_t *roff = NULL;
    bool x_owned = false;
    otter_status s = to_compute(x, ct, &xd, &x_owned);
    if (s != OTTER_OK) return s;
    yd = y->dtype == ct ? y->data : ot_malloc((size_t)nout * cs);
    red_job j;
    memset(&j, 0, sizeof j);
    j.x = xd;
    j.y = yd;
    j.acc = REDUCE_OPS[kind].acc;
    j.map = REDUCE_OPS[kind].map;
    s = yd ? reduce_view(x, red, r, &j, &roff) : OT_NOMEM();
    if (s == OTTER_OK && kind == R_LOGSUMEXP) {
        /* the max of each slice first, then sum(exp(x - max)) */
        shift = ot_malloc((size_t)nout * cs);
        if (!shift) s = OT_NOMEM();
    }
    if (s == OTTER_OK && kind == R_LOGSUMEXP) {
        j.y = shift;
        red_exec(ctx, ct, &j, nout);
        /* an all -inf (or empty) slice would give inf - inf: shift by 0 there */
        for (int64_t i = 0; i < nout; i++) {
            double v = ot_get_f64(shift, ct, i);
            if (!isfinite(v)) ot_set_f64(shift, ct, i, 0);
        }
        j.y = yd;
        j.shift = shift;
        j.acc = ACC_SUM;
        j.map = MAP_EXPSHIFT;
    }
    if (s == OTTER_OK) {
        red_exec(ctx, ct, &j, nout);
        reduce_finish(kind, ct, yd, shift, nout, r);
        if (bool_ok) /* an empty slice's identity, INT64_MIN for max or INT64_MAX for min, is false or true */
            for (int64_t i = 0; i < nout; i++) ((int64_t *)yd)[i] = ((const int64_t *)yd)[i] > 0;
        if (yd != y->data) ot_convert(y->data, y->dtype, yd, ct, nout);
    }
    if (x_owned) ot_free(xd);
    if (yd && yd != y->data) ot_free(yd);
    ot_free(shift);
    ot_free(roff);
    return s;
}

#define REDUCE_RUN(NAME, KIND)                                                                                         \
    otter_status ot_kernel_##NAME(ot_kernel_ctx *ctx) { return reduce_common(ctx, KIND); }
REDUCE_RUN(reduce_sum, R_SUM)
REDUCE_RUN(reduce_mean, R_MEAN)
REDUCE_RUN(reduce_max, R_MAX)
REDUCE_RUN(reduce_min, R_MIN)
REDUCE_RUN(reduce_prod, R_PROD)
REDUCE_RUN(reduce_l1, R_L1)
REDUCE_RUN(reduce_l2, R_L2)
REDUCE_RUN(reduce_log_sum, R_LOGSUM)
REDUCE_RUN(reduce_log_sum_exp, R_LOGSUMEXP)
REDUCE_RUN(reduce_sum_square, R_SUMSQUARE)

/* ======================================================================================== */
/* ArgMax / ArgMin                                                                           */
/* ======================================================================================== */

static otter_status arg_common(ot_kernel_ctx *ctx, bool is_max) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (!is_numeric(x->dtype)) return ot_ctx_bad_type(ctx, 0, x->dtype);
    int64_t axis0, keepdims, last;
    OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis0));
    OT_TRY(ot_ctx_attr_int(ctx, "keepdims", &keepdims));
    OT_TRY(ot_ctx_attr_int(ctx, "select_last_index", &last));
    int64_t axis = axis0;
    if (!ot_norm_axis(&axis, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'axis' %lld is out of range for input 0 '%s' of rank %d",
                            (long long)axis0, ot_ctx_input_name(ctx, 0), x->rank);
    bool red[OTTER_MAX_RANK];
    int src[OTTER_MAX_RANK];
    int64_t odims[OTTER_MAX_RANK];
    ot_reduce_mask(x->rank, &axis, 1, false, red);
    int orank = ot_reduce_out_axes(x->rank, red, keepdims, src);
    for (int j = 0; j < orank; j++) odims[j] = src[j] >= 0 ? x->dims[src[j]] : 1;
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_INT64, orank, odims);
    if (!y) return ctx->output_status;
    int64_t outer, r, inner;
    split_at(x, (int)axis, &outer, &r, &inner);
    if (r == 0 && outer * inner > 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 '%s' has size 0 along axis %lld",
                            ot_ctx_input_name(ctx, 0), (long long)axis);
    void *xd;
    bool owned;
    otter_dtype ct = x->dtype == OTTER_DTYPE_FLOAT ? OTTER_DTYPE_FLOAT : OTTER_DTYPE_DOUBLE;
    if (x->dtype == OTTER_DTYPE_INT64 || x->dtype == OTTER_DTYPE_UINT64) ct = x->dtype; /* exact */
    OT_TRY(to_compute(x, ct, &xd, &owned));
    int64_t *out = y->data;
#define ARG_LOOP(T)                                                                                                    \
    do {                                                                                                               \
        const T *xs = xd;                                                                                              \
        for (int64_t o = 0; o < outer; o++)                                                                            \
            for (int64_t i = 0; i < inner; i++) {                                                                      \
                const T *p = xs + o * r * inner + i;                                                                   \
                T best = p[0];                                                                                         \
                int64_t bi = 0;                                                                                        \
                for (int64_t k = 1; k < r; k++) {                                                                      \
                    T v = p[k * inner];                                                                                \
                    bool better = is_max ? (last ? v >= best : v > best) : (last ? v <= best : v < best);              \
                    if (better) best = v, bi = k;                                                                      \
                }                                                                                                      \
                out[o * inner + i] = bi;                                                                               \
            }                                                                                                          \
    } while (0)
    if (ct == OTTER_DTYPE_FLOAT)
        ARG_LOOP(float);
    else if (ct == OTTER_DTYPE_DOUBLE)
        ARG_LOOP(double);
    else if (ct == OTTER_DTYPE_INT64)
        ARG_LOOP(int64_t);
    else
        ARG_LOOP(uint64_t);
#undef ARG_LOOP
    if (owned) ot_free(xd);
    return OTTER_OK;
}
otter_status ot_kernel_argmax(ot_kernel_ctx *ctx) { return arg_common(ctx, true); }
otter_status ot_kernel_argmin(ot_kernel_ctx *ctx) { return arg_common(ctx, false); }

/* ======================================================================================== */
/* Softmax / LogSoftmax / Hardmax                                                            */
/* ======================================================================================== */

typedef enum { SM_SOFTMAX, SM_LOG, SM_HARD } sm_kind;

typedef struct {
    const void *x;
    void *y;
    int64_t r, inner;
    sm_kind kind;
} sm_job;

#define SM_TYPE(S, T, EXP, LOG)                                                                                        \
    static void sm_##S(void *arg, int64_t begin, int64_t end) {                                                        \
        const sm_job *j = arg;                                                                                         \
        int64_t r = j->r, in = j->inner;                                                                               \
        for (int64_t u = begin; u < end; u++) {                                                                        \
            int64_t o = u / in, i = u % in;                                                                            \
            const T *x = (const T *)j->x + o * r * in + i;                                                             \
            T *y = (T *)j->y + o * r * in + i;                                                                         \
            T mx = x[0];                                                                                               \
            int64_t mi = 0;                                                                                            \
            for (int64_t k = 1; k < r; k++)                                                                            \
                if (x[k * in] > mx) mx = x[k * in], mi = k;                                                            \
            if (j->kind == SM_HARD) {                                                                                  \
                for (int64_t k = 0; k < r; k++) y[k * in] = k == mi ? (T)1 : (T)0;                                     \
                continue;                                                                                              \
            }                                                                                                          \
            T sum = 0;                                                                                                 \
            if (j->kind == SM_SOFTMAX) {                                                                               \
                for (int64_t k = 0; k < r; k++) {                                                                      \
                    T e = EXP(x[k * in] - mx);                                                                         \
                    y[k * in] = e;                                                                                     \
                    sum += e;                                                                                          \
                }                                                                                                      \
                T inv = (T)1 / sum;                                                                                    \
                for (int64_t k = 0; k < r; k++) y[k * in] *= inv;                                                      \
            } else {                                                                                                   \
                for (int64_t k = 0; k < r; k++) sum += EXP(x[k * in] - mx);                                            \
                T ls = LOG(sum) + mx;                                                                                  \
                for (int64_t k = 0; k < r; k++) y[k * in] = x[k * in] - ls;                                            \
            }                                                                                                          \
        }                                                                                                              \
    }
SM_TYPE(f32, float, expf, logf)
SM_TYPE(f64, double, exp, log)

/* Float softmax over contiguous rows (inner == 1, the attention scores' case): ot_softmax_row's
 * vectorized exp. A row holding NaN or +inf, or only -inf, goes the scalar way, which gives the NaN the
 * spec's formula does where ot_softmax_row would give numbers or zeros. */
static void sm_f32_rows(void *arg, int64_t begin, int64_t end) {
    const sm_job *j = arg;
    const int64_t r = j->r;
    for (int64_t u = begin; u < end; u++) {
        const float *x = (const float *)j->x + u * r;
        float *y = (float *)j->y + u * r, mx = -INFINITY;
        bool nan = false;
        int64_t k = 0;
#if defined(__SSE2__)
        /* GCC's -O2 leaves the scalar loop unvectorized: as long as the exp pass without this */
        __m128 vmax = _mm_set1_ps(-INFINITY), vnan = _mm_setzero_ps();
        for (; k + 4 <= r; k += 4) {
            __m128 v = _mm_loadu_ps(x + k);
            vnan = _mm_or_ps(vnan, _mm_cmpunord_ps(v, v));
            vmax = _mm_max_ps(vmax, v);
        }
        float lanes[4];
        _mm_storeu_ps(lanes, vmax);
        nan = _mm_movemask_ps(vnan) != 0;
        for (int l = 0; l < 4; l++) mx = lanes[l] > mx ? lanes[l] : mx;
#endif
        for (; k < r; k++) {
            nan |= x[k] != x[k];
            mx = x[k] > mx ? x[k] : mx;
        }
        if (nan || !isfinite(mx)) {
            sm_f32(arg, u, u + 1);
            continue;
        }
        if (y != x) memcpy(y, x, (size_t)r * sizeof(float));
        ot_softmax_row(y, r);
    }
}

static otter_status softmax_common(ot_kernel_ctx *ctx, sm_kind kind) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (!otter_dtype_is_float(x->dtype)) return ot_ctx_bad_type(ctx, 0, x->dtype);
    bool old = ctx->opset < 13;
    int64_t axis;
    OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis));
    int64_t ax = axis;
    if (!ot_norm_axis(&ax, x->rank > 0 ? x->rank : 1))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'axis' %lld is out of range for input 0 '%s' of rank %d",
                            (long long)axis, ot_ctx_input_name(ctx, 0), x->rank);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(x);
    if (n == 0) return OTTER_OK;
    int64_t outer = 1, r = 1, inner = 1;
    if (x->rank == 0) {
        /* a scalar: one element of its own */
    } else if (old) { /* flatten to [prod(dims[:axis]), prod(dims[axis:])] */
        for (int i = 0; i < ax; i++) outer *= x->dims[i];
        for (int i = (int)ax; i < x->rank; i++) r *= x->dims[i];
    } else {
        split_at(x, (int)ax, &outer, &r, &inner);
    }
    otter_dtype ct = x->dtype == OTTER_DTYPE_DOUBLE ? OTTER_DTYPE_DOUBLE : OTTER_DTYPE_FLOAT;
    void *xd, *yd;
    bool owned;
    OT_TRY(to_compute(x, ct, &xd, &owned));
    yd = y->dtype == ct ? y->data : ot_malloc((size_t)n * otter_dtype_size(ct));
    if (!yd) {
        if (owned) ot_free(xd);
        return OT_NOMEM();
    }
    sm_job j = {xd, yd, r, inner, kind};
    int64_t grain = 8192 / (r ? r : 1) + 1;
    ot_range_fn fn = ct == OTTER_DTYPE_DOUBLE ? sm_f64 : kind == SM_SOFTMAX && inner == 1 ? sm_f32_rows : sm_f32;
    ot_parallel_for(ctx, outer * inner, grain, fn, &j);
    if (yd != y->data) {
        ot_convert(y->data, y->dtype, yd, ct, n);
        ot_free(yd);
    }
    if (owned) ot_free(xd);
    return OTTER_OK;
}
otter_status ot_kernel_softmax(ot_kernel_ctx *ctx) { return softmax_common(ctx, SM_SOFTMAX); }
otter_status ot_kernel_logsoftmax(ot_kernel_ctx *ctx) { return softmax_common(ctx, SM_LOG); }
otter_status ot_kernel_hardmax(ot_kernel_ctx *ctx) { return softmax_common(ctx, SM_HARD); }

/* ======================================================================================== */
/* CumSum, CumProd                                                                           */
/* ======================================================================================== */

#define CUMSUM_X(E, T, S)                                                                                              \
    static void cumsum_##S(const void *xv, void *yv, int64_t outer, int64_t r, int64_t inner, bool excl, bool rev,     \
                           bool prod) {                                                                                \
        const T *x = xv;                                                                                               \
        T *y = yv;                                                                                                     \
        for (int64_t o = 0; o < outer; o++) {                                                                          \
            const T *xo = x + o * r * inner;                                                                           \
            T *yo = y + o * r * inner;                                                                                 \
            for (int64_t i = 0; i < inner; i++) {                                                                      \
                T acc = prod ? 1 : 0;                                                                                  \
                for (int64_t kk = 0; kk < r; kk++) {                                                                   \
                    int64_t k = rev ? r - 1 - kk : kk;                                                                 \
                    T v = xo[k * inner + i];                                                                           \
                    if (excl) {                                                                                        \
                        yo[k * inner + i] = acc;                                                                       \
                        acc = prod ? (T)(acc * v) : (T)(acc + v);                                                      \
                    } else {                                                                                           \
                        acc = prod ? (T)(acc * v) : (T)(acc + v);                                                      \
                        yo[k * inner + i] = acc;                                                                       \
                    }                                                                                                  \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
    }
CUMSUM_X(OTTER_DTYPE_FLOAT, float, f32)
CUMSUM_X(OTTER_DTYPE_DOUBLE, double, f64)
CUMSUM_X(OTTER_DTYPE_INT32, int32_t, i32)
CUMSUM_X(OTTER_DTYPE_INT64, int64_t, i64)
CUMSUM_X(OTTER_DTYPE_UINT32, uint32_t, u32)
CUMSUM_X(OTTER_DTYPE_UINT64, uint64_t, u64)

/* CumSum, or CumProd (opset 26) when prod: the same scan with another operation. */
static otter_status cumulative(ot_kernel_ctx *ctx, bool prod) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t axv[1], na = 0;
    if (!ot_ctx_input(ctx, 1)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 (axis) is missing");
    OT_TRY(ot_ctx_input_ints(ctx, 1, axv, 1, &na));
    if (na != 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 '%s' (axis) must hold one value",
                            ot_ctx_input_name(ctx, 1));
    int64_t axis = axv[0];
    if (!ot_norm_axis(&axis, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld is out of range for input 0 '%s' of rank %d",
                            (long long)axv[0], ot_ctx_input_name(ctx, 0), x->rank);
    int64_t excl, rev;
    if (prod) { /* no ONNX 1.12 schema: CumProd's defaults */
        excl = ot_ctx_attr_int_or(ctx, "exclusive", 0);
        rev = ot_ctx_attr_int_or(ctx, "reverse", 0);
    } else {
        OT_TRY(ot_ctx_attr_int(ctx, "exclusive", &excl));
        OT_TRY(ot_ctx_attr_int(ctx, "reverse", &rev));
    }
    void (*fn)(const void *, void *, int64_t, int64_t, int64_t, bool, bool, bool) = NULL;
    otter_dtype ct = x->dtype;
    switch (x->dtype) {
    case OTTER_DTYPE_FLOAT:
        fn = cumsum_f32;
        break;
    case OTTER_DTYPE_DOUBLE:
        fn = cumsum_f64;
        break;
    case OTTER_DTYPE_INT32:
        fn = cumsum_i32;
        break;
    case OTTER_DTYPE_INT64:
        fn = cumsum_i64;
        break;
    case OTTER_DTYPE_UINT32:
        fn = cumsum_u32;
        break;
    case OTTER_DTYPE_UINT64:
        fn = cumsum_u64;
        break;
    case OTTER_DTYPE_FLOAT16:
    case OTTER_DTYPE_BFLOAT16:
        fn = cumsum_f32;
        ct = OTTER_DTYPE_FLOAT;
        break;
    default:
        return ot_ctx_bad_type(ctx, 0, x->dtype);
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(x), outer, r, inner;
    if (n == 0) return OTTER_OK;
    split_at(x, (int)axis, &outer, &r, &inner);
    void *xd, *yd;
    bool owned;
    OT_TRY(to_compute(x, ct, &xd, &owned));
    yd = ct == y->dtype ? y->data : ot_malloc((size_t)n * otter_dtype_size(ct));
    if (!yd) {
        if (owned) ot_free(xd);
        return OT_NOMEM();
    }
    fn(xd, yd, outer, r, inner, excl, rev, prod);
    if (yd != y->data) {
        ot_convert(y->data, y->dtype, yd, ct, n);
        ot_free(yd);
    }
    if (owned) ot_free(xd);
    return OTTER_OK;
}
otter_status ot_kernel_cumsum(ot_kernel_ctx *ctx) { return cumulative(ctx, false); }
otter_status ot_kernel_cumprod(ot_kernel_ctx *ctx) { return cumulative(ctx, true); }

/* com.otter CumProdGrad(dY, X, axis; exclusive, reverse) -> dX, CumProd's gradient without dividing by X,
 * so lines holding zeros get their exact gradient (as PyTorch's cumprod backward). In scan order t (reversed
 * when `reverse`), inclusive outputs give dX_k = P_k * S_k with P_k = prod_{i<k} x_i and S_k = dY_k +
 * x_{k+1} S_{k+1}; exclusive outputs give the same with dY shifted by one (S_k = dY_{k+1} + x_{k+1} S_{k+1}). */
otter_status ot_kernel_cumprod_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *x;
    OT_TRY(ot_ctx_float_input(ctx, 0, &dy));
    OT_TRY(ot_ctx_float_input(ctx, 1, &x));
    if (dy->rank != x->rank || memcmp(dy->dims, x->dims, sizeof(int64_t) * (size_t)x->rank) != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' and X '%s' differ in shape", ot_ctx_input_name(ctx, 0),
                            ot_ctx_input_name(ctx, 1));
    int64_t axv[1], na = 0;
    if (!ot_ctx_input(ctx, 2)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 2 (axis) is missing");
    OT_TRY(ot_ctx_input_ints(ctx, 2, axv, 1, &na));
    int64_t axis = axv[0];
    if (na != 1 || !ot_norm_axis(&axis, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 2 '%s' (axis) must hold one axis of X's %d",
                            ot_ctx_input_name(ctx, 2), x->rank);
    bool excl = ot_ctx_attr_int_or(ctx, "exclusive", 0) != 0, rev = ot_ctx_attr_int_or(ctx, "reverse", 0) != 0;
    otter_tensor *dx = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!dx) return ctx->output_status;
    if (otter_tensor_numel(x) == 0) return OTTER_OK;
    const float *g, *xv;
    float *g_tmp = NULL, *x_tmp = NULL, *out, *out_tmp = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, dy, &g, &g_tmp);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 1, x, &xv, &x_tmp);
    if (s == OTTER_OK) s = ot_output_f32(dx, &out, &out_tmp);
    if (s == OTTER_OK) {
        int64_t outer, r, inner;
        split_at(x, (int)axis, &outer, &r, &inner);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t base = o * r * inner + i;
#define AT(t) (base + (rev ? r - 1 - (t) : (t)) * inner) /* element at scan position t */
                double acc = 0;
                for (int64_t t = r - 1; t >= 0; t--) {
                    double x_next = t + 1 < r ? xv[AT(t + 1)] : 0;
                    double dy_at = excl ? (t + 1 < r ? g[AT(t + 1)] : 0) : g[AT(t)];
                    acc = dy_at + x_next * acc;
                    out[AT(t)] = (float)acc;
                }
                double prefix = 1;
                for (int64_t t = 0; t < r; t++) {
                    out[AT(t)] = (float)(prefix * out[AT(t)]);
                    prefix *= xv[AT(t)];
                }
#undef AT
            }
        ot_output_f32_done(dx, out_tmp);
    }
    ot_free(g_tmp);
    ot_free(x_tmp);
    return s;
}

/* ======================================================================================== */
/* TopK                                                                                      */
/* ======================================================================================== */

typedef struct {
    double v;
    int64_t i;
} topk_item;

static int topk_cmp_largest(const void *pa, const void *pb) {
    const topk_item *a = pa, *b = pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return a->i < b->i ? -1 : (a->i > b->i);
}
static int topk_cmp_smallest(const void *pa, const void *pb) {
    const topk_item *a = pa, *b = pb;
    if (a->v != b->v) return a->v < b->v ? -1 : 1;
    return a->i < b->i ? -1 : (a->i > b->i);
}

otter_status ot_kernel_topk(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (!is_numeric(x->dtype)) return ot_ctx_bad_type(ctx, 0, x->dtype);
    int64_t k;
    if (ctx->opset >= 10) {
        int64_t kv[1], nk = 0;
        if (!ot_ctx_input(ctx, 1)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 (K) is missing");
        OT_TRY(ot_ctx_input_ints(ctx, 1, kv, 1, &nk));
        if (nk != 1)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 '%s' (K) must hold one value",
                                ot_ctx_input_name(ctx, 1));
        k = kv[0];
    } else {
        OT_TRY(ot_ctx_attr_int(ctx, "k", &k));
    }
    int64_t axis0, largest;
    OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis0));
    OT_TRY(ot_ctx_attr_int(ctx, "largest", &largest));
    int64_t axis = axis0;
    if (!ot_norm_axis(&axis, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'axis' %lld is out of range for input 0 '%s' of rank %d",
                            (long long)axis0, ot_ctx_input_name(ctx, 0), x->rank);
    int64_t outer, r, inner;
    split_at(x, (int)axis, &outer, &r, &inner);
    if (k < 0 || k > r)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "K = %lld is outside [0, %lld] (input 0 '%s' along axis %lld)",
                            (long long)k, (long long)r, ot_ctx_input_name(ctx, 0), (long long)axis);
    int64_t odims[OTTER_MAX_RANK];
    memcpy(odims, x->dims, sizeof(int64_t) * (size_t)x->rank);
    odims[axis] = k;
    otter_tensor *yv = ot_ctx_output(ctx, 0, x->dtype, x->rank, odims);
    if (!yv) return ctx->output_status;
    otter_tensor *yi = ot_ctx_output(ctx, 1, OTTER_DTYPE_INT64, x->rank, odims);
    if (!yi) return ctx->output_status;
    if (k == 0 || outer * inner == 0) return OTTER_OK;
    topk_item *items = ot_malloc(sizeof(topk_item) * (size_t)r);
    if (!items) return OT_NOMEM();
    size_t es = otter_dtype_size(x->dtype);
    int64_t *idx = yi->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            for (int64_t q = 0; q < r; q++) {
                items[q].v = ot_get_f64(x->data, x->dtype, (o * r + q) * inner + i);
                items[q].i = q;
            }
            qsort(items, (size_t)r, sizeof *items, largest ? topk_cmp_largest : topk_cmp_smallest);
            for (int64_t q = 0; q < k; q++) {
                int64_t dst = (o * k + q) * inner + i, src = (o * r + items[q].i) * inner + i;
                memcpy((char *)yv->data + (size_t)dst * es, (const char *)x->data + (size_t)src * es, es);
                idx[dst] = items[q].i;
            }
        }
    ot_free(items);
    return OTTER_OK;
}
