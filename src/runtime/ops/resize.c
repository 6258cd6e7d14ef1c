/* Resize (opset 10+) and Upsample: nearest, linear and cubic interpolation over any rank. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/nn_internal.h"
#include "runtime/ops/strided.h"

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

double ot_cubic_weight(double x, double A) {
    x = fabs(x);
    if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0;
}

static double linear_w(double x) {
    x = 1 - fabs(x);
    return x > 0 ? x : 0;
}

/* out_len: the resized length as the coordinate formulas see it (in * scale, unrounded, when
 * scales are given; onnx's reference does the same). antialias (Resize-18) stretches the linear and
 * cubic filters by 1 / scale when downscaling, so every input pixel under an output pixel counts. */
static otter_status make_taps(int mode, int ct, int nm, double A, bool exclude, bool antialias, int64_t in, int64_t out,
                              double out_len, double scale, double roi_s, double roi_e, tap_set *t) {
    /* the filter's support in taps: [start, start + n) around the left neighbour, as in onnx's reference */
    double fs = antialias && scale < 1 ? scale : 1;
    int start = mode == RM_LINEAR ? (int)floor(-1 / fs) + 1 : (int)floor(-2 / fs) + 1;
    t->n = mode == RM_NEAREST ? 1 : 2 - 2 * start;
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
            double adj = (double)out / out_len, center = (double)in / 2;
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
            continue;
        }
        /* the left neighbour and the distance to it in (0, 1]; edge pixels repeat beyond the border */
        int64_t left = (int64_t)floor(x);
        double ratio = x - (double)left, sum = 0;
        if (ratio == 0) left--, ratio = 1;
        for (int k = 0; k < t->n; k++) {
            int64_t i = left + start + k;
            double d = ((double)(start + k) - ratio) * fs;
            double wk = mode == RM_LINEAR ? linear_w(d) : ot_cubic_weight(d, A);
            if (exclude && (i < 0 || i >= in)) wk = 0;
            ix[k] = i < 0 ? 0 : i >= in ? in - 1 : i;
            w[k] = wk;
            sum += wk;
        }
        if ((exclude || fs < 1) && sum != 0)
            for (int k = 0; k < t->n; k++) w[k] /= sum;
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
    ot_contiguous_strides(r, a->in_dims, st);
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

/* What a resize computes: the output's dims and, per axis, each output coordinate's taps. */
typedef struct resize_plan {
    int rank;
    int64_t out[OTTER_MAX_RANK];
    tap_set taps[OTTER_MAX_RANK];
    double extrapolation;
} resize_plan;

static void resize_plan_free(resize_plan *p) {
    for (int i = 0; i < OTTER_MAX_RANK; i++) ot_free(p->taps[i].idx), ot_free(p->taps[i].w);
}

/* A string attribute: the schema's default for Resize / Upsample; ResizeGrad (com.microsoft, no ONNX
 * schema) takes Resize-11's defaults, which Resize has kept since, and gets the rest from its rule. */
static otter_status resize_attr(const ot_kernel_ctx *ctx, bool grad, const char *name, const char *def,
                                const char **v) {
    if (!grad) return ot_ctx_attr_string(ctx, name, v);
    *v = ot_ctx_attr_string_or(ctx, name, def);
    return OTTER_OK;
}

/* The plan of Resize (inputs X, roi, scales, sizes; Resize-10: X, scales), Upsample (X, scales; or
 * the scales attribute before opset 9) or of ResizeGrad (dY, X, roi, scales: the output dims are
 * dY's, which stand for sizes when scales are absent). */
