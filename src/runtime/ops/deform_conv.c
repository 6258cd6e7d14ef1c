/* DeformConv (opsets 19, 22): a grouped convolution whose kernel taps sample X at learned fractional
 * offsets, bilinearly (multilinear in 1-D and 3-D; points outside X read zero), each tap scaled by an
 * optional mask. Per (image, group) the samples fill a column matrix [Cg * taps, positions] and one
 * sgemm with W's group block gives the output rows, as Conv's im2col path does. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/conv_geom.h"
#include "runtime/ops/gemm.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/nn_internal.h"

typedef struct dc_args {
    ot_conv_geom g; /* widened to 3 spatial axes */
    int nd;         /* the operator's spatial axes */
    int64_t C, Cg, offset_group;
    const float *X, *off, *mask; /* off [N, offset_group * taps * nd, positions]; mask NULL or [N, og * taps, ...] */
    float *col;                  /* [Cg * taps, positions] */
    int64_t n, group;
} dc_args;

/* X's plane at the fractional point p (nd coordinates), zero outside. For the gradient (dplane not
 * NULL): adds dv times each corner's weight to dplane, and sets dp to the value's derivatives with
 * respect to p. */
static double dc_sample(const float *plane, const dc_args *a, const double *p, float *dplane, double dv, double *dp) {
    const int64_t *len = a->g.in + (OT_SP - a->nd);
    int64_t base[OT_SP], stride[OT_SP], st = 1;
    double frac[OT_SP];
    for (int d = 0; dp && d < a->nd; d++) dp[d] = 0;
    for (int d = a->nd - 1; d >= 0; d--) {
        if (p[d] <= -1 || p[d] >= (double)len[d]) return 0;
        double f = floor(p[d]);
        base[d] = (int64_t)f, frac[d] = p[d] - f, stride[d] = st, st *= len[d];
    }
    double v = 0;
    for (int corner = 0; corner < 1 << a->nd; corner++) {
        double w = 1;
        int64_t at = 0;
        bool inside = true;
        for (int d = 0; d < a->nd; d++) {
            int up = corner >> (a->nd - 1 - d) & 1;
            int64_t i = base[d] + up;
            inside &= i >= 0 && i < len[d];
            w *= up ? frac[d] : 1 - frac[d];
            at += i * stride[d];
        }
        if (!inside) continue;
        v += w * plane[at];
        if (!dplane) continue;
        dplane[at] += (float)(dv * w);
        for (int d = 0; d < a->nd; d++) { /* d w / d p[d]: the other axes' factors, signed by the corner */
            double part = corner >> (a->nd - 1 - d) & 1 ? 1 : -1;
            for (int e = 0; e < a->nd; e++)
                if (e != d) part *= corner >> (a->nd - 1 - e) & 1 ? frac[e] : 1 - frac[e];
            dp[d] += part * plane[at];
        }
    }
    return v;
}

/* The sampling point of output position pos for kernel tap `tap` of offset group og's offsets off. */
static void dc_point(const dc_args *a, const float *off, int64_t tap, int64_t pos, double *p) {
    const ot_conv_geom *g = &a->g;
    int64_t P = g->out_size;
    int64_t k[OT_SP] = {tap / (g->k[1] * g->k[2]), tap / g->k[2] % g->k[1], tap % g->k[2]};
    int64_t o[OT_SP] = {pos / (g->out[1] * g->out[2]), pos / g->out[2] % g->out[1], pos % g->out[2]};
    for (int d = 0; d < a->nd; d++) {
        int e = OT_SP - a->nd + d;
        p[d] = (double)(o[e] * g->stride[e] - g->pb[e] + k[e] * g->dil[e]) + off[(tap * a->nd + d) * P + pos];
    }
}

