#include "runtime/ops/broadcast.h"

#include <math.h>
#include <stdio.h>

#include "ops/shape_math.h"

/* ---- broadcasting ------------------------------------------------------------------------ */

const char *ot_shape_str(char *buf, size_t size, int rank, const int64_t *dims) {
    size_t pos = 0;
    if (size == 0) return buf;
    buf[0] = '\0';
    pos += (size_t)snprintf(buf + pos, size - pos, "[");
    for (int i = 0; i < rank && pos < size; i++)
        pos += (size_t)snprintf(buf + pos, size - pos, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (pos < size) snprintf(buf + pos, size - pos, "]");
    return buf;
}

bool ot_broadcast_shape2(int ra, const int64_t *da, int rb, const int64_t *db, int *rank, int64_t *dims) {
    int r = ra > rb ? ra : rb;
    int64_t out[OTTER_MAX_RANK];
    for (int i = 0; i < r; i++) {
        int ia = i - (r - ra), ib = i - (r - rb);
        if (!ot_broadcast_dim(ia >= 0 ? da[ia] : 1, ib >= 0 ? db[ib] : 1, &out[i])) return false;
    }
    *rank = r;
    memcpy(dims, out, sizeof(int64_t) * (size_t)r);
    return true;
}

otter_status ot_broadcast_inputs(const ot_kernel_ctx *ctx, size_t n, const size_t *input_idx, int *rank,
                                 int64_t *dims) {
    int r = 0;
    int64_t d[OTTER_MAX_RANK];
    bool first = true;
    size_t first_idx = 0;
    for (size_t k = 0; k < n; k++) {
        const otter_tensor *t = ot_ctx_input(ctx, input_idx[k]);
        if (!t) continue;
        if (first) {
            r = t->rank;
            memcpy(d, t->dims, sizeof(int64_t) * (size_t)r);
            first = false;
            first_idx = input_idx[k];
            continue;
        }
        if (!ot_broadcast_shape2(r, d, t->rank, t->dims, &r, d)) {
            char s1[256], s2[256];
            ot_shape_str(s1, sizeof s1, t->rank, t->dims);
            ot_shape_str(s2, sizeof s2, r, d);
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' shape %s does not broadcast with %s%s%zu '%s'",
                                input_idx[k], ot_ctx_input_name(ctx, input_idx[k]), s1, s2,
                                k == 1 ? " of input " : " (the broadcast of the previous inputs, from input ",
                                first_idx, ot_ctx_input_name(ctx, first_idx));
        }
    }
    if (first) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "no inputs to broadcast");
    *rank = r;
    memcpy(dims, d, sizeof(int64_t) * (size_t)r);
    return OTTER_OK;
}

void ot_bcast_init(ot_bcast *b, int out_rank, const int64_t *out_dims, int n_in, const int *in_ranks,
                   const int64_t *const *in_dims) {
    OT_ASSERT(n_in + 1 <= OT_BCAST_MAX_OPERANDS);
    int n = n_in + 1;
    int64_t st[OT_BCAST_MAX_OPERANDS][OTTER_MAX_RANK];
    int64_t numel = 1;
    for (int i = 0; i < out_rank; i++) numel *= out_dims[i];
    /* element strides of every operand in the output's index space */
    for (int k = 0; k < n; k++) {
        int rk = k == 0 ? out_rank : in_ranks[k - 1];
        const int64_t *dk = k == 0 ? out_dims : in_dims[k - 1];
        int64_t s = 1;
        for (int i = out_rank - 1; i >= 0; i--) {
            int j = i - (out_rank - rk);
            int64_t dim = j >= 0 ? dk[j] : 1;
            st[k][i] = (dim == 1 && out_dims[i] != 1) ? 0 : s;
            s *= dim;
        }
    }
    /* drop size-1 dims and merge dims contiguous for every operand */
    int r = 0;
    for (int i = 0; i < out_rank; i++) {
        if (out_dims[i] == 1) continue;
        bool merge = r > 0;
        for (int k = 0; merge && k < n; k++)
            if (b->strides[k][r - 1] != st[k][i] * out_dims[i]) merge = false;
        if (merge) {
            b->dims[r - 1] *= out_dims[i];
            for (int k = 0; k < n; k++) b->strides[k][r - 1] = st[k][i];
        } else {
            b->dims[r] = out_dims[i];
            for (int k = 0; k < n; k++) b->strides[k][r] = st[k][i];
            r++;
        }
    }
    if (r == 0) {
        b->dims[0] = 1;
        for (int k = 0; k < n; k++) b->strides[k][0] = 1;
        r = 1;
    }
    b->n = n;
    b->rank = r;
    b->numel = numel;
}