static otter_status resize_plan_make(ot_kernel_ctx *ctx, bool upsample, bool grad, const otter_tensor *x,
                                     resize_plan *p) {
    memset(p, 0, sizeof *p);
    int r = p->rank = x->rank;
    const char *ms;
    OT_TRY(resize_attr(ctx, grad, "mode", "nearest", &ms));
    int mode = strcmp(ms, "nearest") == 0                                 ? RM_NEAREST
               : strcmp(ms, "linear") == 0 || strcmp(ms, "bilinear") == 0 ? RM_LINEAR
               : strcmp(ms, "cubic") == 0                                 ? RM_CUBIC
                                                                          : -1;
    if (mode < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown mode '%s'", ms);
    bool v11 = grad || (!upsample && ctx->opset >= 11), v18 = v11 && ctx->opset >= 18;
    int ct = CT_ASYMMETRIC, nm = NM_FLOOR;
    if (v11) {
        const char *cs;
        OT_TRY(resize_attr(ctx, grad, "coordinate_transformation_mode", "half_pixel", &cs));
        ct = strcmp(cs, "half_pixel") == 0             ? CT_HALF_PIXEL
             : strcmp(cs, "pytorch_half_pixel") == 0   ? CT_PYTORCH_HALF_PIXEL
             : strcmp(cs, "align_corners") == 0        ? CT_ALIGN_CORNERS
             : strcmp(cs, "asymmetric") == 0           ? CT_ASYMMETRIC
             : strcmp(cs, "tf_half_pixel_for_nn") == 0 ? CT_TF_HALF_PIXEL_NN
             : strcmp(cs, "tf_crop_and_resize") == 0   ? CT_TF_CROP
             : strcmp(cs, "half_pixel_symmetric") == 0 ? CT_HALF_SYM
                                                       : -1;
        if (ct < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown coordinate_transformation_mode '%s'", cs);
        const char *ns;
        OT_TRY(resize_attr(ctx, grad, "nearest_mode", "round_prefer_floor", &ns));
        nm = strcmp(ns, "round_prefer_floor") == 0  ? NM_ROUND_FLOOR
             : strcmp(ns, "round_prefer_ceil") == 0 ? NM_ROUND_CEIL
             : strcmp(ns, "floor") == 0             ? NM_FLOOR
             : strcmp(ns, "ceil") == 0              ? NM_CEIL
                                                    : -1;
        if (nm < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown nearest_mode '%s'", ns);
    }
    /* Resize-18: scales, sizes and roi may name a subset of the axes; the others keep their size */
    int axis[OTTER_MAX_RANK], na = r;
    for (int i = 0; i < r; i++) axis[i] = i;
    const otter_attr *axes = v18 ? otter_node_attr(ctx->node, "axes") : NULL;
    if (axes) {
        if (axes->type != OTTER_ATTR_INTS || axes->n_ints > (size_t)r)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'axes' must list at most %d axes", r);
        na = (int)axes->n_ints;
        bool seen[OTTER_MAX_RANK] = {false};
        for (int k = 0; k < na; k++) {
            int64_t d = axes->ints[k] < 0 ? axes->ints[k] + r : axes->ints[k];
            if (d < 0 || d >= r || seen[d])
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axes[%d] = %lld is out of range or repeated for rank %d",
                                    k, (long long)axes->ints[k], r);
            seen[d] = true;
            axis[k] = (int)d;
        }
    }
    double scales[OTTER_MAX_RANK], roi[2 * OTTER_MAX_RANK];
    int64_t *out = p->out;
    for (int i = 0; i < r; i++) roi[i] = 0, roi[r + i] = 1, scales[i] = 1, out[i] = x->dims[i];
    const otter_tensor *sc = NULL, *sz = NULL, *ro = NULL;
    size_t first = grad ? 1 : 0; /* X's index */
    if (upsample && ctx->opset < 9) {
        const otter_attr *a = otter_node_attr(ctx->node, "scales");
        if (!a || (int)a->n_floats != r)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'scales' must have %d values", r);
        for (int i = 0; i < r; i++) scales[i] = a->floats[i];
    } else {
        size_t si = first + (v11 ? 2 : 1);
        sc = ot_ctx_input(ctx, si);
        sz = v11 && !grad ? ot_ctx_input(ctx, 3) : NULL;
        ro = v11 ? ot_ctx_input(ctx, first + 1) : NULL;
        if (sc && otter_tensor_numel(sc) == 0) sc = NULL;
        if (ro && otter_tensor_numel(ro) == 0) ro = NULL;
        if (sz && otter_tensor_numel(sz) == 0) sz = NULL;
        if (!sc && !sz && !grad) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs scales or sizes");
        if (sc) {
            if (otter_tensor_numel(sc) != na || !otter_dtype_is_float(sc->dtype))
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scales '%s' must hold %d floats",
                                    ot_ctx_input_name(ctx, si), na);
            for (int k = 0; k < na; k++) scales[axis[k]] = ot_get_f64(sc->data, sc->dtype, k);
        }
        if (ro) {
            if (otter_tensor_numel(ro) != 2 * na)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "roi '%s' must hold %d values",
                                    ot_ctx_input_name(ctx, first + 1), 2 * na);
            for (int k = 0; k < na; k++)
                roi[axis[k]] = ot_get_f64(ro->data, ro->dtype, k),
                roi[r + axis[k]] = ot_get_f64(ro->data, ro->dtype, na + k);
        }
    }
    /* keep_aspect_ratio_policy (Resize-18): one scale for every resized axis, the smallest ("not_larger")
     * or the largest ("not_smaller") of sizes / input, and sizes rounded half up from it */
    const char *policy = v18 && !grad ? ot_ctx_attr_string_or(ctx, "keep_aspect_ratio_policy", "stretch") : "stretch";
    bool not_larger = strcmp(policy, "not_larger") == 0, keep = not_larger || strcmp(policy, "not_smaller") == 0;
    if (!keep && strcmp(policy, "stretch") != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown keep_aspect_ratio_policy '%s'", policy);
    const otter_tensor *dy = grad ? ctx->inputs[0] : NULL;
    bool sized = sz || (grad && !sc);
    if (sized) {
        int64_t n = r, want[OTTER_MAX_RANK];
        if (sz) {
            OT_TRY(ot_ctx_input_ints(ctx, 3, want, OTTER_MAX_RANK, &n));
            if (n != na)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "sizes '%s' must hold %d values", ot_ctx_input_name(ctx, 3),
                                    na);
        } else {
            na = r;
            for (int i = 0; i < r; i++) axis[i] = i, want[i] = dy->dims[i];
        }
        double common = not_larger ? INFINITY : -INFINITY;
        for (int k = 0; k < na; k++) {
            int d = axis[k];
            scales[d] = x->dims[d] ? (double)want[k] / (double)x->dims[d] : 1.0;
            common = not_larger ? fmin(common, scales[d]) : fmax(common, scales[d]);
            out[d] = want[k];
        }
        if (keep)
            for (int k = 0; k < na; k++)
                scales[axis[k]] = common, out[axis[k]] = (int64_t)floor(common * (double)x->dims[axis[k]] + 0.5);
    } else {
        for (int i = 0; i < r; i++) {
            if (!(scales[i] > 0)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scale %d must be > 0", i);
            out[i] = (int64_t)floor((double)x->dims[i] * (double)(float)scales[i] + 1e-9);
        }
    }
    if (grad && (dy->rank != r || memcmp(dy->dims, out, (size_t)r * sizeof(int64_t)) != 0)) {
        char b1[128], b2[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' is %s, the resize of X '%s' is %s",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(b1, sizeof b1, dy->rank, dy->dims),
                            ot_ctx_input_name(ctx, 1), ot_shape_str(b2, sizeof b2, r, out));
    }
    /* Resize-11's cubic mode and tf_crop_and_resize, which read these, are all they are for */
    float A = -0.75f, extrapolation = 0;
    int64_t exclude = 0, antialias = 0;
    if (grad) {
        A = ot_ctx_attr_float_or(ctx, "cubic_coeff_a", A);
        exclude = ot_ctx_attr_int_or(ctx, "exclude_outside", 0);
        extrapolation = ot_ctx_attr_float_or(ctx, "extrapolation_value", 0);
        antialias = ot_ctx_attr_int_or(ctx, "antialias", 0);
    } else if (v11) {
        if (ctx->opset >= 18) antialias = ot_ctx_attr_int_or(ctx, "antialias", 0);
        OT_TRY(ot_ctx_attr_float(ctx, "cubic_coeff_a", &A));
        OT_TRY(ot_ctx_attr_int(ctx, "exclude_outside", &exclude));
        OT_TRY(ot_ctx_attr_float(ctx, "extrapolation_value", &extrapolation));
    }
    p->extrapolation = extrapolation;
    for (int i = 0; i < r; i++) {
        /* dims that keep their size with scale 1 take the identity */
        bool ident = out[i] == x->dims[i] && scales[i] == 1.0 && ct != CT_TF_CROP;
        otter_status s = make_taps(ident ? RM_NEAREST : mode, ident ? CT_ASYMMETRIC : ct, ident ? NM_FLOOR : nm, A,
                                   exclude, antialias != 0, x->dims[i], out[i],
                                   sized && !keep ? (double)out[i] : (double)x->dims[i] * scales[i], scales[i], roi[i],
                                   roi[r + i], &p->taps[i]);
        if (s != OTTER_OK) {
            resize_plan_free(p);
            return s;
        }
    }
    return OTTER_OK;
}

static otter_status resize_common(ot_kernel_ctx *ctx, bool upsample) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    resize_plan p;
    OT_TRY(resize_plan_make(ctx, upsample, false, x, &p));
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, p.rank, p.out);
    int64_t ny = y ? otter_tensor_numel(y) : 0, nx = otter_tensor_numel(x);
    otter_status s = y ? OTTER_OK : ctx->output_status;
    double *X = NULL, *Y = NULL;
    if (s == OTTER_OK && ny > 0) {
        X = ot_malloc((size_t)(nx > 0 ? nx : 1) * sizeof(double));
        Y = ot_malloc((size_t)ny * sizeof(double));
        if (!X || !Y) s = OT_NOMEM();
        if (s == OTTER_OK && !ot_convert(X, OTTER_DTYPE_DOUBLE, x->data, x->dtype, nx))
            s = ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input '%s': dtype %s not supported",
                             ot_ctx_input_name(ctx, 0), otter_dtype_name(x->dtype));
    }
    if (s == OTTER_OK && ny > 0) {
        resize_args a = {.rank = p.rank,
                         .in_dims = x->dims,
                         .out_dims = p.out,
                         .taps = p.taps,
                         .X = X,
                         .Y = Y,
                         .extrapolation = p.extrapolation};
        ot_parallel_for(ctx, ny, 4096, resize_rows, &a);
        if (!otter_dtype_is_float(x->dtype))
            for (int64_t i = 0; i < ny; i++) Y[i] = nearbyint(Y[i]);
        ot_convert(y->data, y->dtype, Y, OTTER_DTYPE_DOUBLE, ny);
    }
    resize_plan_free(&p);
    ot_free(X), ot_free(Y);
    return s;
}

