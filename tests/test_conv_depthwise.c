/* The depthwise convolution kernels (runtime/ops/conv_depthwise.c) against direct loops in double: the
 * forward, dX and dW, on every vector path the CPU runs (portable C, AVX2 + FMA, AVX-512), over kernel
 * sizes 1..7 (square and not), strides 1..3, dilations 1..3, pads symmetric, asymmetric and wider than
 * the kernel, channel multipliers 1 and 2, odd N, C, H and W down to planes smaller than the kernel. One
 * scratch serves every plane of a case, as Conv and ConvGrad use it, so a plane that left data where the
 * next one expects padding fails. Outputs start as NaN: an element the kernel does not write fails.
 * The channel-block forward (channel multiplier 1) on every path too (AVX-512's flat variant where
 * the plan takes it: stride 1, the output as wide as the input), over channel counts not a
 * multiple of the block (up to 37) and planes from 1x1 to 33x17, with a bias, without and with the
 * sum input Z (in place), and 8 fused activations (Relu, Clip in registers; HardSwish, Sigmoid, Swish,
 * LeakyRelu, Gelu through fused_act.c), against the same double loops; and max pooling in the same
 * blocks, with and without indices (every Mg = 1 case's window), against MaxPool's scalar loops, bit
 * for bit.
 * Error |got - want| / (1 + |want|), below 2e-5 (float sums of up to 49 products forward, in another
 * order on the block path; dW sums 3 x 20 x 20 products in float lanes, then in double; measured
 * worst 4e-6). Conv and ConvGrad through a session (routing, bias, fused activation, threads) are in
 * test_conv_algos.c and test_training_ops.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ops/conv_depthwise.h"
#include "testutil.h"

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static float *rand_floats(int64_t n, unsigned seed) {
    float *p = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = frand(&seed);
    return p;
}

static float *nan_floats(int64_t n) {
    float *p = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

typedef struct dw_case {
    int64_t N, C, H, W, Mg, KH, KW, sh, sw, dh, dw;
    int64_t pads[4]; /* top, left, bottom, right */
} dw_case;

static const char *isa_name(ot_dw_isa isa) {
    return isa == OT_DW_AVX512 ? "avx512" : isa == OT_DW_AVX2 ? "avx2" : "portable";
}

/* The fused activations the channel-block forward takes (Relu and Clip in registers, the others
 * through fused_act.c), and each in double. */
static const ot_fused_act block_acts[] = {
    {OT_FUSED_NONE, 0, 0},    {OT_FUSED_RELU, 0, 0},  {OT_FUSED_CLIP, -0.5f, 0.7f},   {OT_FUSED_HARD_SWISH, 0, 0},
    {OT_FUSED_SIGMOID, 0, 0}, {OT_FUSED_SWISH, 0, 0}, {OT_FUSED_LEAKY_RELU, 0.1f, 0}, {OT_FUSED_GELU, 0, 0}};

static double act_ref(const ot_fused_act *a, double v) {
    switch (a->kind) {
    case OT_FUSED_RELU:
        return v > 0 ? v : 0;
    case OT_FUSED_CLIP:
        return v < a->p0 ? a->p0 : v > a->p1 ? a->p1 : v;
    case OT_FUSED_HARD_SWISH:
        return v * fmin(1, fmax(0, (v + 3) / 6));
    case OT_FUSED_SIGMOID:
        return 1 / (1 + exp(-v));
    case OT_FUSED_SWISH:
        return v / (1 + exp(-v));
    case OT_FUSED_LEAKY_RELU:
        return v < 0 ? a->p0 * v : v;
    case OT_FUSED_GELU:
        return 0.5 * v * (1 + erf(v / sqrt(2.0)));
    default:
        return v;
    }
}

static double rel_err(const float *got, const double *want, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) worst = tu_worse(worst, fabs((double)got[i] - want[i]) / (1 + fabs(want[i])));
    return worst;
}

/* The channel-block forward over every image and block of channels (the last one partial when C is
 * not a multiple of the block), with a bias, each activation, without and with the sum input Z (in
 * place: y is Z's buffer, as Conv runs it), one scratch zeroed once for all; y_ref: the bare
 * convolution. The worst error. */
