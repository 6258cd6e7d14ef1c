/* Miscellaneous operators: Constant, ConstantOfShape, Cast, CastLike, Range, OneHot, EyeLike, Shape,
 * Size, Identity, Dropout, NonZero, Trilu, and the control-flow operators If and Loop (through
 * ot_ctx_run_subgraph_args: their values may be sequences and optionals) and Scan. */
#include <math.h>
#include <stdio.h>

#include "runtime/ops/kernels.h"
#include "runtime/ops/broadcast.h"
#include "core/rng.h"

/* Copy n elements of type t (deep copy for strings). */
static otter_status copy_elems(const ot_kernel_ctx *ctx, void *dst, const void *src, otter_dtype t, int64_t n) {
    if (n == 0 || dst == src) return OTTER_OK;
    if (t == OTTER_DTYPE_STRING) {
        otter_bytes *d = dst;
        const otter_bytes *s = src;
        for (int64_t i = 0; i < n; i++) {
            d[i].data = ot_strndup(s[i].data ? s[i].data : "", s[i].len);
            if (!d[i].data) return OT_NOMEM();
            d[i].len = s[i].len;
        }
        return OTTER_OK;
    }
    memcpy(dst, src, (size_t)n * otter_dtype_size(t));
    return OTTER_OK;
}

/* Output i as a copy of t. */
static otter_status output_copy(ot_kernel_ctx *ctx, size_t i, const otter_tensor *t) {
    otter_tensor *y = ot_ctx_output(ctx, i, t->dtype, t->rank, t->dims);
    if (!y) return ctx->output_status;
    return copy_elems(ctx, y->data, t->data, t->dtype, otter_tensor_numel(t));
}

/* ---- Constant ------------------------------------------------------------------------- */

otter_status ot_kernel_constant(ot_kernel_ctx *ctx) {
    const otter_node *n = ctx->node;
    for (size_t k = 0; k < n->n_attrs; k++) {
        const otter_attr *a = &n->attrs[k];
        const char *nm = a->name;
        if (ot_streq(nm, "value") && a->t) return output_copy(ctx, 0, a->t);
        if (ot_streq(nm, "value_float")) {
            otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_FLOAT, 0, NULL);
            if (!y) return ctx->output_status;
            *(float *)y->data = a->f;
            return OTTER_OK;
        }
        if (ot_streq(nm, "value_int")) {
            otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_INT64, 0, NULL);
            if (!y) return ctx->output_status;
            *(int64_t *)y->data = a->i;
            return OTTER_OK;
        }
        if (ot_streq(nm, "value_floats") || ot_streq(nm, "value_ints")) {
            bool f = nm[6] == 'f';
            int64_t len = (int64_t)(f ? a->n_floats : a->n_ints);
            otter_tensor *y = ot_ctx_output(ctx, 0, f ? OTTER_DTYPE_FLOAT : OTTER_DTYPE_INT64, 1, &len);
            if (!y) return ctx->output_status;
            if (len) memcpy(y->data, f ? (const void *)a->floats : (const void *)a->ints, (size_t)len * (f ? 4 : 8));
            return OTTER_OK;
        }
        if (ot_streq(nm, "value_string")) {
            otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_STRING, 0, NULL);
            if (!y) return ctx->output_status;
            return copy_elems(ctx, y->data, &a->s, OTTER_DTYPE_STRING, 1);
        }
        if (ot_streq(nm, "value_strings")) {
            int64_t len = (int64_t)a->n_strings;
            otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_STRING, 1, &len);
            if (!y) return ctx->output_status;
            return copy_elems(ctx, y->data, a->strings, OTTER_DTYPE_STRING, len);
        }
        if (ot_streq(nm, "sparse_value"))
            return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "attribute 'sparse_value' is not supported");
    }
    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "no value attribute (value, value_float, value_ints, ...)");
}

/* ---- ConstantOfShape ------------------------------------------------------------------- */

otter_status ot_kernel_constant_of_shape(ot_kernel_ctx *ctx) {
    int64_t dims[OTTER_MAX_RANK], rank = 0;
    OT_TRY(ot_ctx_input_ints(ctx, 0, dims, OTTER_MAX_RANK, &rank));
    for (int64_t i = 0; i < rank; i++)
        if (dims[i] < 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 '%s' holds a negative dimension %lld",
                                ot_ctx_input_name(ctx, 0), (long long)dims[i]);
    const otter_attr *a = otter_node_attr(ctx->node, "value");
    const otter_tensor *v = a ? a->t : NULL;
    if (v && otter_tensor_numel(v) != 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'value' must hold one element");
    otter_dtype dt = v ? v->dtype : OTTER_DTYPE_FLOAT;
    otter_tensor *y = ot_ctx_output(ctx, 0, dt, (int)rank, dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(y);
    if (dt == OTTER_DTYPE_STRING) {
        for (int64_t i = 0; i < n; i++) OT_TRY(copy_elems(ctx, (otter_bytes *)y->data + i, v->data, dt, 1));
        return OTTER_OK;
    }
    size_t es = otter_dtype_size(dt), total = (size_t)n * es;
    static const char zero[16];
    if (!v || memcmp(v->data, zero, es) == 0) { /* the usual zeros: one memset */
        memset(y->data, 0, total);
        return OTTER_OK;
    }
    /* Fill by doubling: one element, then copies of what is already there. */
    char *d = y->data;
    if (!total) return OTTER_OK;
    memcpy(d, v->data, es);
    for (size_t done = es; done < total;) {
        size_t chunk = done < total - done ? done : total - done;
        memcpy(d + done, d, chunk);
        done += chunk;
    }
    return OTTER_OK;
}

/* ---- Cast / CastLike ------------------------------------------------------------------- */

static bool castable(otter_dtype t) {
    return t != OTTER_DTYPE_UNDEFINED && t != OTTER_DTYPE_COMPLEX64 && t != OTTER_DTYPE_COMPLEX128 &&
           t < OTTER_DTYPE_COUNT_;
}

/* Shortest decimal that reads back to the same value (numpy's repr style: "1.0", "0.5", "1e-05"). */
static void format_number(char *buf, size_t size, double v, bool single) {
    if (isnan(v)) {
        snprintf(buf, size, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, size, v > 0 ? "inf" : "-inf");
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, size, "%.*g", p, v);
        if (single ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".e")) {
        size_t len = strlen(buf);
        if (len + 2 < size) memcpy(buf + len, ".0", 3);
    }
}

/* Cast's saturate (opset 19) and round_mode (opset 25) for float8 / float4 outputs. */
static otter_status cast_mode(const ot_kernel_ctx *ctx, ot_narrow_mode *mode) {
    *mode = OT_NARROW_DEFAULT;
    if (ctx->opset < 19) return OTTER_OK;
    mode->saturate = ot_ctx_attr_int_or(ctx, "saturate", 1) != 0;
    if (ctx->opset < 25) return OTTER_OK;
    const char *round = ot_ctx_attr_string_or(ctx, "round_mode", "up");
    if (ot_streq(round, "up"))
        mode->e8m0_round = OT_E8M0_UP;
    else if (ot_streq(round, "down"))
        mode->e8m0_round = OT_E8M0_DOWN;
    else if (ot_streq(round, "nearest"))
        mode->e8m0_round = OT_E8M0_NEAREST;
    else
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'round_mode' is \"%s\", not up, down or nearest", round);
    return OTTER_OK;
}