void ot_bcast_init_tensors(ot_bcast *b, const otter_tensor *out, int n_in, const otter_tensor *const *in) {
    int ranks[OT_BCAST_MAX_OPERANDS];
    const int64_t *dims[OT_BCAST_MAX_OPERANDS];
    OT_ASSERT(n_in + 1 <= OT_BCAST_MAX_OPERANDS);
    for (int k = 0; k < n_in; k++) {
        ranks[k] = in[k]->rank;
        dims[k] = in[k]->dims;
    }
    ot_bcast_init(b, out->rank, out->dims, n_in, ranks, dims);
}

void ot_bcast_walk(const ot_bcast *b, int64_t begin, int64_t end, ot_bcast_row_fn row, void *arg) {
    int r = b->rank, n = b->n;
    int64_t off[OT_BCAST_MAX_OPERANDS], step[OT_BCAST_MAX_OPERANDS];
    if (begin >= end) return;
    for (int k = 0; k < n; k++) step[k] = b->strides[k][r - 1];
    if (r == 1) {
        for (int k = 0; k < n; k++) off[k] = begin * step[k];
        row(arg, off, step, end - begin);
        return;
    }
    int64_t idx[OTTER_MAX_RANK];
    int64_t rem = begin;
    for (int d = r - 1; d >= 0; d--) {
        idx[d] = rem % b->dims[d];
        rem /= b->dims[d];
    }
    for (int k = 0; k < n; k++) {
        off[k] = 0;
        for (int d = 0; d < r; d++) off[k] += idx[d] * b->strides[k][d];
    }
    int64_t pos = begin, inner = b->dims[r - 1];
    while (pos < end) {
        int64_t len = inner - idx[r - 1];
        if (len > end - pos) len = end - pos;
        row(arg, off, step, len);
        pos += len;
        if (pos >= end) break;
        idx[r - 1] += len;
        for (int k = 0; k < n; k++) off[k] += len * step[k];
        for (int d = r - 1; d > 0 && idx[d] == b->dims[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
            for (int k = 0; k < n; k++) off[k] += b->strides[k][d - 1] - b->dims[d] * b->strides[k][d];
        }
    }
}

typedef struct {
    const ot_bcast *b;
    ot_bcast_row_fn row;
    void *arg;
} bcast_par;

static void bcast_par_range(void *arg, int64_t begin, int64_t end) {
    bcast_par *p = arg;
    ot_bcast_walk(p->b, begin, end, p->row, p->arg);
}

void ot_bcast_parallel(const ot_kernel_ctx *ctx, const ot_bcast *b, int64_t grain, ot_bcast_row_fn row, void *arg) {
    if (b->numel <= grain) {
        ot_bcast_walk(b, 0, b->numel, row, arg);
        return;
    }
    bcast_par p = {b, row, arg};
    ot_parallel_for(ctx, b->numel, grain, bcast_par_range, &p);
}

/* ---- float16 / bfloat16 ------------------------------------------------------------------ */

void ot_f16_to_f32_n(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = ot_f16_to_f32(src[i]);
}
void ot_f32_to_f16_n(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = ot_f32_to_f16(src[i]);
}
void ot_bf16_to_f32_n(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = ot_bf16_to_f32(src[i]);
}
void ot_f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = ot_f32_to_bf16(src[i]);
}

/* ---- element conversion ------------------------------------------------------------------ */

/* A second copy of the type list: a macro cannot expand itself inside its own expansion. */
/* clang-format off */
#define DST_TYPES(X)                                                                                                   \
    X(OTTER_DTYPE_FLOAT, float)                                                                                        \
    X(OTTER_DTYPE_DOUBLE, double)                                                                                      \
    X(OTTER_DTYPE_INT8, int8_t)                                                                                        \
    X(OTTER_DTYPE_INT16, int16_t)                                                                                      \
    X(OTTER_DTYPE_INT32, int32_t)                                                                                      \
    X(OTTER_DTYPE_INT64, int64_t)                                                                                      \
    X(OTTER_DTYPE_UINT8, uint8_t)                                                                                      \
    X(OTTER_DTYPE_UINT16, uint16_t)                                                                                    \
    X(OTTER_DTYPE_UINT32, uint32_t)                                                                                    \
    X(OTTER_DTYPE_UINT64, uint64_t)
/* clang-format on */

#define CONV_DST(DE, DT)                                                                                               \
    case DE: {                                                                                                         \
        DT *d = dst;                                                                                                   \
        for (int64_t i = 0; i < n; i++) d[i] = (DT)s[i];                                                               \
        return true;                                                                                                   \
    }