static double check_block(const ot_dw_plan *plan, const float *x, const float *w, const double *y_ref, int64_t N,
                          int64_t C, int64_t isz, int64_t osz) {
    const int64_t taps = plan->taps, blk = plan->block, floats = ot_conv_depthwise_block_scratch(plan);
    float *scratch = aligned_alloc(64, (size_t)(floats + 15) / 16 * 16 * sizeof(float));
    float *wb = aligned_alloc(64, (size_t)(plan->blk_w + 15) / 16 * 16 * sizeof(float));
    float *b = rand_floats(C, (unsigned)(C + 7)), *z = rand_floats(N * C * osz, (unsigned)(osz + 11));
    float *y = malloc((size_t)(N * C * osz) * sizeof(float));
    double *want = malloc((size_t)(N * C * osz) * sizeof(double)), err = 0;
    for (int64_t i = 0; i < floats; i++) scratch[i] = NAN; /* only what block_init writes may be relied on */
    ot_conv_depthwise_block_init(plan, scratch);
    for (size_t ai = 0; ai < sizeof block_acts / sizeof *block_acts; ai++)
        for (int with_z = 0; with_z < 2; with_z++) {
            const ot_fused_act *act = &block_acts[ai];
            for (int64_t i = 0; i < N * C * osz; i++) {
                y[i] = with_z ? z[i] : NAN;
                want[i] = act_ref(act, y_ref[i] + b[i / osz % C] + (with_z ? z[i] : 0));
            }
            for (int64_t c = 0; c < C; c += blk) {
                const int64_t nc = C - c < blk ? C - c : blk;
                ot_conv_depthwise_block_weights(plan, w + c * taps, b + c, nc, wb);
                for (int64_t n = 0; n < N; n++) {
                    const int64_t at = (n * C + c) * osz;
                    ot_conv_depthwise_forward_block(plan, x + (n * C + c) * isz, with_z ? y + at : NULL, act, nc,
                                                    y + at, wb, scratch);
                }
            }
            err = tu_worse(err, rel_err(y, want, N * C * osz));
        }
    free(scratch), free(wb), free(b), free(z), free(y), free(want);
    return err;
}

/* Runs case k on path isa; returns the worst error of the forward, dX and dW (-1: geometry refused or
 * without outputs, a case that would check nothing). */
/* Max pooling in channel blocks over all N * C planes (blocks span images when C is not a multiple
 * of the block) against MaxPool's scalar loops, bit for bit: without indices, row-major taps from
 * -inf, a tap replacing the maximum only when greater; with indices (pool2d_max_indices), from the
 * window's first tap inside the image (-inf at offset 0 when none), then the same. The input has
 * runs of +0 and -0 (the first of equal maxima wins), NaNs and -inf. Returns 0 (equal) or 1. */