static otter_status cast_to(ot_kernel_ctx *ctx, otter_dtype to) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    ot_narrow_mode mode;
    OT_TRY(cast_mode(ctx, &mode));
    if (!castable(x->dtype)) return ot_ctx_bad_type(ctx, 0, x->dtype);
    if (!castable(to))
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "cannot cast to type %s (%d)", otter_dtype_name(to), (int)to);
    otter_tensor *y = ot_ctx_output(ctx, 0, to, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(x);
    if (n == 0) return OTTER_OK;
    if (x->dtype == OTTER_DTYPE_STRING && to == OTTER_DTYPE_STRING) return copy_elems(ctx, y->data, x->data, to, n);
    if (x->dtype == OTTER_DTYPE_STRING) {
        const otter_bytes *s = x->data;
        for (int64_t i = 0; i < n; i++) {
            const char *str = s[i].data ? s[i].data : "";
            char *end;
            double v;
            if (to == OTTER_DTYPE_INT64 || to == OTTER_DTYPE_INT32 || to == OTTER_DTYPE_INT16 ||
                to == OTTER_DTYPE_INT8) {
                long long iv = strtoll(str, &end, 10);
                if (end != str && *end == '\0') {
                    int64_t i64 = iv;
                    ot_convert((char *)y->data + (size_t)i * otter_dtype_size(to), to, &i64, OTTER_DTYPE_INT64, 1);
                    continue;
                }
            }
            v = strtod(str, &end);
            if (end == str)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 '%s' element %lld \"%s\" is not a number",
                                    ot_ctx_input_name(ctx, 0), (long long)i, str);
            if (to == OTTER_DTYPE_FLOAT) { /* parse as float directly: double rounding can differ */
                ((float *)y->data)[i] = strtof(str, NULL);
                continue;
            }
            ot_convert_narrow((char *)y->data + (size_t)i * otter_dtype_size(to), to, &v, OTTER_DTYPE_DOUBLE, 1, mode);
        }
        return OTTER_OK;
    }
    if (to == OTTER_DTYPE_STRING) {
        otter_bytes *d = y->data;
        bool single = x->dtype == OTTER_DTYPE_FLOAT || x->dtype == OTTER_DTYPE_FLOAT16 ||
                      x->dtype == OTTER_DTYPE_BFLOAT16 || otter_dtype_is_narrow_float(x->dtype);
        for (int64_t i = 0; i < n; i++) {
            char buf[64];
            if (otter_dtype_is_float(x->dtype) || otter_dtype_is_narrow_float(x->dtype))
                format_number(buf, sizeof buf, ot_get_f64(x->data, x->dtype, i), single);
            else if (x->dtype == OTTER_DTYPE_BOOL)
                snprintf(buf, sizeof buf, "%s", ((const uint8_t *)x->data)[i] ? "True" : "False");
            else if (x->dtype == OTTER_DTYPE_UINT64)
                snprintf(buf, sizeof buf, "%llu", (unsigned long long)((const uint64_t *)x->data)[i]);
            else
                snprintf(buf, sizeof buf, "%lld", (long long)ot_get_i64(x->data, x->dtype, i));
            d[i].data = ot_strdup(buf);
            if (!d[i].data) return OT_NOMEM();
            d[i].len = strlen(buf);
        }
        return OTTER_OK;
    }
    if (to == OTTER_DTYPE_BFLOAT16 && x->dtype == OTTER_DTYPE_FLOAT && ctx->opset < 19) {
        /* Before opset 19 (which added rounding modes) onnx's reference Cast truncates float32 to
         * bfloat16 (keeps the upper 16 bits); the backend tests expect that. NaN stays NaN. */
        const uint32_t *src = x->data;
        uint16_t *dst = y->data;
        for (int64_t i = 0; i < n; i++)
            dst[i] =
                (src[i] & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((src[i] >> 16) | 0x40u) : (uint16_t)(src[i] >> 16);
        return OTTER_OK;
    }
    if (!ot_convert_narrow(y->data, to, x->data, x->dtype, n, mode))
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "cannot cast %s to %s", otter_dtype_name(x->dtype),
                            otter_dtype_name(to));
    return OTTER_OK;
}

otter_status ot_kernel_cast(ot_kernel_ctx *ctx) {
    int64_t to;
    OT_TRY(ot_ctx_attr_int(ctx, "to", &to));
    if (to <= 0 || to >= OTTER_DTYPE_COUNT_)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'to' (%lld) is not a known type", (long long)to);
    return cast_to(ctx, (otter_dtype)to);
}