#define DEF_CONV_FROM(E, T, S)                                                                                         \
    static bool conv_from_##S(void *dst, otter_dtype dt, const T *s, int64_t n) {                                      \
        switch (dt) {                                                                                                  \
            DST_TYPES(CONV_DST)                                                                                        \
        case OTTER_DTYPE_BOOL: {                                                                                       \
            uint8_t *d = dst;                                                                                          \
            for (int64_t i = 0; i < n; i++) d[i] = s[i] != 0;                                                          \
            return true;                                                                                               \
        }                                                                                                              \
        default:                                                                                                       \
            return false;                                                                                              \
        }                                                                                                              \
    }
OT_FOR_NUMERIC_BOOL(DEF_CONV_FROM)

/* The in-memory C type a 4- or 2-bit integer shares (int8_t / uint8_t); t itself otherwise. */
static otter_dtype subbyte_storage(otter_dtype t) {
    if (t == OTTER_DTYPE_INT4 || t == OTTER_DTYPE_INT2) return OTTER_DTYPE_INT8;
    if (t == OTTER_DTYPE_UINT4 || t == OTTER_DTYPE_UINT2) return OTTER_DTYPE_UINT8;
    return t;
}

/* Conversions that involve a narrow type, in chunks through double (which holds every float8 /
 * float4 value and every value of the other types' float conversions exactly) or int64. */
static bool convert_narrow(void *dst, otter_dtype dt, const void *src, otter_dtype st, int64_t n, ot_narrow_mode mode) {
    enum { CHUNK = 256 };
    bool int_dst = dt != subbyte_storage(dt);
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        const uint8_t *s = (const uint8_t *)src + (size_t)i * otter_dtype_size(st);
        uint8_t *d = (uint8_t *)dst + (size_t)i * otter_dtype_size(dt);
        if (int_dst) { /* to int4/uint4/int2/uint2: through int64, keeping the low bits */
            int64_t buf[CHUNK];
            if (otter_dtype_is_narrow_float(st)) {
                for (int64_t k = 0; k < m; k++) { /* NaN and infinity (undefined in ONNX) give 0 */
                    float v = ot_narrow_to_f32(st, s[k]);
                    buf[k] = isfinite(v) ? (int64_t)v : 0;
                }
            } else if (!ot_convert(buf, OTTER_DTYPE_INT64, s, subbyte_storage(st), m)) {
                return false;
            }
            for (int64_t k = 0; k < m; k++) d[k] = (uint8_t)(int8_t)ot_subbyte_wrap(dt, buf[k]);
            continue;
        }
        double buf[CHUNK];
        if (otter_dtype_is_narrow_float(st)) {
            for (int64_t k = 0; k < m; k++) buf[k] = ot_narrow_to_f32(st, s[k]);
        } else if (!ot_convert(buf, OTTER_DTYPE_DOUBLE, s, subbyte_storage(st), m)) {
            return false;
        }
        if (otter_dtype_is_narrow_float(dt)) {
            for (int64_t k = 0; k < m; k++) d[k] = ot_narrow_from_f64(dt, buf[k], mode);
        } else if (dt == OTTER_DTYPE_FLOAT16 || dt == OTTER_DTYPE_BFLOAT16) {
            /* every float8/float4 value is a float32, so this rounds once */
            float f[CHUNK];
            for (int64_t k = 0; k < m; k++) f[k] = (float)buf[k];
            if (!ot_convert(d, dt, f, OTTER_DTYPE_FLOAT, m)) return false;
        } else if (!ot_convert(d, dt, buf, OTTER_DTYPE_DOUBLE, m)) {
            return false;
        }
    }
    return true;
}

static bool is_narrow(otter_dtype t) { return otter_dtype_is_narrow_float(t) || subbyte_storage(t) != t; }

bool ot_convert_narrow(void *dst, otter_dtype dt, const void *src, otter_dtype st, int64_t n, ot_narrow_mode mode) {
    if (st != dt && (is_narrow(st) || is_narrow(dt))) return convert_narrow(dst, dt, src, st, n, mode);
    return ot_convert(dst, dt, src, st, n);
}

