/* Linear quantization: QuantizeLinear, DequantizeLinear (per tensor, per axis, and blocked since
 * opset 21) and DynamicQuantizeLinear.
 *
 *   QuantizeLinear:   y = saturate(round_half_even(x / scale) + zero_point)      (integer y)
 *                     y = cast(x / scale + zero_point, saturate)                  (float8 / float4 y)
 *   DequantizeLinear: y = (x - zero_point) * scale
 * The scale is a scalar (per tensor), a 1-D tensor of dims[axis] values (per axis), or, with
 * block_size > 0, x's shape with dims[axis] divided by block_size (rounded up). The quantized
 * types are uint8, int8, uint16, int16, uint4, int4, uint2, int2 (integers, saturated to their
 * range), the float8 formats and float4e2m1 (rounded to nearest even through core/float_formats,
 * with QuantizeLinear's saturate attribute), and int32 for DequantizeLinear's input. Arithmetic is
 * single precision for float inputs, as in ONNX's reference; from opset 23 QuantizeLinear divides in
 * the scale's type or the one its 'precision' attribute names, and DequantizeLinear multiplies in
 * its output type (float16 / bfloat16 operands rounded to it). */
#include <math.h>

#include "runtime/ops/kernels.h"
#include "runtime/ops/broadcast.h"

static bool quant_int_type(otter_dtype t) {
    return t == OTTER_DTYPE_UINT8 || t == OTTER_DTYPE_INT8 || t == OTTER_DTYPE_UINT16 || t == OTTER_DTYPE_INT16 ||
           t == OTTER_DTYPE_UINT4 || t == OTTER_DTYPE_INT4 || t == OTTER_DTYPE_UINT2 || t == OTTER_DTYPE_INT2;
}

/* The quantized types: integers and the float8 / float4 formats (not e8m0, which only scales). */
static bool quant_type(otter_dtype t) {
    return quant_int_type(t) || (otter_dtype_is_narrow_float(t) && t != OTTER_DTYPE_FLOAT8E8M0);
}

static void quant_range(otter_dtype t, double *lo, double *hi) {
    switch (t) {
    case OTTER_DTYPE_UINT8:
        *lo = 0, *hi = 255;
        break;
    case OTTER_DTYPE_INT8:
        *lo = -128, *hi = 127;
        break;
    case OTTER_DTYPE_UINT16:
        *lo = 0, *hi = 65535;
        break;
    case OTTER_DTYPE_INT16:
        *lo = -32768, *hi = 32767;
        break;
    default: { /* 4- and 2-bit */
        int64_t l, h;
        ot_subbyte_range(t, &l, &h);
        *lo = (double)l, *hi = (double)h;
        break;
    }
    }
}

/* How element i of x finds its scale / zero point. */
typedef struct qmap {
    int64_t outer, axis_len, inner; /* x viewed as [outer, axis_len, inner] */
    int64_t block;                  /* 0: per tensor or per axis */
    bool per_tensor;
} qmap;

static inline int64_t qmap_index(const qmap *m, int64_t i) {
    if (m->per_tensor) return 0;
    int64_t in = i % m->inner, a = (i / m->inner) % m->axis_len;
    if (!m->block) return a;
    int64_t o = i / (m->inner * m->axis_len), nb = (m->axis_len + m->block - 1) / m->block;
    return (o * nb + a / m->block) * m->inner + in;
}