otter_status ot_kernel_castlike(ot_kernel_ctx *ctx) {
    const otter_tensor *like;
    OT_TRY(ot_ctx_need_input(ctx, 1, &like));
    return cast_to(ctx, like->dtype);
}

/* ---- BitCast ------------------------------------------------------------------------- */

/* The bits reinterpreted as 'to' of the same width. The 4- and 2-bit types are one element per
 * byte in memory with different extensions (int4 sign-extended, uint4 / float4e2m1 zero-extended),
 * so they go through their low bits; every other pair is a byte copy (little-endian, as ONNX says). */
otter_status ot_kernel_bitcast(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    const otter_attr *a = otter_node_attr(ctx->node, "to"); /* required; opset 26 */
    if (!a || a->type != OTTER_ATTR_INT)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'to' (an int) is required");
    if (a->i <= 0 || a->i >= OTTER_DTYPE_COUNT_ || a->i == OTTER_DTYPE_STRING)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'to' (%lld) is not a non-string element type",
                            (long long)a->i);
    otter_dtype to = (otter_dtype)a->i;
    if (x->dtype == OTTER_DTYPE_STRING) return ot_ctx_bad_type(ctx, 0, x->dtype);
    if (otter_dtype_bits(x->dtype) != otter_dtype_bits(to))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 '%s' is %s (%d bits), 'to' is %s (%d bits)",
                            ot_ctx_input_name(ctx, 0), otter_dtype_name(x->dtype), otter_dtype_bits(x->dtype),
                            otter_dtype_name(to), otter_dtype_bits(to));
    otter_tensor *y = ot_ctx_output(ctx, 0, to, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(x);
    if (!ot_dtype_packed(to)) return copy_elems(ctx, y->data, x->data, to, n);
    unsigned mask = (1u << otter_dtype_bits(to)) - 1;
    const uint8_t *s = x->data;
    uint8_t *d = y->data;
    for (int64_t i = 0; i < n; i++) d[i] = (uint8_t)(int8_t)ot_subbyte_wrap(to, (int64_t)(s[i] & mask));
    return OTTER_OK;
}

/* ---- Range ----------------------------------------------------------------------------- */

otter_status ot_kernel_range(ot_kernel_ctx *ctx) {
    const otter_tensor *s, *l, *d;
    OT_TRY(ot_ctx_need_input(ctx, 0, &s));
    OT_TRY(ot_ctx_need_input(ctx, 1, &l));
    OT_TRY(ot_ctx_need_input(ctx, 2, &d));
    const otter_tensor *in[3] = {s, l, d};
    for (size_t i = 0; i < 3; i++) {
        if (otter_tensor_numel(in[i]) != 1)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' must be a scalar", i,
                                ot_ctx_input_name(ctx, i));
        if (in[i]->dtype != s->dtype)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' has type %s, input 0 has %s", i,
                                ot_ctx_input_name(ctx, i), otter_dtype_name(in[i]->dtype), otter_dtype_name(s->dtype));
    }
    otter_dtype t = s->dtype;
    int64_t n;
    if (otter_dtype_is_float(t)) {
        double a = ot_get_f64(s->data, t, 0), b = ot_get_f64(l->data, t, 0), st = ot_get_f64(d->data, t, 0);
        if (st == 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 2 '%s' (delta) is zero", ot_ctx_input_name(ctx, 2));
        double cnt = ceil((b - a) / st);
        n = cnt > 0 ? (int64_t)cnt : 0;
        otter_tensor *y = ot_ctx_output(ctx, 0, t, 1, &n);
        if (!y) return ctx->output_status;
        if (t == OTTER_DTYPE_FLOAT) {
            float fa = *(const float *)s->data, fs = *(const float *)d->data;
            for (int64_t i = 0; i < n; i++) ((float *)y->data)[i] = fa + (float)i * fs;
        } else {
            for (int64_t i = 0; i < n; i++) ot_set_f64(y->data, t, i, a + (double)i * st);
        }
        return OTTER_OK;
    }
    if (t != OTTER_DTYPE_INT16 && t != OTTER_DTYPE_INT32 && t != OTTER_DTYPE_INT64) return ot_ctx_bad_type(ctx, 0, t);
    int64_t a = ot_get_i64(s->data, t, 0), b = ot_get_i64(l->data, t, 0), st = ot_get_i64(d->data, t, 0);
    if (st == 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 2 '%s' (delta) is zero", ot_ctx_input_name(ctx, 2));
    int64_t diff = b - a;
    n = diff / st + ((diff % st) != 0 && ((diff > 0) == (st > 0)) ? 1 : 0);
    if (n < 0) n = 0;
    otter_tensor *y = ot_ctx_output(ctx, 0, t, 1, &n);
    if (!y) return ctx->output_status;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = a + i * st;
        ot_convert((char *)y->data + (size_t)i * otter_dtype_size(t), t, &v, OTTER_DTYPE_INT64, 1);
    }
    return OTTER_OK;
}

/* ---- OneHot ---------------------------------------------------------------------------- */