/* Rows [c0, c1) of the group's column matrix (one row per channel and tap). */
static void dc_columns(void *arg, int64_t r0, int64_t r1) {
    const dc_args *a = arg;
    const ot_conv_geom *g = &a->g;
    int64_t taps = g->k_size, P = g->out_size, og_channels = a->C / a->offset_group;
    for (int64_t r = r0; r < r1; r++) {
        int64_t c = a->group * a->Cg + r / taps, tap = r % taps, og = c / og_channels;
        const float *plane = a->X + (a->n * a->C + c) * g->in_size;
        const float *off = a->off + (a->n * a->offset_group + og) * taps * a->nd * P;
        const float *mask = a->mask ? a->mask + ((a->n * a->offset_group + og) * taps + tap) * P : NULL;
        float *dst = a->col + r * P;
        for (int64_t pos = 0; pos < P; pos++) {
            double p[OT_SP];
            dc_point(a, off, tap, pos, p);
            float v = (float)dc_sample(plane, a, p, NULL, 0, NULL);
            dst[pos] = mask ? v * mask[pos] : v;
        }
    }
}

/* The forward inputs X, W, offset, B, mask (from input index `first`) checked, as floats in a (and *W,
 * *B), their geometry in a and the output's shape in yd; `tmp` holds the converted copies to free
 * (tmp[0..4]). */
static otter_status dc_setup(ot_kernel_ctx *ctx, size_t first, dc_args *a, int64_t *group, int64_t *yd, const float **W,
                             const float **B, float **tmp) {
    const otter_tensor *x, *w, *off, *b = ot_ctx_input(ctx, first + 3), *m = ot_ctx_input(ctx, first + 4);
    OT_TRY(ot_ctx_float_input(ctx, first, &x));
    OT_TRY(ot_ctx_float_input(ctx, first + 1, &w));
    OT_TRY(ot_ctx_float_input(ctx, first + 2, &off));
    OT_TRY(ot_nn_check_x(ctx, x, 3));
    *a = (dc_args){.nd = x->rank - 2, .C = x->dims[1]};
    *group = ot_ctx_attr_int_or(ctx, "group", 1);
    int64_t M = w->dims[0];
    a->offset_group = ot_ctx_attr_int_or(ctx, "offset_group", 1);
    if (w->rank != x->rank || *group <= 0 || a->offset_group <= 0 || a->C % *group || M % *group ||
        a->C % a->offset_group || w->dims[1] * *group != a->C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "W '%s' must be (oC, C/group, k...) for X '%s' with C and oC divisible by group %lld and C "
                            "by offset_group %lld",
                            ot_ctx_input_name(ctx, first + 1), ot_ctx_input_name(ctx, first), (long long)*group,
                            (long long)a->offset_group);
    a->g.nd = a->nd;
    for (int i = 0; i < a->nd; i++) a->g.k[i] = w->dims[2 + i];
    OT_TRY(ot_nn_geom_forward(ctx, x, &a->g, false));
    int64_t taps = 1;
    yd[0] = x->dims[0], yd[1] = M;
    for (int i = 0; i < a->nd; i++) yd[2 + i] = a->g.out[i], taps *= a->g.k[i];
    ot_conv_geom_to3(&a->g);
    int64_t N = x->dims[0];
    int64_t want_off[2 + OT_SP] = {N, a->offset_group * taps * a->nd},
                         want_mask[2 + OT_SP] = {N, a->offset_group * taps};
    for (int i = 0; i < a->nd; i++) want_off[2 + i] = want_mask[2 + i] = yd[2 + i];
    bool bad_off = off->rank != x->rank || memcmp(off->dims, want_off, sizeof(int64_t) * (size_t)x->rank) != 0;
    bool bad_mask = m && (m->rank != x->rank || memcmp(m->dims, want_mask, sizeof(int64_t) * (size_t)x->rank) != 0);
    if (bad_off || bad_mask || (b && otter_tensor_numel(b) != M)) {
        char s1[128], s2[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "offset '%s' must be %s, mask %s, B %lld values",
                            ot_ctx_input_name(ctx, first + 2), ot_shape_str(s1, sizeof s1, x->rank, want_off),
                            ot_shape_str(s2, sizeof s2, x->rank, want_mask), (long long)M);
    }
    a->Cg = a->C / *group;
    otter_status s = ot_ctx_input_f32(ctx, first, x, &a->X, &tmp[0]);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, first + 1, w, W, &tmp[1]);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, first + 2, off, &a->off, &tmp[2]);
    if (s == OTTER_OK && b) s = ot_ctx_input_f32(ctx, first + 3, b, B, &tmp[3]);
    if (s == OTTER_OK && m) s = ot_ctx_input_f32(ctx, first + 4, m, &a->mask, &tmp[4]);
    return s;
}