static double check_maxpool(const ot_dw_plan *plan, const dw_case *k, const float *x_rand, int64_t OH, int64_t OW) {
    const int64_t P = k->N * k->C, H = k->H, W = k->W, isz = H * W, osz = OH * OW, blk = plan->block;
    float *x = malloc((size_t)(P * isz) * sizeof(float)), *y = nan_floats(P * osz), *yi = nan_floats(P * osz);
    float *want = malloc((size_t)(P * osz) * sizeof(float)), *want_i = malloc((size_t)(P * osz) * sizeof(float));
    int64_t *ind = malloc((size_t)(P * osz) * sizeof(int64_t)), *want_ind = malloc((size_t)(P * osz) * sizeof(int64_t));
    for (int64_t i = 0; i < P * isz; i++)
        x[i] = i % 7 == 3 ? NAN : i % 11 == 5 ? -INFINITY : i % 5 == 1 ? (i % 2 ? -0.0f : 0.0f) : x_rand[i];
    for (int64_t p = 0; p < P; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                float m = -INFINITY, mi = -INFINITY;
                int64_t best = -1;
                for (int64_t i = 0; i < k->KH; i++)
                    for (int64_t j = 0; j < k->KW; j++) {
                        const int64_t ih = oh * k->sh - k->pads[0] + i * k->dh,
                                      iw = ow * k->sw - k->pads[1] + j * k->dw;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        const float v = x[p * isz + ih * W + iw];
                        m = v > m ? v : m;
                        if (best < 0 || v > mi) mi = v, best = ih * W + iw;
                    }
                const int64_t o = (p * OH + oh) * OW + ow;
                want[o] = m, want_i[o] = mi, want_ind[o] = p * isz + (best < 0 ? 0 : best);
            }
    float *scratch = aligned_alloc(64, (size_t)(ot_conv_depthwise_block_scratch(plan) + 15) / 16 * 16 * sizeof(float));
    ot_conv_depthwise_block_max_init(plan, scratch);
    for (int64_t c = 0; c < P; c += blk) {
        const int64_t nc = P - c < blk ? P - c : blk;
        ot_conv_depthwise_block_maxpool(plan, x + c * isz, nc, y + c * osz, scratch);
        ot_conv_depthwise_block_maxpool_indices(plan, x + c * isz, nc, c, yi + c * osz, ind + c * osz, scratch);
    }
    double err = 0;
    for (int64_t i = 0; i < P * osz && err == 0; i++)
        if (memcmp(&y[i], &want[i], sizeof(float)) || memcmp(&yi[i], &want_i[i], sizeof(float)) ||
            ind[i] != want_ind[i]) {
            fprintf(stderr, "max pooling, plane %lld position %lld: got %g, %g at %lld; want %g, %g at %lld\n",
                    (long long)(i / osz), (long long)(i % osz), y[i], yi[i], (long long)ind[i], want[i], want_i[i],
                    (long long)want_ind[i]);
            err = 1;
        }
    free(x), free(y), free(yi), free(want), free(want_i), free(ind), free(want_ind), free(scratch);
    return err;
}