otter_status ot_kernel_onehot(ot_kernel_ctx *ctx) {
    const otter_tensor *ind, *dep, *val;
    OT_TRY(ot_ctx_need_input(ctx, 0, &ind));
    OT_TRY(ot_ctx_need_input(ctx, 1, &dep));
    OT_TRY(ot_ctx_need_input(ctx, 2, &val));
    if (otter_tensor_numel(dep) != 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 '%s' (depth) must hold one value",
                            ot_ctx_input_name(ctx, 1));
    if (otter_tensor_numel(val) != 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 2 '%s' (values) must hold two values [off, on], has %lld",
                            ot_ctx_input_name(ctx, 2), (long long)otter_tensor_numel(val));
    if (val->dtype == OTTER_DTYPE_STRING || !castable(val->dtype)) return ot_ctx_bad_type(ctx, 2, val->dtype);
    if (!castable(ind->dtype) || ind->dtype == OTTER_DTYPE_STRING) return ot_ctx_bad_type(ctx, 0, ind->dtype);
    int64_t depth = (int64_t)ot_get_f64(dep->data, dep->dtype, 0);
    if (depth < 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 '%s' (depth) is %lld, must be positive",
                            ot_ctx_input_name(ctx, 1), (long long)depth);
    int orank = ind->rank + 1;
    if (orank > OTTER_MAX_RANK) return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "output rank above %d", OTTER_MAX_RANK);
    int64_t axis;
    OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis));
    int64_t ax = axis;
    if (!ot_norm_axis(&ax, orank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'axis' %lld is out of range for output rank %d",
                            (long long)axis, orank);
    int64_t odims[OTTER_MAX_RANK];
    for (int i = 0, k = 0; i < orank; i++) odims[i] = i == ax ? depth : ind->dims[k++];
    otter_tensor *y = ot_ctx_output(ctx, 0, val->dtype, orank, odims);
    if (!y) return ctx->output_status;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= ind->dims[i];
    for (int i = (int)ax; i < ind->rank; i++) inner *= ind->dims[i];
    size_t es = otter_dtype_size(val->dtype);
    const char *off = val->data, *on = (const char *)val->data + es;
    int64_t n = otter_tensor_numel(y);
    for (int64_t i = 0; i < n; i++) memcpy((char *)y->data + (size_t)i * es, off, es);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t idx = ot_get_i64(ind->data, ind->dtype, o * inner + i);
            if (idx < 0) idx += depth;
            if (idx < 0 || idx >= depth) continue;
            memcpy((char *)y->data + (size_t)((o * depth + idx) * inner + i) * es, on, es);
        }
    return OTTER_OK;
}

/* ---- EyeLike, Trilu -------------------------------------------------------------------- */

otter_status ot_kernel_eyelike(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (x->rank != 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 '%s' must have rank 2, has %d", ot_ctx_input_name(ctx, 0),
                            x->rank);
    int64_t dt = ot_ctx_attr_int_or(ctx, "dtype", x->dtype); /* no schema default: the input's type */
    if (dt <= 0 || dt >= OTTER_DTYPE_COUNT_ || dt == OTTER_DTYPE_STRING || !castable((otter_dtype)dt))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'dtype' %lld is not a supported type", (long long)dt);
    int64_t k;
    OT_TRY(ot_ctx_attr_int(ctx, "k", &k));
    otter_tensor *y = ot_ctx_output(ctx, 0, (otter_dtype)dt, 2, x->dims);
    if (!y) return ctx->output_status;
    memset(y->data, 0, otter_tensor_nbytes(y));
    for (int64_t i = 0; i < x->dims[0]; i++) {
        int64_t j = i + k;
        if (j >= 0 && j < x->dims[1]) ot_set_f64(y->data, (otter_dtype)dt, i * x->dims[1] + j, 1.0);
    }
    return OTTER_OK;
}

otter_status ot_kernel_trilu(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (x->rank < 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 '%s' must have rank >= 2, has %d",
                            ot_ctx_input_name(ctx, 0), x->rank);
    if (x->dtype == OTTER_DTYPE_STRING || !castable(x->dtype)) return ot_ctx_bad_type(ctx, 0, x->dtype);
    int64_t k = 0, nk = 0;
    if (ot_ctx_input(ctx, 1)) OT_TRY(ot_ctx_input_ints(ctx, 1, &k, 1, &nk));
    int64_t upper;
    OT_TRY(ot_ctx_attr_int(ctx, "upper", &upper));
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1], mat = rows * cols;
    int64_t batch = mat ? otter_tensor_numel(x) / mat : 0;
    size_t es = otter_dtype_size(x->dtype);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < rows; i++) {
            const char *src = (const char *)x->data + (size_t)(b * mat + i * cols) * es;
            char *dst = (char *)y->data + (size_t)(b * mat + i * cols) * es;
            for (int64_t j = 0; j < cols; j++) {
                bool keep = upper ? j - i >= k : j - i <= k;
                if (keep)
                    memmove(dst + (size_t)j * es, src + (size_t)j * es, es);
                else
                    memset(dst + (size_t)j * es, 0, es);
            }
        }
    return OTTER_OK;
}

/* ---- Shape, Size, Identity ------------------------------------------------------------- */

otter_status ot_kernel_shape(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    int64_t r = x->rank, start = 0, end = r;
    if (ctx->opset >= 15) {
        OT_TRY(ot_ctx_attr_int(ctx, "start", &start));
        end = ot_ctx_attr_int_or(ctx, "end", r); /* no schema default: up to the rank */
        if (start < 0) start += r;
        if (end < 0) end += r;
        start = start < 0 ? 0 : (start > r ? r : start);
        end = end < 0 ? 0 : (end > r ? r : end);
    }
    int64_t n = end > start ? end - start : 0;
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_INT64, 1, &n);
    if (!y) return ctx->output_status;
    for (int64_t i = 0; i < n; i++) ((int64_t *)y->data)[i] = x->dims[start + i];
    return OTTER_OK;
}

otter_status ot_kernel_size(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_INT64, 0, NULL);
    if (!y) return ctx->output_status;
    *(int64_t *)y->data = otter_tensor_numel(x);
    return OTTER_OK;
}

otter_status ot_kernel_identity(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    return output_copy(ctx, 0, x);
}

/* ---- Dropout --------------------------------------------------------------------------- */

/* splitmix64: a small seeded generator for training-mode masks. */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