static void dc_free(float **tmp) {
    for (int i = 0; i < 5; i++) ot_free(tmp[i]);
}

otter_status ot_kernel_deform_conv(ot_kernel_ctx *ctx) {
    dc_args a;
    int64_t group, yd[2 + OT_SP];
    const float *W = NULL, *B = NULL;
    float *tmp[5] = {NULL}, *ty = NULL, *Y = NULL;
    otter_status s = dc_setup(ctx, 0, &a, &group, yd, &W, &B, tmp);
    otter_tensor *y = s == OTTER_OK ? ot_ctx_output(ctx, 0, ctx->inputs[0]->dtype, a.nd + 2, yd) : NULL;
    if (s == OTTER_OK && !y) s = ctx->output_status;
    if (s != OTTER_OK || otter_tensor_numel(y) == 0) {
        dc_free(tmp);
        return s;
    }
    int64_t N = yd[0], M = yd[1], P = a.g.out_size, Mg = M / group, Kg = a.Cg * a.g.k_size;
    s = ot_output_f32(y, &Y, &ty);
    if (s == OTTER_OK && !(a.col = ot_malloc((size_t)(Kg * P) * sizeof(float)))) s = OT_NOMEM();
    for (a.n = 0; s == OTTER_OK && a.n < N; a.n++)
        for (a.group = 0; s == OTTER_OK && a.group < group; a.group++) {
            ot_parallel_for(ctx, Kg, 1, dc_columns, &a);
            float *yg = Y + (a.n * M + a.group * Mg) * P;
            s = ot_sgemm(ctx, false, false, Mg, P, Kg, 1.0f, W + a.group * Mg * Kg, Kg, a.col, P, 0.0f, yg, P);
            for (int64_t o = 0; B && s == OTTER_OK && o < Mg; o++)
                for (int64_t p = 0; p < P; p++) yg[o * P + p] += B[a.group * Mg + o];
        }
    if (s == OTTER_OK)
        ot_output_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(a.col);
    dc_free(tmp);
    return s;
}

/* com.otter DeformConvGrad(dY, X, W, offset, B, mask) -> dX, dW, doffset, dB, dmask, with DeformConv's
 * attributes (ONNX Runtime has no DeformConv gradient; this is torchvision's deform_conv2d backward
 * for any spatial rank). Per (image, group), with col the forward's column matrix: dW += dY col^T,
 * dB += dY summed over positions, and dcol = W^T dY goes back through each sample: times the mask
 * into X's corners and the offsets (the bilinear weights' derivatives), times the unmasked sample
 * into the mask. Serial: taps of one offset group write the same offset gradients. */