/* Check scale (input 1) and zero point (input 2) against x (input 0) and fill the map. */
static otter_status qmap_init(const ot_kernel_ctx *ctx, const otter_tensor *x, qmap *m) {
    const otter_tensor *s = ot_ctx_input(ctx, 1), *z = ot_ctx_input(ctx, 2);
    char a[128], b[128];
    if (z) {
        bool same = z->rank == s->rank;
        for (int k = 0; same && k < s->rank; k++) same = z->dims[k] == s->dims[k];
        if (!same && !(otter_tensor_numel(z) == 1 && otter_tensor_numel(s) == 1))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 2 '%s' shape %s differs from the scale's %s",
                                ot_ctx_input_name(ctx, 2), ot_shape_str(a, sizeof a, z->rank, z->dims),
                                ot_shape_str(b, sizeof b, s->rank, s->dims));
    }
    m->block = ctx->opset >= 21 ? ot_ctx_attr_int_or(ctx, "block_size", 0) : 0; /* from opset 21: no schema */
    m->per_tensor = m->block <= 0 && otter_tensor_numel(s) == 1 && s->rank <= 1;
    m->outer = m->axis_len = m->inner = 1;
    if (m->per_tensor) return OTTER_OK;
    int64_t axis;
    OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis));
    if (!ot_norm_axis(&axis, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'axis' %lld is out of range for rank %d",
                            (long long)axis, x->rank);
    for (int k = 0; k < x->rank; k++) {
        if (k < axis) m->outer *= x->dims[k];
        if (k > axis) m->inner *= x->dims[k];
    }
    m->axis_len = x->dims[axis];
    bool ok;
    if (m->block <= 0) {
        m->block = 0;
        ok = s->rank == 1 && s->dims[0] == m->axis_len;
    } else {
        ok = s->rank == x->rank;
        for (int k = 0; ok && k < x->rank; k++)
            ok = s->dims[k] == (k == axis ? (x->dims[k] + m->block - 1) / m->block : x->dims[k]);
    }
    if (!ok)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 '%s' shape %s does not fit input 0 shape %s (axis %lld%s)",
                            ot_ctx_input_name(ctx, 1), ot_shape_str(a, sizeof a, s->rank, s->dims),
                            ot_shape_str(b, sizeof b, x->rank, x->dims), (long long)axis, m->block ? ", blocked" : "");
    return OTTER_OK;
}

static otter_status need_float_scale(const ot_kernel_ctx *ctx, const otter_tensor *s) {
    if (!s) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 (scale) is missing");
    bool quantize = ot_streq(ctx->node->op_type, "QuantizeLinear"); /* its scale may be int32 (opset 25) */
    if (!otter_dtype_is_float(s->dtype) && s->dtype != OTTER_DTYPE_FLOAT8E8M0 &&
        !(quantize && s->dtype == OTTER_DTYPE_INT32))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 '%s' has type %s, expected a float type",
                            ot_ctx_input_name(ctx, 1), otter_dtype_name(s->dtype));
    return OTTER_OK;
}

/* ---- QuantizeLinear ------------------------------------------------------------------- */

/* v rounded to float16 / bfloat16 when t is one of them (the arithmetic types of opset 23's
 * precision rules; a float product or quotient of two such values then rounds correctly). */
static float round_to(float v, otter_dtype t) {
    if (t == OTTER_DTYPE_FLOAT16) return ot_f16_to_f32(ot_f32_to_f16(v));
    if (t == OTTER_DTYPE_BFLOAT16) return ot_bf16_to_f32(ot_f32_to_bf16(v));
    return v;
}

/* x / scale in precision prec: double in double, else in single with float16 / bfloat16 operands
 * and quotient rounded to that type. */
static double quant_divide(double x, double scale, otter_dtype prec) {
    if (prec == OTTER_DTYPE_DOUBLE) return x / scale;
    return round_to(round_to((float)x, prec) / round_to((float)scale, prec), prec);
}

/* The division's precision: from opset 23 the attribute 'precision', else the scale's type (float
 * for int32 and float8e8m0 scales); before, double when x or the scale is double, else float. */