otter_status ot_kernel_dropout(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (!otter_dtype_is_float(x->dtype)) return ot_ctx_bad_type(ctx, 0, x->dtype);
    double ratio = 0.5;
    bool training = false;
    if (ctx->opset >= 12) {
        const otter_tensor *r = ot_ctx_input(ctx, 1), *t = ot_ctx_input(ctx, 2);
        if (r) ratio = ot_get_f64(r->data, r->dtype, 0);
        if (t) training = ((const uint8_t *)t->data)[0] != 0;
    } else {
        float ratio_attr;
        OT_TRY(ot_ctx_attr_float(ctx, "ratio", &ratio_attr));
        ratio = ratio_attr;
        if (ctx->opset < 7) { /* is_test is gone from Dropout-7 */
            int64_t is_test;
            OT_TRY(ot_ctx_attr_int(ctx, "is_test", &is_test));
            training = is_test == 0;
        }
    }
    if (ratio < 0 || ratio >= 1) {
        if (training || ratio < 0 || ratio > 1)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "ratio %g is outside [0, 1)", ratio);
    }
    int64_t n = otter_tensor_numel(x);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    otter_tensor *mask = NULL;
    if (ctx->n_outputs > 1) {
        otter_dtype mt = ctx->opset >= 10 ? OTTER_DTYPE_BOOL : x->dtype;
        mask = ot_ctx_output(ctx, 1, mt, x->rank, x->dims);
        if (!mask) return ctx->output_status;
    }
    if (!training || ratio == 0) {
        if (y->data != x->data) memcpy(y->data, x->data, otter_tensor_nbytes(x));
        if (mask) {
            if (mask->dtype == OTTER_DTYPE_BOOL)
                memset(mask->data, 1, (size_t)n);
            else
                for (int64_t i = 0; i < n; i++) ot_set_f64(mask->data, mask->dtype, i, 1.0);
        }
        return OTTER_OK;
    }
    /* no schema default: without a seed each run draws a fresh mask; with one, every run draws the mask
     * ONNX's reference implementation draws, numpy's RandomState(seed).uniform(0, 1, shape) >= ratio */
    const otter_attr *seed = otter_node_attr(ctx->node, "seed");
    ot_mt19937 mt;
    if (seed) ot_mt19937_seed(&mt, (uint32_t)ot_ctx_attr_int_or(ctx, "seed", 0));
    static _Thread_local uint64_t counter;
    uint64_t state = 0x6f74746572ull ^ ((uint64_t)(uintptr_t)&state + ++counter * 0x9e3779b97f4a7c15ull);
    double scale = 1.0 / (1.0 - ratio);
    for (int64_t i = 0; i < n; i++) {
        double u = seed ? ot_mt19937_uniform(&mt) : (double)(splitmix64(&state) >> 11) * (1.0 / 9007199254740992.0);
        bool keep = u >= ratio;
        double v = keep ? ot_get_f64(x->data, x->dtype, i) * scale : 0.0;
        ot_set_f64(y->data, y->dtype, i, v);
        if (mask) ot_set_f64(mask->data, mask->dtype, i, keep ? 1.0 : 0.0);
    }
    return OTTER_OK;
}

/* ---- NonZero --------------------------------------------------------------------------- */

otter_status ot_kernel_nonzero(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (x->dtype == OTTER_DTYPE_STRING || !castable(x->dtype)) return ot_ctx_bad_type(ctx, 0, x->dtype);
    int64_t n = otter_tensor_numel(x), nnz = 0;
    for (int64_t i = 0; i < n; i++) nnz += ot_get_f64(x->data, x->dtype, i) != 0;
    int r = x->rank ? x->rank : 1;
    int64_t dims[2] = {x->rank, nnz};
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_INT64, 2, dims);
    if (!y) return ctx->output_status;
    int64_t *out = y->data, k = 0;
    (void)r;
    for (int64_t i = 0; i < n; i++) {
        if (ot_get_f64(x->data, x->dtype, i) == 0) continue;
        int64_t rem = i;
        for (int d = x->rank - 1; d >= 0; d--) {
            out[d * nnz + k] = rem % x->dims[d];
            rem /= x->dims[d];
        }
        k++;
    }
    return OTTER_OK;
}

/* ---- If / Loop ------------------------------------------------------------------------- */

static const otter_graph *graph_attr(const ot_kernel_ctx *ctx, const char *name) {
    const otter_attr *a = otter_node_attr(ctx->node, name);
    return a ? a->g : NULL;
}

static void free_tensors(otter_tensor **t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        otter_tensor_free(t[i]);
        t[i] = NULL;
    }
}

otter_status ot_kernel_if(ot_kernel_ctx *ctx) {
    const otter_tensor *c;
    OT_TRY(ot_ctx_need_input(ctx, 0, &c));
    if (otter_tensor_numel(c) != 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 '%s' (cond) must hold one element",
                            ot_ctx_input_name(ctx, 0));
    bool cond = ot_get_f64(c->data, c->dtype, 0) != 0;
    const char *bn = cond ? "then_branch" : "else_branch";
    const otter_graph *g = graph_attr(ctx, bn);
    if (!g) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute '%s' is missing", bn);
    if (g->n_outputs != ctx->n_outputs)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "'%s' has %zu outputs, the node %zu", bn, g->n_outputs,
                            ctx->n_outputs);
    size_t n = ctx->n_outputs;
    otter_arg *outs = ot_calloc(n ? n : 1, sizeof *outs); /* tensors, sequences or optionals */
    if (!outs) return OT_NOMEM();
    otter_status s = ot_ctx_run_subgraph_args(ctx, g, 0, NULL, n, outs);
    for (size_t i = 0; s == OTTER_OK && i < n; i++) s = ot_ctx_output_arg(ctx, i, &outs[i]);
    for (size_t i = 0; i < n; i++) otter_arg_free(&outs[i]);
    ot_free(outs);
    return s;
}