otter_status ot_kernel_deform_conv_grad(ot_kernel_ctx *ctx) {
    dc_args a;
    int64_t group, yd[2 + OT_SP];
    const float *W = NULL, *B = NULL, *dY = NULL;
    float *tmp[5] = {NULL}, *tdy = NULL, *tout[5] = {NULL}, *out[5] = {NULL}, *dcol = NULL;
    const otter_tensor *dy;
    otter_status s = ot_ctx_float_input(ctx, 0, &dy);
    if (s == OTTER_OK) s = dc_setup(ctx, 1, &a, &group, yd, &W, &B, tmp);
    if (s == OTTER_OK && (dy->rank != a.nd + 2 || memcmp(dy->dims, yd, (size_t)dy->rank * sizeof(int64_t)) != 0)) {
        char s1[128], s2[128];
        s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' is %s, DeformConv's output is %s", ot_ctx_input_name(ctx, 0),
                         ot_shape_str(s1, sizeof s1, dy->rank, dy->dims), ot_shape_str(s2, sizeof s2, a.nd + 2, yd));
    }
    if (s != OTTER_OK) {
        dc_free(tmp);
        return s;
    }
    int64_t N = yd[0], M = yd[1], P = a.g.out_size, Mg = M / group, taps = a.g.k_size, Kg = a.Cg * taps;
    int64_t og_channels = a.C / a.offset_group;
    /* outputs like X, W, offset, then dB (M) and dmask (N, offset_group * taps, out...) */
    const otter_tensor *x = ctx->inputs[1], *w = ctx->inputs[2], *off = ctx->inputs[3];
    int64_t mask_dims[2 + OT_SP] = {N, a.offset_group * taps};
    for (int i = 0; i < a.nd; i++) mask_dims[2 + i] = yd[2 + i];
    const otter_tensor *like[5] = {x, w, off, NULL, NULL};
    otter_tensor *o[5] = {NULL};
    for (size_t i = 0; i < 5 && s == OTTER_OK; i++) {
        o[i] = i < 3    ? ot_ctx_output(ctx, i, like[i]->dtype, like[i]->rank, like[i]->dims)
               : i == 3 ? ot_ctx_output(ctx, i, x->dtype, 1, &M)
                        : ot_ctx_output(ctx, i, x->dtype, a.nd + 2, mask_dims);
        if (!o[i]) s = ctx->output_status;
        if (s == OTTER_OK) s = ot_output_f32(o[i], &out[i], &tout[i]);
        if (s == OTTER_OK) memset(out[i], 0, (size_t)otter_tensor_numel(o[i]) * sizeof(float));
    }
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 0, dy, &dY, &tdy);
    if (s == OTTER_OK && !(a.col = ot_malloc((size_t)(Kg * P) * sizeof(float)))) s = OT_NOMEM();
    if (s == OTTER_OK && !(dcol = ot_malloc((size_t)(Kg * P) * sizeof(float)))) s = OT_NOMEM();
    float *dX = out[0], *dW = out[1], *dOff = out[2], *dB = out[3], *dMask = out[4];
    for (a.n = 0; s == OTTER_OK && a.n < N; a.n++)
        for (a.group = 0; s == OTTER_OK && a.group < group; a.group++) {
            ot_parallel_for(ctx, Kg, 1, dc_columns, &a);
            const float *dyg = dY + (a.n * M + a.group * Mg) * P, *wg = W + a.group * Mg * Kg;
            s = ot_sgemm(ctx, false, true, Mg, Kg, P, 1.0f, dyg, P, a.col, P, 1.0f, dW + a.group * Mg * Kg, Kg);
            if (s == OTTER_OK) s = ot_sgemm(ctx, true, false, Kg, P, Mg, 1.0f, wg, Kg, dyg, P, 0.0f, dcol, P);
            for (int64_t m = 0; m < Mg; m++)
                for (int64_t p = 0; p < P; p++) dB[a.group * Mg + m] += dyg[m * P + p];
            for (int64_t r = 0; s == OTTER_OK && r < Kg; r++) {
                int64_t c = a.group * a.Cg + r / taps, tap = r % taps, og = c / og_channels;
                const float *plane = a.X + (a.n * a.C + c) * a.g.in_size;
                float *dplane = dX + (a.n * a.C + c) * a.g.in_size;
                int64_t off_at = (a.n * a.offset_group + og) * taps * a.nd * P,
                        mask_at = ((a.n * a.offset_group + og) * taps + tap) * P;
                for (int64_t pos = 0; pos < P; pos++) {
                    double pt[OT_SP], dp[OT_SP], g = dcol[r * P + pos], mk = a.mask ? a.mask[mask_at + pos] : 1;
                    dc_point(&a, a.off + off_at, tap, pos, pt);
                    double v = dc_sample(plane, &a, pt, dplane, g * mk, dp);
                    dMask[mask_at + pos] += (float)(g * v);
                    for (int d = 0; d < a.nd; d++) dOff[off_at + (tap * a.nd + d) * P + pos] += (float)(g * mk * dp[d]);
                }
            }
        }
    for (size_t i = 0; i < 5; i++) {
        if (s == OTTER_OK)
            ot_output_f32_done(o[i], tout[i]);
        else
            ot_free(tout[i]);
    }
    ot_free(a.col), ot_free(dcol), ot_free(tdy);
    dc_free(tmp);
    return s;
}