otter_status ot_kernel_resize(ot_kernel_ctx *ctx) { return resize_common(ctx, false); }
otter_status ot_kernel_upsample(ot_kernel_ctx *ctx) { return resize_common(ctx, true); }

typedef struct resize_grad_args {
    const resize_plan *p;
    const int64_t *st; /* X's strides */
    const double *dy;
    double *dx;
    int64_t slice; /* dY elements per task item */
} resize_grad_args;

/* dY elements [b * slice, e * slice): each added to the X elements its output read. */
static void resize_grad_slices(void *arg, int64_t b, int64_t e) {
    const resize_grad_args *a = arg;
    const resize_plan *p = a->p;
    int r = p->rank;
    for (int64_t y = b * a->slice; y < e * a->slice; y++) {
        int64_t oi[OTTER_MAX_RANK], q = y;
        for (int d = r - 1; d >= 0; d--) oi[d] = q % p->out[d], q /= p->out[d];
        bool extrap = false;
        for (int d = 0; d < r; d++) extrap |= p->taps[d].idx[oi[d] * p->taps[d].n] < 0;
        if (extrap || a->dy[y] == 0) continue;
        int k[OTTER_MAX_RANK] = {0};
        for (;;) {
            double w = a->dy[y];
            int64_t off = 0;
            for (int d = 0; d < r; d++) {
                const tap_set *t = &p->taps[d];
                w *= t->w[oi[d] * t->n + k[d]];
                off += t->idx[oi[d] * t->n + k[d]] * a->st[d];
            }
            a->dx[off] += w;
            int d = r - 1;
            while (d >= 0 && ++k[d] == p->taps[d].n) k[d--] = 0;
            if (d < 0) break;
        }
    }
}

