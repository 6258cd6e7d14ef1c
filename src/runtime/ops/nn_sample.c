/* GridSample (opset 16 on 4-D inputs, opset 20 on any spatial rank): samples X (N, C, D1..Dr) at the
 * points of grid (N, O1..Or, r), whose last axis holds normalized coordinates [-1, 1] innermost axis
 * first (x, y[, z]). Semantics follow onnx's reference implementation: the coordinate is rounded half
 * to even for nearest, folded back into the image by the padding mode, and every tap of the
 * interpolation fetches its pixel by the padding mode again. */
#include <math.h>

#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/nn_internal.h"

enum { GS_LINEAR, GS_NEAREST, GS_CUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };
#define GS_MAX_SP (OTTER_MAX_RANK - 2)

/* x folded into [lo, hi] by reflecting at its ends as often as it takes */
static double gs_reflect(double x, double lo, double hi) {
    double range = hi - lo;
    if (range <= 0) return lo;
    if (x < lo) {
        double dx = lo - x, n = floor(dx / range), r = dx - n * range;
        return fmod(n, 2) == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
        double dx = x - hi, n = floor(dx / range), r = dx - n * range;
        return fmod(n, 2) == 0 ? hi - r : lo + r;
    }
    return x;
}

typedef struct gs_args {
    int sp, mode, pad;
    bool align;
    int64_t C, in[GS_MAX_SP], in_stride[GS_MAX_SP], plane, points; /* points: per batch item */
    const float *X, *G, *dY;
    float *Y, *dX, *dG; /* Y for the forward kernel; dX, dG for GridSampleGrad */
} gs_args;

/* The pixel index the padding mode reads for tap i of an axis of length len, or -1 for a zero. */
static int64_t gs_tap_index(const gs_args *a, int64_t i, int64_t len, double lo, double hi) {
    if (i >= 0 && i < len) return i;
    if (a->pad == GS_ZEROS) return -1;
    if (a->pad == GS_BORDER) return i < 0 ? 0 : len - 1;
    return (int64_t)gs_reflect((double)i, lo, hi);
}

/* d gs_reflect(x) / dx: +1 or -1 by how many times x was folded back */
static double gs_reflect_slope(double x, double lo, double hi) {
    double range = hi - lo;
    if (range <= 0 || (x >= lo && x <= hi)) return range <= 0 ? 0 : 1;
    double n = floor((x < lo ? lo - x : x - hi) / range);
    return fmod(n, 2) == 0 ? -1 : 1;
}

/* derivative of ot_cubic_weight(x, A) */
static double gs_cubic_slope(double x, double A) {
    double t = fabs(x), s = x < 0 ? -1 : 1;
    if (t <= 1) return s * (3 * (A + 2) * t - 2 * (A + 3)) * t;
    if (t < 2) return s * ((3 * A * t - 10 * A) * t + 8 * A);
    return 0;
}

/* Per axis of the point with grid coordinates g: the taps' offsets into a plane (-1: zero), their
 * weights and (dw not NULL) the weights' derivatives with respect to the grid coordinate. */
static void gs_taps(const gs_args *a, const float *g, int64_t off[][4], double w[][4], double dw[][4]) {
    int nt = a->mode == GS_NEAREST ? 1 : a->mode == GS_LINEAR ? 2 : 4;
    for (int d = 0; d < a->sp; d++) {
        int64_t len = a->in[d];
        double lo = a->align ? 0 : -0.5, hi = a->align ? (double)len - 1 : (double)len - 0.5;
        double gv = g[a->sp - 1 - d];
        double x = a->align ? (gv + 1) / 2 * (double)(len - 1) : ((gv + 1) * (double)len - 1) / 2;
        double slope = a->align ? (double)(len - 1) / 2 : (double)len / 2; /* dx / dgv */
        if (a->mode == GS_NEAREST) x = nearbyint(x), slope = 0;
        if (x < lo || x > hi) {
            if (a->pad == GS_BORDER) {
                double clipped = x < 0 ? 0 : x > (double)(len - 1) ? (double)(len - 1) : x;
                if (clipped != x) slope = 0;
                x = clipped;
            } else if (a->pad == GS_REFLECTION) {
                slope *= gs_reflect_slope(x, lo, hi);
                x = gs_reflect(x, lo, hi);
            }
        }
        int64_t first;
        if (a->mode == GS_NEAREST) {
            first = (int64_t)x; /* truncation, as the reference's integer cast */
            w[d][0] = 1;
            if (dw) dw[d][0] = 0;
        } else if (a->mode == GS_LINEAR) {
            first = (int64_t)floor(x);
            double f = x - (double)first;
            w[d][0] = 1 - f, w[d][1] = f;
            if (dw) dw[d][0] = -slope, dw[d][1] = slope;
        } else {
            first = (int64_t)floor(x) - 1;
            double f = x - floor(x);
            for (int k = 0; k < 4; k++) {
                w[d][k] = ot_cubic_weight(f - (k - 1), -0.75);
                if (dw) dw[d][k] = slope * gs_cubic_slope(f - (k - 1), -0.75);
            }
        }
        for (int k = 0; k < nt; k++) {
            int64_t i = gs_tap_index(a, first + k, len, lo, hi);
            off[d][k] = i < 0 ? -1 : i * a->in_stride[d];
        }
    }
}