static otter_status quant_precision(const ot_kernel_ctx *ctx, const otter_tensor *x, const otter_tensor *s,
                                    otter_dtype *prec) {
    if (ctx->opset < 23) {
        *prec =
            x->dtype == OTTER_DTYPE_DOUBLE || s->dtype == OTTER_DTYPE_DOUBLE ? OTTER_DTYPE_DOUBLE : OTTER_DTYPE_FLOAT;
        return OTTER_OK;
    }
    int64_t p = ot_ctx_attr_int_or(ctx, "precision", 0); /* no schema yet */
    *prec = p ? (otter_dtype)p : otter_dtype_is_float(s->dtype) ? s->dtype : OTTER_DTYPE_FLOAT;
    if (!otter_dtype_is_float(*prec))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'precision' (%lld) is not a float type", (long long)p);
    return OTTER_OK;
}

otter_status ot_kernel_quantize(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *s = ot_ctx_input(ctx, 1), *z = ot_ctx_input(ctx, 2);
    if (!x) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 is missing");
    OT_TRY(need_float_scale(ctx, s));
    if (!otter_dtype_is_float(x->dtype) && x->dtype != OTTER_DTYPE_INT32)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input 0 '%s' has type %s, which %s does not support",
                            ot_ctx_input_name(ctx, 0), otter_dtype_name(x->dtype), ctx->node->op_type);
    otter_dtype yt = OTTER_DTYPE_UINT8;
    if (z) {
        yt = z->dtype;
    } else if (ctx->opset >= 21) {
        const otter_attr *a = otter_node_attr(ctx->node, "output_dtype");
        if (a && a->i) yt = (otter_dtype)a->i;
    }
    if (!quant_type(yt))
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "quantizing to %s is not supported", otter_dtype_name(yt));
    qmap m;
    OT_TRY(qmap_init(ctx, x, &m));
    otter_tensor *y = ot_ctx_output(ctx, 0, yt, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(x);
    otter_dtype prec;
    OT_TRY(quant_precision(ctx, x, s, &prec));
    if (!quant_int_type(yt)) { /* float8 / float4: no rounding to integers, the cast rounds */
        ot_narrow_mode mode = OT_NARROW_DEFAULT;
        mode.saturate = ot_ctx_attr_int_or(ctx, "saturate", 1) != 0; /* from opset 19: no schema */
        uint8_t *yd = y->data;
        for (int64_t i = 0; i < n; i++) {
            int64_t k = qmap_index(&m, i);
            double v = quant_divide(ot_get_f64(x->data, x->dtype, i), ot_get_f64(s->data, s->dtype, k), prec);
            if (z) v += ot_get_f64(z->data, z->dtype, k);
            yd[i] = ot_narrow_from_f64(yt, v, mode);
        }
        return OTTER_OK;
    }
    double lo, hi;
    quant_range(yt, &lo, &hi);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = qmap_index(&m, i);
        double v = nearbyint(quant_divide(ot_get_f64(x->data, x->dtype, i), ot_get_f64(s->data, s->dtype, k), prec));
        v += z ? (double)ot_get_i64(z->data, z->dtype, k) : 0.0;
        v = isnan(v) ? 0 : v < lo ? lo : v > hi ? hi : v;
        ot_set_f64(y->data, yt, i, v);
    }
    return OTTER_OK;
}

/* ---- DequantizeLinear ----------------------------------------------------------------- */