/* A deep copy of a value (a sequence's elements become owned copies). */
static otter_status arg_clone(otter_arg *dst, otter_arg src) {
    *dst = (otter_arg){src.kind, NULL, NULL};
    if (src.kind == OTTER_ARG_TENSOR) return otter_tensor_clone(&dst->tensor, src.tensor);
    if (src.kind != OTTER_ARG_SEQUENCE) return OTTER_OK;
    OT_TRY(otter_sequence_create(&dst->sequence, otter_sequence_elem_type(src.sequence)));
    for (size_t i = 0; i < otter_sequence_length(src.sequence); i++) {
        otter_tensor *t = NULL;
        OT_TRY(otter_tensor_clone(&t, otter_sequence_at(src.sequence, i)));
        otter_status s = otter_sequence_append(dst->sequence, t);
        if (s != OTTER_OK) {
            otter_tensor_free(t);
            return s;
        }
    }
    return OTTER_OK;
}

/* Scan outputs of Loop: every iteration's value appended. */
typedef struct {
    otter_dtype dtype;
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    char *data;
    size_t bytes, cap, elem_bytes;
    int64_t count;
} scan_acc;

otter_status ot_kernel_loop(ot_kernel_ctx *ctx) {
    const otter_graph *g = graph_attr(ctx, "body");
    if (!g) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'body' is missing");
    const otter_tensor *tm = ot_ctx_input(ctx, 0), *tc = ot_ctx_input(ctx, 1);
    int64_t max_trip = tm ? ot_get_i64(tm->data, tm->dtype, 0) : INT64_MAX;
    bool cond = tc ? ot_get_f64(tc->data, tc->dtype, 0) != 0 : true;
    size_t nc = ctx->n_inputs >= 2 ? ctx->n_inputs - 2 : 0; /* loop-carried */
    if (g->n_inputs != nc + 2 || g->n_outputs < nc + 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "body has %zu inputs and %zu outputs, expected %zu and >= %zu",
                            g->n_inputs, g->n_outputs, nc + 2, nc + 1);
    size_t nscan = g->n_outputs - 1 - nc;
    if (ctx->n_outputs != nc + nscan)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "node has %zu outputs, body gives %zu", ctx->n_outputs, nc + nscan);
    otter_status s = OTTER_OK;
    /* loop-carried values may be sequences or optionals; scan outputs are tensors */
    otter_arg *carried = ot_calloc(nc + 1, sizeof *carried);
    otter_arg *in = ot_calloc(nc + 2, sizeof *in);
    otter_arg *out = ot_calloc(g->n_outputs, sizeof *out);
    scan_acc *acc = ot_calloc(nscan + 1, sizeof *acc);
    otter_tensor *iter_t = NULL, *cond_t = NULL;
    if (!carried || !in || !out || !acc) {
        s = OT_NOMEM();
        goto done;
    }
    for (size_t i = 0; i < nc; i++) {
        otter_arg v = ot_ctx_input_arg(ctx, i + 2);
        if (v.kind == OTTER_ARG_UNSET) {
            s = ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "omitted loop-carried input %zu", i + 2);
            goto done;
        }
        if ((s = arg_clone(&carried[i], v)) != OTTER_OK) goto done;
    }
    if ((s = otter_tensor_create(&iter_t, NULL, OTTER_DTYPE_INT64, 0, NULL)) != OTTER_OK) goto done;
    if ((s = otter_tensor_create(&cond_t, NULL, OTTER_DTYPE_BOOL, 0, NULL)) != OTTER_OK) goto done;
    for (int64_t it = 0; it < max_trip && cond; it++) {
        *(int64_t *)iter_t->data = it;
        *(uint8_t *)cond_t->data = cond;
        in[0] = otter_arg_of_tensor(iter_t);
        in[1] = otter_arg_of_tensor(cond_t);
        for (size_t i = 0; i < nc; i++) in[i + 2] = carried[i];
        if ((s = ot_ctx_run_subgraph_args(ctx, g, nc + 2, in, g->n_outputs, out)) != OTTER_OK) goto done;
        for (size_t k = 0; k < 1 + nscan; k++) {
            otter_arg *o = &out[k ? 1 + nc + k - 1 : 0];
            if (o->kind != OTTER_ARG_TENSOR) {
                s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "body output %zu must be a tensor", k ? 1 + nc + k - 1 : 0);
                goto done;
            }
        }
        cond = ot_get_f64(out[0].tensor->data, out[0].tensor->dtype, 0) != 0;
        otter_arg_free(&out[0]);
        for (size_t i = 0; i < nc; i++) {
            otter_arg_free(&carried[i]);
            carried[i] = out[1 + i];
            out[1 + i] = (otter_arg){0};
        }
        for (size_t k = 0; k < nscan; k++) {
            otter_tensor *v = out[1 + nc + k].tensor;
            scan_acc *a = &acc[k];
            size_t nb = otter_tensor_nbytes(v);
            if (a->count == 0) {
                a->dtype = v->dtype;
                a->rank = v->rank;
                memcpy(a->dims, v->dims, sizeof(int64_t) * (size_t)v->rank);
                a->elem_bytes = nb;
            } else if (v->dtype != a->dtype || v->rank != a->rank ||
                       memcmp(v->dims, a->dims, sizeof(int64_t) * (size_t)v->rank) != 0) {
                s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "scan output %zu changes type or shape at iteration %lld", k,
                                 (long long)it);
                goto done;
            }
            if (v->dtype == OTTER_DTYPE_STRING) {
                s = ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "string scan outputs");
                goto done;
            }
            if ((s = ot_grow((void **)&a->data, &a->cap, a->bytes + nb, 1)) != OTTER_OK) goto done;
            if (nb) memcpy(a->data + a->bytes, v->data, nb);
            a->bytes += nb;
            a->count++;
            otter_arg_free(&out[1 + nc + k]);
        }
    }
    for (size_t i = 0; i < nc && s == OTTER_OK; i++) s = ot_ctx_output_arg(ctx, i, &carried[i]);
    for (size_t k = 0; k < nscan && s == OTTER_OK; k++) {
        scan_acc *a = &acc[k];
        int64_t dims[OTTER_MAX_RANK];
        int rank = a->rank + 1;
        if (rank > OTTER_MAX_RANK) {
            s = ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "scan output rank above %d", OTTER_MAX_RANK);
            break;
        }
        dims[0] = a->count;
        memcpy(dims + 1, a->dims, sizeof(int64_t) * (size_t)a->rank);
        if (a->count == 0) rank = 1; /* no iteration: element shape unknown */
        otter_tensor *y = ot_ctx_output(ctx, nc + k, a->count ? a->dtype : OTTER_DTYPE_FLOAT, rank, dims);
        if (!y) {
            s = ctx->output_status;
            break;
        }
        if (a->bytes) memcpy(y->data, a->data, a->bytes);
    }