/* Advance the tap counter k (nt taps per axis, last axis fastest); false after the last tap. */
static bool gs_next_tap(int sp, int nt, int *k) {
    int d = sp - 1;
    while (d >= 0 && ++k[d] == nt) k[d--] = 0;
    return d >= 0;
}

static void gs_points(void *arg, int64_t p0, int64_t p1) {
    const gs_args *a = arg;
    int sp = a->sp, nt = a->mode == GS_NEAREST ? 1 : a->mode == GS_LINEAR ? 2 : 4;
    for (int64_t p = p0; p < p1; p++) {
        int64_t n = p / a->points, o = p % a->points;
        int64_t off[GS_MAX_SP][4] = {{0}}; /* all set by gs_taps; zeroed for -O3's maybe-uninitialized */
        double w[GS_MAX_SP][4] = {{0}};
        gs_taps(a, a->G + p * sp, off, w, NULL);
        for (int64_t c = 0; c < a->C; c++) {
            const float *img = a->X + (n * a->C + c) * a->plane;
            int k[GS_MAX_SP] = {0};
            double acc = 0;
            do {
                double wt = 1;
                int64_t at = 0;
                for (int d = 0; d < sp && wt != 0; d++) {
                    if (off[d][k[d]] < 0) wt = 0;
                    wt *= w[d][k[d]];
                    at += off[d][k[d]];
                }
                if (wt != 0) acc += wt * img[at];
            } while (gs_next_tap(sp, nt, k));
            a->Y[(n * a->C + c) * a->points + o] = (float)acc;
        }
    }
}

/* GridSampleGrad for batch items [n0, n1): each point scatters dY times its tap weights into dX,
 * and collects dY times the taps' pixels times the weights' derivatives into its grid gradient. */
static void gs_grad_items(void *arg, int64_t n0, int64_t n1) {
    const gs_args *a = arg;
    int sp = a->sp, nt = a->mode == GS_NEAREST ? 1 : a->mode == GS_LINEAR ? 2 : 4;
    for (int64_t n = n0; n < n1; n++) {
        memset(a->dX + n * a->C * a->plane, 0, (size_t)(a->C * a->plane) * sizeof(float));
        for (int64_t o = 0; o < a->points; o++) {
            int64_t p = n * a->points + o, off[GS_MAX_SP][4];
            double w[GS_MAX_SP][4], dw[GS_MAX_SP][4], dg[GS_MAX_SP] = {0};
            gs_taps(a, a->G + p * sp, off, w, dw);
            for (int64_t c = 0; c < a->C; c++) {
                const float *img = a->X + (n * a->C + c) * a->plane;
                float *dimg = a->dX + (n * a->C + c) * a->plane;
                double dy = a->dY[(n * a->C + c) * a->points + o];
                int k[GS_MAX_SP] = {0};
                do {
                    bool zero = false;
                    double wt = 1;
                    int64_t at = 0;
                    for (int d = 0; d < sp; d++) {
                        zero |= off[d][k[d]] < 0;
                        wt *= w[d][k[d]];
                        at += off[d][k[d]];
                    }
                    if (zero) continue;
                    dimg[at] += (float)(wt * dy);
                    /* d weight / d coordinate d: that axis' weight derivative times the others' weights */
                    for (int d = 0; d < sp; d++) {
                        double part = dw[d][k[d]];
                        for (int e = 0; e < sp && part != 0; e++)
                            if (e != d) part *= w[e][k[e]];
                        dg[d] += part * dy * img[at];
                    }
                } while (gs_next_tap(sp, nt, k));
            }
            for (int d = 0; d < sp; d++) a->dG[p * sp + (sp - 1 - d)] = (float)dg[d];
        }
    }
}

/* Checks X and grid (inputs x_index and x_index + 1) and reads the attributes into a (with the shape
 * of Y in yd). Only the forward node (x_index 0) is bound to its ai.onnx opset's rank limit. */