static double run_case(const dw_case *k, ot_dw_isa isa) {
    const int64_t N = k->N, C = k->C, H = k->H, W = k->W, Mg = k->Mg, M = C * Mg, KH = k->KH, KW = k->KW;
    const int64_t OH = (H + k->pads[0] + k->pads[2] - (KH - 1) * k->dh - 1) / k->sh + 1;
    const int64_t OW = (W + k->pads[1] + k->pads[3] - (KW - 1) * k->dw - 1) / k->sw + 1;
    const int64_t isz = H * W, osz = OH * OW, taps = KH * KW;
    if (OH < 1 || OW < 1) return -1;
    const ot_conv_window win = {.in = {1, H, W},
                                .out = {1, OH, OW},
                                .k = {1, KH, KW},
                                .stride = {1, k->sh, k->sw},
                                .dil = {1, k->dh, k->dw},
                                .pad_begin = {0, k->pads[0], k->pads[1]}};
    ot_dw_plan plan;
    if (!ot_conv_depthwise_plan(&plan, &win, isa)) return -1;
    unsigned seed = (unsigned)(H * 131 + W * 17 + KH * 7 + KW + k->sh * 3 + k->dh * 5 + Mg);
    float *x = rand_floats(N * C * isz, seed), *w = rand_floats(M * taps, seed + 1);
    float *dy = rand_floats(N * M * osz, seed + 2);
    double *y_ref = calloc((size_t)(N * M * osz), sizeof(double)),
           *dx_ref = calloc((size_t)(N * C * isz), sizeof(double));
    double *dw_ref = calloc((size_t)(M * taps), sizeof(double));
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    const int64_t yi = ((n * M + m) * OH + oh) * OW + ow;
                    for (int64_t i = 0; i < KH; i++)
                        for (int64_t j = 0; j < KW; j++) {
                            const int64_t ih = oh * k->sh - k->pads[0] + i * k->dh;
                            const int64_t iw = ow * k->sw - k->pads[1] + j * k->dw;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                            const int64_t xi = (n * C + m / Mg) * isz + ih * W + iw, wi = m * taps + i * KW + j;
                            y_ref[yi] += (double)w[wi] * x[xi];
                            dx_ref[xi] += (double)w[wi] * dy[yi];
                            dw_ref[wi] += (double)x[xi] * dy[yi];
                        }
                }
    float *y = nan_floats(N * M * osz), *dx = nan_floats(N * C * isz), *dwt = nan_floats(M * taps);
    const int64_t floats = ot_conv_depthwise_forward_scratch(&plan) > ot_conv_depthwise_backward_scratch(&plan, Mg)
                               ? ot_conv_depthwise_forward_scratch(&plan)
                               : ot_conv_depthwise_backward_scratch(&plan, Mg);
    float *scratch = aligned_alloc(64, (size_t)(floats + 16) / 16 * 16 * sizeof(float));
    ot_conv_depthwise_init(scratch, ot_conv_depthwise_forward_scratch(&plan));
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            ot_conv_depthwise_forward(&plan, x + (n * C + c) * isz, w + c * Mg * taps, Mg, y + (n * M + c * Mg) * osz,
                                      scratch);
    ot_conv_depthwise_init(scratch, ot_conv_depthwise_backward_scratch(&plan, Mg));
    for (int64_t c = 0; c < C; c++)
        ot_conv_depthwise_backward(&plan, N, x + c * isz, C * isz, dy + c * Mg * osz, M * osz, w + c * Mg * taps, Mg,
                                   dx + c * isz, dwt + c * Mg * taps, scratch);
    double err = rel_err(y, y_ref, N * M * osz);
    err = tu_worse(err, rel_err(dx, dx_ref, N * C * isz));
    err = tu_worse(err, rel_err(dwt, dw_ref, M * taps));
    /* each gradient alone (ConvGrad computes only the wanted outputs) */
    float *dx2 = nan_floats(N * C * isz), *dw2 = nan_floats(M * taps);
    ot_conv_depthwise_init(scratch, ot_conv_depthwise_backward_scratch(&plan, Mg));
    for (int64_t c = 0; c < C; c++) {
        ot_conv_depthwise_backward(&plan, N, x + c * isz, C * isz, dy + c * Mg * osz, M * osz, w + c * Mg * taps, Mg,
                                   dx2 + c * isz, NULL, scratch);
        ot_conv_depthwise_backward(&plan, N, x + c * isz, C * isz, dy + c * Mg * osz, M * osz, w + c * Mg * taps, Mg,
                                   NULL, dw2 + c * Mg * taps, scratch);
    }
    err = tu_worse(err, rel_err(dx2, dx_ref, N * C * isz));
    err = tu_worse(err, rel_err(dw2, dw_ref, M * taps));
    if (Mg == 1) err = tu_worse(err, check_block(&plan, x, w, y_ref, N, C, isz, osz));
    if (Mg == 1) err = tu_worse(err, check_maxpool(&plan, k, x, OH, OW));
    free(x), free(w), free(dy), free(y_ref), free(dx_ref), free(dw_ref), free(y), free(dx), free(dwt);
    free(dx2), free(dw2), free(scratch);
    return err;
}

static void check(const dw_case *k, ot_dw_isa isa, double *isa_worst) {
    const double err = run_case(k, isa);
    tu_checks++;
    if (err < 0) {
        tu_failures++;
        fprintf(stderr, "FAIL: %s %lldx%lld plane, kernel %lldx%lld, strides %lld,%lld: refused or no output\n",
                isa_name(isa), (long long)k->H, (long long)k->W, (long long)k->KH, (long long)k->KW, (long long)k->sh,
                (long long)k->sw);
        return;
    }
    if (!(err <= 2e-5)) {
        tu_failures++;
        fprintf(stderr,
                "FAIL: %s N %lld C %lld %lldx%lld Mg %lld, kernel %lldx%lld, strides %lld,%lld, dilations %lld,%lld, "
                "pads %lld,%lld,%lld,%lld: worst rel err %.2e\n",
                isa_name(isa), (long long)k->N, (long long)k->C, (long long)k->H, (long long)k->W, (long long)k->Mg,
                (long long)k->KH, (long long)k->KW, (long long)k->sh, (long long)k->sw, (long long)k->dh,
                (long long)k->dw, (long long)k->pads[0], (long long)k->pads[1], (long long)k->pads[2],
                (long long)k->pads[3], err);
    }
    *isa_worst = tu_worse(*isa_worst, err);
}