done:
    if (carried)
        for (size_t i = 0; i < nc; i++) otter_arg_free(&carried[i]);
    if (out)
        for (size_t i = 0; i < g->n_outputs; i++) otter_arg_free(&out[i]);
    if (acc)
        for (size_t k = 0; k < nscan; k++) ot_free(acc[k].data);
    otter_tensor_free(iter_t);
    otter_tensor_free(cond_t);
    ot_free(carried);
    ot_free(in);
    ot_free(out);
    ot_free(acc);
    return s;
}

/* ---- Scan ------------------------------------------------------------------------------ */

/* Slice t along axis at index i (the axis removed) into dst (created). */
static otter_status slice_axis(const otter_tensor *t, int axis, int64_t i, otter_tensor **dst) {
    int64_t dims[OTTER_MAX_RANK];
    int r = 0;
    for (int d = 0; d < t->rank; d++)
        if (d != axis) dims[r++] = t->dims[d];
    OT_TRY(otter_tensor_create(dst, NULL, t->dtype, r, dims));
    int64_t outer = 1, inner = 1, len = t->dims[axis];
    for (int d = 0; d < axis; d++) outer *= t->dims[d];
    for (int d = axis + 1; d < t->rank; d++) inner *= t->dims[d];
    size_t es = otter_dtype_size(t->dtype), row = (size_t)inner * es;
    for (int64_t o = 0; o < outer; o++)
        if (row)
            memcpy((char *)(*dst)->data + (size_t)o * row, (const char *)t->data + (size_t)(o * len + i) * row, row);
    return OTTER_OK;
}

/* Write e (one element of a stacked output) at position i along axis of dst. */
static void stack_axis(otter_tensor *dst, int axis, int64_t i, const otter_tensor *e) {
    int64_t outer = 1, inner = 1, len = dst->dims[axis];
    for (int d = 0; d < axis; d++) outer *= dst->dims[d];
    for (int d = axis + 1; d < dst->rank; d++) inner *= dst->dims[d];
    size_t es = otter_dtype_size(dst->dtype), row = (size_t)inner * es;
    for (int64_t o = 0; o < outer; o++)
        if (row) memcpy((char *)dst->data + (size_t)(o * len + i) * row, (const char *)e->data + (size_t)o * row, row);
}

/* One Scan (opset 9 semantics) over states[0..n) and scan inputs xs[0..m); results (created) in
 * out_states[0..n) and out_scans[0..k). */
static otter_status scan_core(ot_kernel_ctx *ctx, const otter_graph *g, size_t n, const otter_tensor *const *states,
                              size_t m, const otter_tensor *const *xs, const int64_t *in_axes, const int64_t *in_dirs,
                              size_t k, const int64_t *out_axes, const int64_t *out_dirs, otter_tensor **out_states,
                              otter_tensor **out_scans) {
    if (g->n_inputs != n + m || g->n_outputs != n + k)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "body has %zu inputs and %zu outputs, expected %zu and %zu",
                            g->n_inputs, g->n_outputs, n + m, n + k);
    int64_t len = -1;
    for (size_t j = 0; j < m; j++) {
        int64_t l = xs[j]->dims[in_axes[j]];
        if (len >= 0 && l != len)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scan input %zu has length %lld, scan input 0 has %lld", j,
                                (long long)l, (long long)len);
        len = l;
    }
    if (len < 0) len = 0;
    otter_status s = OTTER_OK;
    otter_tensor **in = ot_calloc(n + m + 1, sizeof *in), **out = ot_calloc(n + k + 1, sizeof *out);
    if (!in || !out) {
        s = OT_NOMEM();
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if ((s = otter_tensor_clone(&out_states[i], states[i])) != OTTER_OK) goto done;
    for (int64_t t = 0; t < len; t++) {
        for (size_t i = 0; i < n; i++) in[i] = out_states[i];
        for (size_t j = 0; j < m; j++) {
            int64_t pos = in_dirs[j] ? len - 1 - t : t;
            if ((s = slice_axis(xs[j], (int)in_axes[j], pos, &in[n + j])) != OTTER_OK) goto done;
        }
        if ((s = ot_ctx_run_subgraph(ctx, g, n + m, in, n + k, out)) != OTTER_OK) goto done;
        for (size_t j = 0; j < m; j++) {
            otter_tensor_free(in[n + j]);
            in[n + j] = NULL;
        }
        for (size_t i = 0; i < n; i++) {
            otter_tensor_free(out_states[i]);
            out_states[i] = out[i];
            out[i] = NULL;
        }
        for (size_t q = 0; q < k; q++) {
            otter_tensor *e = out[n + q];
            int64_t ax = out_axes[q];
            if (!ot_norm_axis(&ax, e->rank + 1)) {
                s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "scan_output_axes[%zu] = %lld is out of range", q,
                                 (long long)out_axes[q]);
                goto done;
            }
            if (!out_scans[q]) {
                int64_t dims[OTTER_MAX_RANK];
                for (int d = 0, c = 0; d <= e->rank; d++) dims[d] = d == ax ? len : e->dims[c++];
                if ((s = otter_tensor_create(&out_scans[q], NULL, e->dtype, e->rank + 1, dims)) != OTTER_OK) goto done;
            }
            stack_axis(out_scans[q], (int)ax, out_dirs[q] ? len - 1 - t : t, e);
            otter_tensor_free(e);
            out[n + q] = NULL;
        }
    }
    for (size_t q = 0; q < k; q++)
        if (!out_scans[q]) {
            int64_t zero = 0;
            if ((s = otter_tensor_create(&out_scans[q], NULL, OTTER_DTYPE_FLOAT, 1, &zero)) != OTTER_OK) goto done;
        }