static otter_status gs_setup(ot_kernel_ctx *ctx, const otter_tensor *x, const otter_tensor *grid, size_t x_index,
                             gs_args *a, int64_t *yd) {
    char s1[128], s2[128];
    int sp = x->rank - 2;
    if (sp < 1 || sp > GS_MAX_SP || grid->rank != x->rank || grid->dims[0] != x->dims[0] ||
        grid->dims[grid->rank - 1] != sp || (ctx->opset < 20 && sp != 2 && x_index == 0))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X '%s' %s must be (N,C,D1..Dr) and grid '%s' %s (N,O1..Or,r)%s",
                            ot_ctx_input_name(ctx, x_index), ot_shape_str(s1, sizeof s1, x->rank, x->dims),
                            ot_ctx_input_name(ctx, x_index + 1), ot_shape_str(s2, sizeof s2, grid->rank, grid->dims),
                            ctx->opset < 20 && x_index == 0 ? " with r = 2 before opset 20" : "");
    const char *ms, *ps;
    int64_t ac;
    OT_TRY(ot_ctx_attr_string(ctx, "mode", &ms));
    OT_TRY(ot_ctx_attr_string(ctx, "padding_mode", &ps));
    OT_TRY(ot_ctx_attr_int(ctx, "align_corners", &ac));
    /* opset 20 renamed bilinear / bicubic to linear / cubic */
    int mode = strcmp(ms, "linear") == 0 || strcmp(ms, "bilinear") == 0 ? GS_LINEAR
               : strcmp(ms, "nearest") == 0                             ? GS_NEAREST
               : strcmp(ms, "cubic") == 0 || strcmp(ms, "bicubic") == 0 ? GS_CUBIC
                                                                        : -1;
    int pad = strcmp(ps, "zeros") == 0        ? GS_ZEROS
              : strcmp(ps, "border") == 0     ? GS_BORDER
              : strcmp(ps, "reflection") == 0 ? GS_REFLECTION
                                              : -1;
    if (mode < 0 || pad < 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown mode '%s' or padding_mode '%s'", ms, ps);
    if (mode == GS_CUBIC && sp != 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "mode '%s' needs a 4-D X, '%s' is %s", ms,
                            ot_ctx_input_name(ctx, x_index), ot_shape_str(s1, sizeof s1, x->rank, x->dims));
    *a = (gs_args){.sp = sp, .mode = mode, .pad = pad, .align = ac != 0, .C = x->dims[1], .plane = 1, .points = 1};
    yd[0] = x->dims[0], yd[1] = x->dims[1];
    for (int d = sp - 1; d >= 0; d--) {
        a->in[d] = x->dims[2 + d];
        a->in_stride[d] = a->plane;
        a->plane *= a->in[d];
        yd[2 + d] = grid->dims[1 + d];
        a->points *= yd[2 + d];
    }
    return OTTER_OK;
}

otter_status ot_kernel_gridsample(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *grid;
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    OT_TRY(ot_ctx_float_input(ctx, 1, &grid));
    gs_args a;
    int64_t yd[OTTER_MAX_RANK];
    OT_TRY(gs_setup(ctx, x, grid, 0, &a, yd));
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, yd);
    if (!y) return ctx->output_status;
    if (otter_tensor_numel(y) == 0) return OTTER_OK;
    float *tx = NULL, *tg = NULL, *ty = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, x, &a.X, &tx);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 1, grid, &a.G, &tg);
    if (s == OTTER_OK) s = ot_output_f32(y, &a.Y, &ty);
    if (s == OTTER_OK) {
        ot_parallel_for(ctx, x->dims[0] * a.points, 64, gs_points, &a);
        ot_output_f32_done(y, ty);
    } else {
        ot_free(ty);
    }
    ot_free(tx), ot_free(tg);
    return s;
}

/* com.otter GridSampleGrad(dY, X, grid) -> dX, dgrid, with GridSample's attributes: PyTorch's
 * grid_sampler_2d_backward for every mode, padding and spatial rank the forward kernel takes (ONNX
 * Runtime has no GridSample gradient). The grid gradient is zero for nearest and where border
 * padding clamps the coordinate. */
otter_status ot_kernel_gridsample_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *x, *grid;
    char s1[128], s2[128];
    OT_TRY(ot_ctx_float_input(ctx, 0, &dy));
    OT_TRY(ot_ctx_float_input(ctx, 1, &x));
    OT_TRY(ot_ctx_float_input(ctx, 2, &grid));
    gs_args a;
    int64_t yd[OTTER_MAX_RANK];
    OT_TRY(gs_setup(ctx, x, grid, 1, &a, yd));
    if (dy->rank != x->rank || memcmp(dy->dims, yd, (size_t)dy->rank * sizeof(int64_t)) != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' is %s, GridSample's output is %s",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(s1, sizeof s1, dy->rank, dy->dims),
                            ot_shape_str(s2, sizeof s2, x->rank, yd));
    otter_tensor *dx = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!dx) return ctx->output_status;
    otter_tensor *dg = ot_ctx_output(ctx, 1, grid->dtype, grid->rank, grid->dims);
    if (!dg) return ctx->output_status;
    float *tdy = NULL, *tx = NULL, *tg = NULL, *tdx = NULL, *tdg = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, dy, &a.dY, &tdy);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 1, x, &a.X, &tx);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 2, grid, &a.G, &tg);
    if (s == OTTER_OK) s = ot_output_f32(dx, &a.dX, &tdx);
    if (s == OTTER_OK) s = ot_output_f32(dg, &a.dG, &tdg);
    if (s == OTTER_OK) {
        ot_parallel_for(ctx, x->dims[0], 1, gs_grad_items, &a);
        ot_output_f32_done(dx, tdx);
        ot_output_f32_done(dg, tdg);
    } else {
        ot_free(tdx), ot_free(tdg);
    }
    ot_free(tdy), ot_free(tx), ot_free(tg);
    return s;
}