otter_status ot_kernel_dequantize(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *s = ot_ctx_input(ctx, 1), *z = ot_ctx_input(ctx, 2);
    if (!x) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 is missing");
    OT_TRY(need_float_scale(ctx, s));
    if (!quant_type(x->dtype) && x->dtype != OTTER_DTYPE_INT32)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input 0 '%s' has type %s, which %s does not support",
                            ot_ctx_input_name(ctx, 0), otter_dtype_name(x->dtype), ctx->node->op_type);
    if (z && z->dtype != x->dtype)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 2 '%s' has type %s, input 0 has %s",
                            ot_ctx_input_name(ctx, 2), otter_dtype_name(z->dtype), otter_dtype_name(x->dtype));
    qmap m;
    OT_TRY(qmap_init(ctx, x, &m));
    otter_dtype yt = ctx->opset >= 19 ? s->dtype : OTTER_DTYPE_FLOAT;
    if (ctx->opset >= 23) { /* output_dtype: from opset 23, no schema */
        int64_t od = ot_ctx_attr_int_or(ctx, "output_dtype", 0);
        if (od) yt = (otter_dtype)od;
    }
    if (yt != OTTER_DTYPE_FLOAT && yt != OTTER_DTYPE_DOUBLE && yt != OTTER_DTYPE_FLOAT16 && yt != OTTER_DTYPE_BFLOAT16)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "output type %s (%d) is not float, double, float16 or bfloat16%s",
                            otter_dtype_name(yt), (int)yt,
                            yt == OTTER_DTYPE_FLOAT8E8M0 ? " (an e8m0 scale needs attribute 'output_dtype')" : "");
    otter_tensor *y = ot_ctx_output(ctx, 0, yt, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(x);
    bool float_x = otter_dtype_is_narrow_float(x->dtype); /* float8 / float4: (x - zp) in float */
    for (int64_t i = 0; i < n; i++) {
        int64_t k = qmap_index(&m, i);
        double sc = ot_get_f64(s->data, s->dtype, k), q;
        if (float_x)
            q = (float)ot_get_f64(x->data, x->dtype, i) - (z ? (float)ot_get_f64(z->data, z->dtype, k) : 0.0f);
        else
            q = (double)(ot_get_i64(x->data, x->dtype, i) - (z ? ot_get_i64(z->data, z->dtype, k) : 0));
        if (yt == OTTER_DTYPE_DOUBLE) /* the output type is the multiplication's */
            ot_set_f64(y->data, yt, i, q * sc);
        else
            ot_set_f64(y->data, yt, i, round_to((float)q, yt) * round_to((float)sc, yt));
    }
    return OTTER_OK;
}

/* ---- DynamicQuantizeLinear ------------------------------------------------------------ */

/* uint8 only: scale = (max(0, max x) - min(0, min x)) / 255, zero point = round(-min / scale). */
otter_status ot_kernel_dynamic_quantize(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0);
    if (!x) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 is missing");
    if (x->dtype != OTTER_DTYPE_FLOAT)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input 0 '%s' has type %s, which %s does not support",
                            ot_ctx_input_name(ctx, 0), otter_dtype_name(x->dtype), ctx->node->op_type);
    const float *xd = x->data;
    int64_t n = otter_tensor_numel(x);
    float mn = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        if (xd[i] < mn) mn = xd[i];
        if (xd[i] > mx) mx = xd[i];
    }
    float scale = (mx - mn) / 255.0f, zpf = 0;
    if (scale > 0) {
        zpf = nearbyintf(0.0f - mn / scale);
        zpf = zpf < 0 ? 0 : zpf > 255 ? 255 : zpf;
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_UINT8, x->rank, x->dims);
    otter_tensor *ys = ctx->n_outputs > 1 ? ot_ctx_output(ctx, 1, OTTER_DTYPE_FLOAT, 0, NULL) : NULL;
    otter_tensor *yz = ctx->n_outputs > 2 ? ot_ctx_output(ctx, 2, OTTER_DTYPE_UINT8, 0, NULL) : NULL;
    if (!y || (ctx->n_outputs > 1 && !ys) || (ctx->n_outputs > 2 && !yz)) return ctx->output_status;
    uint8_t *yd = y->data;
    for (int64_t i = 0; i < n; i++) {
        float v = scale > 0 ? nearbyintf(xd[i] / scale) + zpf : 0;
        yd[i] = (uint8_t)(isnan(v) ? 0 : v < 0 ? 0 : v > 255 ? 255 : v);
    }
    if (ys) *(float *)ys->data = scale;
    if (yz) *(uint8_t *)yz->data = (uint8_t)zpf;
    return OTTER_OK;
}