bool ot_convert(void *dst, otter_dtype dt, const void *src, otter_dtype st, int64_t n) {
    if (st != dt && (is_narrow(st) || is_narrow(dt))) return convert_narrow(dst, dt, src, st, n, OT_NARROW_DEFAULT);
    if (st == dt) {
        size_t es = otter_dtype_size(st);
        if (es == 0 || st == OTTER_DTYPE_STRING) return false;
        if (dst != src) memmove(dst, src, (size_t)n * es);
        return true;
    }
    bool half_src = st == OTTER_DTYPE_FLOAT16 || st == OTTER_DTYPE_BFLOAT16;
    bool half_dst = dt == OTTER_DTYPE_FLOAT16 || dt == OTTER_DTYPE_BFLOAT16;
    if (half_src || half_dst) {
        /* through float, in chunks */
        float buf[512];
        size_t ses = otter_dtype_size(st), des = otter_dtype_size(dt);
        for (int64_t i = 0; i < n; i += 512) {
            int64_t m = n - i < 512 ? n - i : 512;
            const char *s = (const char *)src + (size_t)i * ses;
            char *d = (char *)dst + (size_t)i * des;
            if (st == OTTER_DTYPE_FLOAT16)
                ot_f16_to_f32_n((const uint16_t *)s, buf, m);
            else if (st == OTTER_DTYPE_BFLOAT16)
                ot_bf16_to_f32_n((const uint16_t *)s, buf, m);
            else if (!ot_convert(buf, OTTER_DTYPE_FLOAT, s, st, m))
                return false;
            if (dt == OTTER_DTYPE_FLOAT16)
                ot_f32_to_f16_n(buf, (uint16_t *)d, m);
            else if (dt == OTTER_DTYPE_BFLOAT16)
                ot_f32_to_bf16_n(buf, (uint16_t *)d, m);
            else if (!ot_convert(d, dt, buf, OTTER_DTYPE_FLOAT, m))
                return false;
        }
        return true;
    }
#define CONV_SRC(E, T, S)                                                                                              \
    case E:                                                                                                            \
        return conv_from_##S(dst, dt, (const T *)src, n);
    switch (st) {
        OT_FOR_NUMERIC_BOOL(CONV_SRC)
    default:
        return false;
    }
#undef CONV_SRC
}

int64_t ot_get_i64(const void *data, otter_dtype t, int64_t i) {
#define GET(E, T, S)                                                                                                   \
    case E:                                                                                                            \
        return (int64_t)((const T *)data)[i];
    switch (t) {
        OT_FOR_INTS(GET)
    case OTTER_DTYPE_BOOL:
    case OTTER_DTYPE_UINT4:
    case OTTER_DTYPE_UINT2:
        return ((const uint8_t *)data)[i];
    case OTTER_DTYPE_INT4:
    case OTTER_DTYPE_INT2:
        return ((const int8_t *)data)[i];
    default:
        return (int64_t)ot_get_f64(data, t, i);
    }
#undef GET
}

void ot_set_f64(void *data, otter_dtype t, int64_t i, double v) {
#define SET(E, T, S)                                                                                                   \
    case E:                                                                                                            \
        ((T *)data)[i] = (T)v;                                                                                         \
        return;
    switch (t) {
        OT_FOR_NUMERIC(SET)
    case OTTER_DTYPE_BOOL:
        ((uint8_t *)data)[i] = v != 0;
        return;
    case OTTER_DTYPE_FLOAT16:
        ((uint16_t *)data)[i] = ot_f32_to_f16((float)v);
        return;
    case OTTER_DTYPE_BFLOAT16:
        ((uint16_t *)data)[i] = ot_f32_to_bf16((float)v);
        return;
    case OTTER_DTYPE_INT4:
    case OTTER_DTYPE_INT2:
    case OTTER_DTYPE_UINT4:
    case OTTER_DTYPE_UINT2:
        ((uint8_t *)data)[i] = (uint8_t)(int8_t)ot_subbyte_wrap(t, (int64_t)v);
        return;
    default:
        if (otter_dtype_is_narrow_float(t)) ((uint8_t *)data)[i] = ot_narrow_from_f64(t, v, OT_NARROW_DEFAULT);
        return;
    }
#undef SET
}

otter_status ot_ctx_input_ints(const ot_kernel_ctx *ctx, size_t which, int64_t *out, int64_t max, int64_t *count) {
    const otter_tensor *t = ot_ctx_input(ctx, which);
    if (!t) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is missing", which);
    if (t->dtype != OTTER_DTYPE_INT64 && t->dtype != OTTER_DTYPE_INT32)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' must be int32 or int64, not %s", which,
                            ot_ctx_input_name(ctx, which), otter_dtype_name(t->dtype));
    int64_t n = otter_tensor_numel(t);
    if (n > max)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' has %lld elements, at most %lld allowed", which,
                            ot_ctx_input_name(ctx, which), (long long)n, (long long)max);
    for (int64_t i = 0; i < n; i++)
        out[i] = t->dtype == OTTER_DTYPE_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
    *count = n;
    return OTTER_OK;
}

otter_status ot_ctx_ints_attr(const ot_kernel_ctx *ctx, const char *name, int64_t n, int64_t *out, bool *present) {
    const otter_attr *a = otter_node_attr(ctx->node, name);
    *present = false;
    if (!a || a->n_ints == 0) return OTTER_OK;
    if ((int64_t)a->n_ints != n)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute '%s' has %zu values, expected %lld", name, a->n_ints,
                            (long long)n);
    memcpy(out, a->ints, sizeof(int64_t) * (size_t)n);
    *present = true;
    return OTTER_OK;
}