/* Whether axis d maps each output coordinate to the same input one (an axis Resize leaves alone). */
static bool identity_axis(const resize_plan *p, int d, int64_t in) {
    const tap_set *t = &p->taps[d];
    bool id = t->n == 1 && p->out[d] == in;
    for (int64_t o = 0; id && o < in; o++) id = t->idx[o] == o && t->w[o] == 1;
    return id;
}

/* ResizeGrad (com.microsoft; ONNX Runtime's name and inputs dY, X, roi, scales): the adjoint of the
 * resize, each dY element added to the X elements its output read with the weights it read them
 * with (extrapolated outputs read none). Taps of neighbouring outputs overlap, so the threads split
 * the leading axes the resize leaves alone (batch and channels, as a rule), whose slices of dX are
 * disjoint. */
otter_status ot_kernel_resize_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *x;
    OT_TRY(ot_ctx_float_input(ctx, 0, &dy));
    OT_TRY(ot_ctx_need_input(ctx, 1, &x));
    resize_plan p;
    OT_TRY(resize_plan_make(ctx, false, true, x, &p));
    int r = p.rank;
    int64_t ny = otter_tensor_numel(dy), nx = otter_tensor_numel(x);
    otter_tensor *dx = ot_ctx_output(ctx, 0, dy->dtype, r, x->dims);
    otter_status s = dx ? OTTER_OK : ctx->output_status;
    double *DY = NULL, *DX = NULL;
    if (s == OTTER_OK) {
        DY = ot_malloc((size_t)(ny + 1) * sizeof(double));
        DX = ot_calloc((size_t)(nx + 1), sizeof(double));
        if (!DY || !DX) s = OT_NOMEM();
    }
    if (s == OTTER_OK && ny > 0) {
        ot_convert(DY, OTTER_DTYPE_DOUBLE, dy->data, dy->dtype, ny);
        int64_t st[OTTER_MAX_RANK], items = 1;
        ot_contiguous_strides(r, x->dims, st);
        for (int d = 0; d < r && identity_axis(&p, d, x->dims[d]); d++) items *= x->dims[d];
        resize_grad_args a = {.p = &p, .st = st, .dy = DY, .dx = DX, .slice = ny / items};
        ot_parallel_for(ctx, items, 1 + 16384 / (a.slice + 1), resize_grad_slices, &a);
    }
    if (s == OTTER_OK) ot_convert(dx->data, dx->dtype, DX, OTTER_DTYPE_DOUBLE, nx);
    resize_plan_free(&p);
    ot_free(DY), ot_free(DX);
    return s;
}