int main(void) {
    const ot_dw_isa isas[3] = {OT_DW_PORTABLE, OT_DW_AVX2, OT_DW_AVX512};
    int ran = 0;
    for (int i = 0; i < 3; i++) {
        if (!ot_conv_depthwise_isa_supported(isas[i])) {
            printf("%-8s: skipped (the CPU lacks it)\n", isa_name(isas[i]));
            continue;
        }
        double worst = 0;
        int cases = 0;
        for (int64_t kk = 1; kk <= 7; kk++)
            for (int64_t s = 1; s <= 2; s++)
                for (int64_t d = 1; d <= 2; d++)
                    for (int64_t Mg = 1; Mg <= 2; Mg++) {
                        /* square kernel, pads half of it; a rectangular one, asymmetric pads */
                        const int64_t half = (kk - 1) * d / 2, kw2 = 8 - kk;
                        const dw_case sq = {3, 5, 13, 11, Mg, kk, kk, s, s, d, d, {half, half, half, half}};
                        const dw_case rect = {1, 3, 15, 19, Mg, kk, kw2, s, 3 - s, d, 3 - d, {kk / 2, 0, 1, kk}};
                        check(&sq, isas[i], &worst), check(&rect, isas[i], &worst);
                        cases += 2;
                    }
        const dw_case odd[] = {
            /* mobile CNNs' layers: 3x3 and 5x5, stride 1 and 2, pad k / 2, planes down to 2x2 */
            {3, 7, 32, 32, 1, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}},
            {2, 5, 33, 31, 1, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}},
            {3, 7, 17, 17, 1, 5, 5, 2, 2, 1, 1, {2, 2, 2, 2}},
            {5, 9, 4, 4, 1, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}},
            {5, 9, 2, 2, 1, 5, 5, 1, 1, 1, 1, {2, 2, 2, 2}},
            /* a plane smaller than the kernel, pads wider than it, stride 3, dilation 3, 1-D */
            {3, 3, 2, 3, 2, 5, 4, 1, 1, 1, 1, {4, 3, 5, 6}},
            {1, 5, 20, 20, 1, 3, 3, 3, 3, 3, 3, {0, 5, 7, 1}},
            {3, 5, 1, 37, 2, 1, 7, 1, 2, 1, 2, {0, 3, 0, 2}},
            {3, 5, 29, 1, 1, 6, 1, 3, 1, 1, 1, {2, 0, 3, 0}},
            {2, 3, 9, 8, 3, 2, 2, 2, 3, 1, 1, {0, 0, 0, 0}},
            /* channels past one block and not a multiple of it; 1x1 to 33x17 planes */
            {2, 37, 7, 7, 1, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}},
            {2, 20, 33, 17, 1, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}},
            {3, 19, 1, 1, 1, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}},
            {2, 33, 2, 2, 1, 5, 5, 2, 2, 1, 1, {2, 2, 2, 2}},
            {2, 18, 4, 4, 1, 3, 3, 1, 1, 2, 2, {2, 2, 2, 2}},
            {1, 16, 16, 16, 1, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}},
            /* AVX-512's flat path (stride 1, same width, >= 64 outputs, <= 9 taps): a partial last
             * chunk of 16 outputs and a partial last block of channels */
            {2, 37, 9, 9, 1, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}},
            {2, 17, 10, 7, 1, 3, 1, 1, 1, 2, 1, {2, 0, 2, 0}},
        };
        for (size_t c = 0; c < sizeof odd / sizeof odd[0]; c++, cases++) check(&odd[c], isas[i], &worst);
        printf("%-8s: forward, dX and dW of %d cases vs double loops: worst rel err %.2e\n", isa_name(isas[i]), cases,
               worst);
        ran++;
    }
    tu_checks++;
    if (ran == 0) tu_failures++, fprintf(stderr, "FAIL: no vector path ran\n");
    return tu_finish("test_conv_depthwise");
}
