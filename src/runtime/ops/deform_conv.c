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

/* X's plane at the fractional point p (nd coordinates), zero outside. */
static float dc_sample(const float *plane, const dc_args *a, const double *p) {
    const int64_t *len = a->g.in + (OT_SP - a->nd);
    int64_t base[OT_SP], stride[OT_SP], st = 1;
    double frac[OT_SP];
    for (int d = a->nd - 1; d >= 0; d--) {
        if (p[d] <= -1 || p[d] >= (double)len[d]) return 0;
        double f = floor(p[d]);
        base[d] = (int64_t)f, frac[d] = p[d] - f, stride[d] = st, st *= len[d];
    }
    double v = 0;
    for (int corner = 0; corner < 1 << a->nd; corner++) {
        double w = 1;
        int64_t at = 0;
        for (int d = 0; d < a->nd && w != 0; d++) {
            int up = corner >> (a->nd - 1 - d) & 1;
            int64_t i = base[d] + up;
            if (i < 0 || i >= len[d]) w = 0;
            w *= up ? frac[d] : 1 - frac[d];
            at += i * stride[d];
        }
        if (w != 0) v += w * plane[at];
    }
    return (float)v;
}

/* Rows [c0, c1) of the group's column matrix (one row per channel and tap). */
static void dc_columns(void *arg, int64_t r0, int64_t r1) {
    const dc_args *a = arg;
    const ot_conv_geom *g = &a->g;
    int64_t taps = g->k_size, P = g->out_size, og_channels = a->C / a->offset_group;
    int sh = OT_SP - a->nd;
    for (int64_t r = r0; r < r1; r++) {
        int64_t c = a->group * a->Cg + r / taps, tap = r % taps, og = c / og_channels;
        const float *plane = a->X + (a->n * a->C + c) * g->in_size;
        const float *off = a->off + (a->n * a->offset_group + og) * taps * a->nd * P;
        const float *mask = a->mask ? a->mask + ((a->n * a->offset_group + og) * taps + tap) * P : NULL;
        int64_t k[OT_SP] = {tap / (g->k[1] * g->k[2]), tap / g->k[2] % g->k[1], tap % g->k[2]};
        float *dst = a->col + r * P;
        for (int64_t pos = 0; pos < P; pos++) {
            int64_t o[OT_SP] = {pos / (g->out[1] * g->out[2]), pos / g->out[2] % g->out[1], pos % g->out[2]};
            double p[OT_SP];
            for (int d = 0; d < a->nd; d++) {
                int e = sh + d;
                p[d] = (double)(o[e] * g->stride[e] - g->pb[e] + k[e] * g->dil[e]) + off[(tap * a->nd + d) * P + pos];
            }
            float v = dc_sample(plane, a, p);
            dst[pos] = mask ? v * mask[pos] : v;
        }
    }
}

otter_status ot_kernel_deform_conv(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *w, *off, *b = ot_ctx_input(ctx, 3), *m = ot_ctx_input(ctx, 4);
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    OT_TRY(ot_ctx_float_input(ctx, 1, &w));
    OT_TRY(ot_ctx_float_input(ctx, 2, &off));
    OT_TRY(ot_nn_check_x(ctx, x, 3));
    dc_args a = {.nd = x->rank - 2, .C = x->dims[1]};
    int64_t group = ot_ctx_attr_int_or(ctx, "group", 1), M = w->dims[0];
    a.offset_group = ot_ctx_attr_int_or(ctx, "offset_group", 1);
    if (w->rank != x->rank || group <= 0 || a.offset_group <= 0 || a.C % group || M % group || a.C % a.offset_group ||
        w->dims[1] * group != a.C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "W '%s' must be (oC, C/group, k...) for X '%s' with C and oC divisible by group %lld and C "
                            "by offset_group %lld",
                            ot_ctx_input_name(ctx, 1), ot_ctx_input_name(ctx, 0), (long long)group,
                            (long long)a.offset_group);
    a.g.nd = a.nd;
    for (int i = 0; i < a.nd; i++) a.g.k[i] = w->dims[2 + i];
    OT_TRY(ot_nn_geom_forward(ctx, x, &a.g, false));
    int64_t yd[2 + OT_SP] = {x->dims[0], M}, taps = 1;
    for (int i = 0; i < a.nd; i++) yd[2 + i] = a.g.out[i], taps *= a.g.k[i];
    ot_conv_geom_to3(&a.g);
    int64_t P = a.g.out_size, N = x->dims[0];
    int64_t want_off[2 + OT_SP] = {N, a.offset_group * taps * a.nd}, want_mask[2 + OT_SP] = {N, a.offset_group * taps};
    for (int i = 0; i < a.nd; i++) want_off[2 + i] = want_mask[2 + i] = yd[2 + i];
    bool bad_off = off->rank != x->rank || memcmp(off->dims, want_off, sizeof(int64_t) * (size_t)x->rank) != 0;
    bool bad_mask = m && (m->rank != x->rank || memcmp(m->dims, want_mask, sizeof(int64_t) * (size_t)x->rank) != 0);
    if (bad_off || bad_mask || (b && otter_tensor_numel(b) != M)) {
        char s1[128], s2[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "offset '%s' must be %s, mask %s, B %lld values",
                            ot_ctx_input_name(ctx, 2), ot_shape_str(s1, sizeof s1, x->rank, want_off),
                            ot_shape_str(s2, sizeof s2, x->rank, want_mask), (long long)M);
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, yd);
    if (!y) return ctx->output_status;
    if (otter_tensor_numel(y) == 0) return OTTER_OK;
    a.Cg = a.C / group;
    int64_t Mg = M / group, Kg = a.Cg * taps;
    const float *W, *B = NULL;
    float *tx = NULL, *tw = NULL, *to = NULL, *tm = NULL, *tb = NULL, *ty = NULL, *Y = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, x, &a.X, &tx);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 1, w, &W, &tw);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 2, off, &a.off, &to);
    if (s == OTTER_OK && m) s = ot_ctx_input_f32(ctx, 4, m, &a.mask, &tm);
    if (s == OTTER_OK && b) s = ot_ctx_input_f32(ctx, 3, b, &B, &tb);
    if (s == OTTER_OK) s = ot_output_f32(y, &Y, &ty);
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
    ot_free(a.col), ot_free(tx), ot_free(tw), ot_free(to), ot_free(tm), ot_free(tb);
    return s;
}