done:
    if (in)
        for (size_t j = 0; j < m; j++) otter_tensor_free(in[n + j]);
    if (out) free_tensors(out, n + k);
    ot_free(in);
    ot_free(out);
    return s;
}

static otter_status scan_attr_list(const ot_kernel_ctx *ctx, const char *name, size_t count, int64_t *vals,
                                   const int *ranks) {
    const otter_attr *a = otter_node_attr(ctx->node, name);
    for (size_t i = 0; i < count; i++) vals[i] = 0;
    if (!a) return OTTER_OK;
    if (a->n_ints != count)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute '%s' has %zu values, expected %zu", name, a->n_ints,
                            count);
    for (size_t i = 0; i < count; i++) {
        vals[i] = a->ints[i];
        if (ranks && !ot_norm_axis(&vals[i], ranks[i]))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute '%s'[%zu] = %lld is out of range", name, i,
                                (long long)a->ints[i]);
    }
    return OTTER_OK;
}

otter_status ot_kernel_scan(ot_kernel_ctx *ctx) {
    const otter_graph *g = graph_attr(ctx, "body");
    if (!g) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'body' is missing");
    bool v8 = ctx->opset < 9;
    size_t first = v8 ? 1 : 0; /* opset 8: input 0 is sequence_lens */
    if (v8 && ot_ctx_input(ctx, 0))
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input 0 (sequence_lens) is not supported");
    int64_t m64;
    OT_TRY(ot_ctx_attr_int(ctx, "num_scan_inputs", &m64));
    size_t total = ctx->n_inputs - first;
    if (m64 < 1 || (size_t)m64 > total)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'num_scan_inputs' (%lld) is missing or too large",
                            (long long)m64);
    size_t m = (size_t)m64, n = total - m;
    if (ctx->n_outputs < n) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "fewer outputs than state variables");
    size_t k = ctx->n_outputs - n;
    if (n + m > 64 || k > 64) return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "more than 64 states or scan values");
    const otter_tensor *states[64], *xs[64];
    int ranks[64];
    for (size_t i = 0; i < n + m; i++) {
        const otter_tensor *t = ot_ctx_input(ctx, first + i);
        if (!t) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is missing", first + i);
        if (i < n)
            states[i] = t;
        else {
            xs[i - n] = t;
            ranks[i - n] = t->rank - (v8 ? 1 : 0);
        }
    }
    int64_t in_axes[64], in_dirs[64], out_axes[64], out_dirs[64];
    OT_TRY(scan_attr_list(ctx, v8 ? "directions" : "scan_input_directions", m, in_dirs, NULL));
    if (!v8) {
        OT_TRY(scan_attr_list(ctx, "scan_input_axes", m, in_axes, ranks));
        OT_TRY(scan_attr_list(ctx, "scan_output_axes", k, out_axes, NULL));
        OT_TRY(scan_attr_list(ctx, "scan_output_directions", k, out_dirs, NULL));
    } else {
        for (size_t j = 0; j < m; j++) in_axes[j] = 0;
        for (size_t q = 0; q < k; q++) out_axes[q] = 0, out_dirs[q] = 0;
    }
    otter_tensor *os[64] = {0}, *oc[64] = {0};
    otter_status s = OTTER_OK;
    if (!v8) {
        s = scan_core(ctx, g, n, states, m, xs, in_axes, in_dirs, k, out_axes, out_dirs, os, oc);
        for (size_t i = 0; s == OTTER_OK && i < n; i++) s = output_copy(ctx, i, os[i]);
        for (size_t q = 0; s == OTTER_OK && q < k; q++) s = output_copy(ctx, n + q, oc[q]);
        free_tensors(os, n);
        free_tensors(oc, k);
        return s;
    }
    /* opset 8: every input has a leading batch axis; scan each batch entry separately */
    int64_t batch = n ? states[0]->dims[0] : xs[0]->dims[0];
    otter_tensor *bs[64] = {0}, *bx[64] = {0}, *res_s[64] = {0}, *res_c[64] = {0};
    for (int64_t b = 0; b < batch && s == OTTER_OK; b++) {
        for (size_t i = 0; s == OTTER_OK && i < n; i++) s = slice_axis(states[i], 0, b, &bs[i]);
        for (size_t j = 0; s == OTTER_OK && j < m; j++) s = slice_axis(xs[j], 0, b, &bx[j]);
        if (s == OTTER_OK)
            s = scan_core(ctx, g, n, (const otter_tensor *const *)bs, m, (const otter_tensor *const *)bx, in_axes,
                          in_dirs, k, out_axes, out_dirs, os, oc);
        for (size_t i = 0; s == OTTER_OK && i < n + k; i++) {
            otter_tensor *e = i < n ? os[i] : oc[i - n];
            otter_tensor **dst = i < n ? &res_s[i] : &res_c[i - n];
            if (!*dst) {
                int64_t dims[OTTER_MAX_RANK];
                dims[0] = batch;
                memcpy(dims + 1, e->dims, sizeof(int64_t) * (size_t)e->rank);
                if ((s = otter_tensor_create(dst, NULL, e->dtype, e->rank + 1, dims)) != OTTER_OK) break;
            }
            stack_axis(*dst, 0, b, e);
        }
        free_tensors(bs, n);
        free_tensors(bx, m);
        free_tensors(os, n);
        free_tensors(oc, k);
    }
    for (size_t i = 0; s == OTTER_OK && i < n; i++) s = output_copy(ctx, i, res_s[i]);
    for (size_t q = 0; s == OTTER_OK && q < k; q++) s = output_copy(ctx, n + q, res_c[q]);
    free_tensors(res_s, n);
    free_tensors(res_c, k);
    return s;
}
