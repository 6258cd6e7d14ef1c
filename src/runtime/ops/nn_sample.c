/* GridSample (opset 16, 4-D). */
#include <math.h>

#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/nn_internal.h"

static double cubic_coef(double t) {
    const double A = -0.75;
    t = fabs(t);
    if (t <= 1) return ((A + 2) * t - (A + 3)) * t * t + 1;
    if (t < 2) return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A;
    return 0;
}

/* ---- GridSample (opset 16, 4-D) ----------------------------------------------------------------- */

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

/* pad: 0 zeros, 1 border, 2 reflection */
static float gs_pixel(const float *img, int64_t H, int64_t W, int64_t y, int64_t x, int pad) {
    if (pad == 0) return (x < 0 || x >= W || y < 0 || y >= H) ? 0.0f : img[y * W + x];
    x = x < 0 ? 0 : x >= W ? W - 1 : x;
    y = y < 0 ? 0 : y >= H ? H - 1 : y;
    return img[y * W + x];
}

otter_status ot_kernel_gridsample(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *grid = ot_ctx_input(ctx, 1);
    char s1[128], s2[128];
    if (!x || !grid) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs inputs X and grid");
    if (x->rank != 4 || grid->rank != 4 || grid->dims[0] != x->dims[0] || grid->dims[3] != 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X '%s' %s must be (N,C,H,W) and grid '%s' %s (N,Ho,Wo,2)",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(s1, sizeof s1, x->rank, x->dims),
                            ot_ctx_input_name(ctx, 1), ot_shape_str(s2, sizeof s2, grid->rank, grid->dims));
    const char *ms, *ps;
    int64_t ac;
    OT_TRY(ot_ctx_attr_string(ctx, "mode", &ms));
    OT_TRY(ot_ctx_attr_string(ctx, "padding_mode", &ps));
    OT_TRY(ot_ctx_attr_int(ctx, "align_corners", &ac));
    int mode = strcmp(ms, "bilinear") == 0 ? 0 : strcmp(ms, "nearest") == 0 ? 1 : strcmp(ms, "bicubic") == 0 ? 2 : -1;
    int pad = strcmp(ps, "zeros") == 0 ? 0 : strcmp(ps, "border") == 0 ? 1 : strcmp(ps, "reflection") == 0 ? 2 : -1;
    if (mode < 0 || pad < 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown mode '%s' or padding_mode '%s'", ms, ps);
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], Ho = grid->dims[1], Wo = grid->dims[2];
    int64_t yd[4] = {N, C, Ho, Wo};
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, 4, yd);
    if (!y) return ctx->output_status;
    const float *X, *G;
    float *tx = NULL, *tg = NULL, *ty = NULL, *Y = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, x, &X, &tx);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 1, grid, &G, &tg);
    if (s == OTTER_OK) s = ot_output_f32(y, &Y, &ty);
    double xlo = ac ? 0 : -0.5, xhi = ac ? (double)W - 1 : (double)W - 0.5;
    double ylo = ac ? 0 : -0.5, yhi = ac ? (double)H - 1 : (double)H - 0.5;
    for (int64_t n = 0; s == OTTER_OK && n < N; n++)
        for (int64_t i = 0; i < Ho * Wo; i++) {
            double gx = G[(n * Ho * Wo + i) * 2], gy = G[(n * Ho * Wo + i) * 2 + 1];
            double px = ac ? (gx + 1) / 2 * (double)(W - 1) : ((gx + 1) * (double)W - 1) / 2;
            double py = ac ? (gy + 1) / 2 * (double)(H - 1) : ((gy + 1) * (double)H - 1) / 2;
            if (pad == 1 && mode != 2) {
                px = px < 0 ? 0 : px > (double)(W - 1) ? (double)(W - 1) : px;
                py = py < 0 ? 0 : py > (double)(H - 1) ? (double)(H - 1) : py;
            } else if (pad == 2) {
                px = gs_reflect(px, xlo, xhi);
                py = gs_reflect(py, ylo, yhi);
            }
            for (int64_t c = 0; c < C; c++) {
                const float *img = X + (n * C + c) * H * W;
                double v;
                if (mode == 1) {
                    v = gs_pixel(img, H, W, (int64_t)nearbyint(py), (int64_t)nearbyint(px), pad);
                } else if (mode == 0) {
                    int64_t x0 = (int64_t)floor(px), y0 = (int64_t)floor(py);
                    double fx = px - (double)x0, fy = py - (double)y0;
                    v = (1 - fy) *
                            ((1 - fx) * gs_pixel(img, H, W, y0, x0, pad) + fx * gs_pixel(img, H, W, y0, x0 + 1, pad)) +
                        fy * ((1 - fx) * gs_pixel(img, H, W, y0 + 1, x0, pad) +
                              fx * gs_pixel(img, H, W, y0 + 1, x0 + 1, pad));
                } else {
                    int64_t x0 = (int64_t)floor(px) - 1, y0 = (int64_t)floor(py) - 1;
                    double fx = px - floor(px), fy = py - floor(py), wx[4], wy[4];
                    for (int k = 0; k < 4; k++) wx[k] = cubic_coef(fx - (k - 1)), wy[k] = cubic_coef(fy - (k - 1));
                    v = 0;
                    for (int a = 0; a < 4; a++)
                        for (int b = 0; b < 4; b++) v += wy[a] * wx[b] * gs_pixel(img, H, W, y0 + a, x0 + b, pad);
                }
                Y[((n * C + c) * Ho * Wo) + i] = (float)v;
            }
        }
    if (s == OTTER_OK)
        ot_output_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(tx), ot_free(tg);
    return s;
}
