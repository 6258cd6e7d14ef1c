/* Convolutions of small maps over a batch (ResNet's later stages in training: 4x4 and 2x2 maps at
 * 64x64 inputs, weights that change every step). im2col's product multiplies every tap by every
 * position, the padding included (at 2x2 with a 3x3 kernel, 20 of a position's 36 products are
 * with zeros), and the weights (9.4 MB at 512 channels) were packed again on every pass, forward and
 * backward. Here the images of a block of 32 (AVX2: 16) are the lanes of two vectors: a register tile of
 * 12 (AVX2: 6) result channels x those images at one result position sums, over the (operand position, tap) pairs
 * that lie inside the maps, the operand's channels times the weights, which are read where they are
 * stored (each broadcast from W); only the operand block, a few hundred KB, is repacked as
 * [position][channel][image], and the result block transposed back. The input gradient is the same
 * sum over the same triples with the positions' roles swapped and W's channel axes exchanged; the
 * weight gradient sums the images of each tap's pairs (below). */
#include "runtime/ops/conv_small.h"

#include <string.h>

#include "core/core.h"
#include "runtime/ops/conv_direct.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "runtime/ops/simd_transpose.h"

#define CS_KB      64 /* summed channels per pass over a position's pairs: the weights' lines stay in L1 */
#define CS_DW_TAPS 25 /* the largest kernel the weight gradient stages in a tile (5x5) */

/* The cases of a switch over a tile's row count (1 .. 6 or 12) calling fn(args..., rows) with it a constant, so its
 * loops unroll. */
#define CS_ROWS_UPTO_6(fn, ...)                                                                                        \
    case 1:                                                                                                            \
        fn(__VA_ARGS__, 1);                                                                                            \
        return;                                                                                                        \
    case 2:                                                                                                            \
        fn(__VA_ARGS__, 2);                                                                                            \
        return;                                                                                                        \
    case 3:                                                                                                            \
        fn(__VA_ARGS__, 3);                                                                                            \
        return;                                                                                                        \
    case 4:                                                                                                            \
        fn(__VA_ARGS__, 4);                                                                                            \
        return;                                                                                                        \
    case 5:                                                                                                            \
        fn(__VA_ARGS__, 5);                                                                                            \
        return;                                                                                                        \
    case 6:                                                                                                            \
        fn(__VA_ARGS__, 6);                                                                                            \
        return;
#define CS_ROWS_UPTO_12(fn, ...)                                                                                       \
    CS_ROWS_UPTO_6(fn, __VA_ARGS__)                                                                                    \
    case 7:                                                                                                            \
        fn(__VA_ARGS__, 7);                                                                                            \
        return;                                                                                                        \
    case 8:                                                                                                            \
        fn(__VA_ARGS__, 8);                                                                                            \
        return;                                                                                                        \
    case 9:                                                                                                            \
        fn(__VA_ARGS__, 9);                                                                                            \
        return;                                                                                                        \
    case 10:                                                                                                           \
        fn(__VA_ARGS__, 10);                                                                                           \
        return;                                                                                                        \
    case 11:                                                                                                           \
        fn(__VA_ARGS__, 11);                                                                                           \
        return;                                                                                                        \
    case 12:                                                                                                           \
        fn(__VA_ARGS__, 12);                                                                                           \
        return;

/* One block of images (a path's lanes): the result block yt[R][n_res][lanes] from the operand block
 * bp[n_op][K][lanes]. */
typedef struct cs_plan {
    const float *W;
    int64_t rs, ks; /* the weight of result channel r, summed channel k, tap t: W[r * rs + k * ks + t] */
    int64_t R, K, n_res, n_op;
    const int32_t *start, *pos, *tap; /* result position o sums the pairs [start[o], start[o + 1]) */
    const float *src;                 /* the operand images of this block, K * n_op floats apart */
    float *dst;                       /* the result images, R * n_res floats apart */
    int64_t nb;                       /* images in this block (<= lanes) */
    float *bp, *yt;
} cs_plan;

/* dW[m][c][t] = sum over t's pairs (o, i) and images n of dY[n][m][o] X[n][c][i]: per tap a product
 * of the pairs' images, so the padding costs nothing here either. A register tile is rows output
 * channels x lanes input channels; dY, as dys[m][o][n], is read in place (each broadcast), X packed as
 * xs[i][c / lanes][n][lanes]. A tile's taps are staged and written as its rows of dW, lanes x taps floats. */
typedef struct cs_dw_plan {
    int64_t N, C, M, taps, n_in, n_out, ctiles, slabs;
    const int32_t *tstart, *tout, *tin; /* tap t's pairs: [tstart[t], tstart[t + 1]) */
    const float *DY, *X;
    float *dys, *xs, *dw;
} cs_dw_plan;

/* A vector path's kernels (conv_small_tile.inc): the packings over runs of vl floats, the tiles of rows result
 * channels x lanes images (the weight gradient's: input channels). */
typedef struct cs_path {
    int64_t vl, lanes, rows;
    ot_range_fn pack, tiles, unpack;             /* over cs_plan */
    ot_range_fn dw_pack_dy, dw_pack_x, dw_tiles; /* over cs_dw_plan */
} cs_path;

/* AVX-512: 12 result channels x 32 images (two vectors), 24 of the 32 registers */
#include "runtime/ops/simd_v_avx512.inc"
#define CST_ATTR   __attribute__((target("avx512f,fma")))
#define CST_SUFFIX _avx512
#define CST_ROWS   12
#include "runtime/ops/conv_small_tile.inc"

/* AVX2: 6 x 16 (two vectors) in 12 of the 16 registers, the direct GEMM kernel's shape */
#include "runtime/ops/simd_v_avx2.inc"
#define CST_ATTR   __attribute__((target("avx2,fma")))
#define CST_SUFFIX _avx2
#define CST_ROWS   6
#include "runtime/ops/conv_small_tile.inc"

/* The kernels of the vector path the direct kernel runs (ot_conv_small_pays_off: AVX2 at least). */
static const cs_path *cs_path_here(void) {
    return ot_conv_direct_isa() == OT_CONV_ISA_AVX512 ? &cs_path_avx512 : &cs_path_avx2;
}

/* Every block of images through the plan (W, rs, ks, R, K, positions and pairs set) by path k's kernels. */
static otter_status cs_run(ot_kernel_ctx *ctx, const cs_path *k, cs_plan *p, int64_t N, const float *src, float *dst) {
    const int64_t lanes = k->lanes, lk = p->K * p->n_op, lr = p->R * p->n_res;
    p->bp = ot_ctx_scratch(ctx, (size_t)(lk + lr) * lanes * sizeof(float));
    if (!p->bp) return OTTER_ERR_NOMEM;
    p->yt = p->bp + lk * lanes;
    /* a tile sums 2 * rows * lanes * (pairs x K) flops: chunks of about 1 MFLOP */
    const int64_t pairs = p->start[p->n_res], slabs = (p->R + k->rows - 1) / k->rows,
                  grain = 1 + (1 << 20) / (2 * k->rows * lanes * (pairs / p->n_res + 1) * p->K + 1);
    for (int64_t n0 = 0; n0 < N; n0 += lanes) {
        p->nb = N - n0 < lanes ? N - n0 : lanes;
        p->src = src + n0 * lk, p->dst = dst + n0 * lr;
        ot_parallel_for(ctx, (lk + k->vl - 1) / k->vl, 64, k->pack, p);
        ot_parallel_for(ctx, slabs * p->n_res, grain, k->tiles, p);
        ot_parallel_for(ctx, (lr + k->vl - 1) / k->vl, 64, k->unpack, p);
    }
    return OTTER_OK;
}

/* The forward triples (output position o, input position i, tap t) inside the maps, by output
 * position: start[o] .. start[o + 1] index in[] and tap[] (scratch). */
static otter_status cs_triples(ot_kernel_ctx *ctx, const ot_conv_window *w, int32_t **start, int32_t **in,
                               int32_t **tap) {
    const int64_t n_out = w->out[0] * w->out[1] * w->out[2], taps = w->k[0] * w->k[1] * w->k[2];
    *start = ot_ctx_scratch(ctx, (size_t)(n_out + 1 + 2 * n_out * taps) * sizeof(int32_t));
    if (!*start) return OTTER_ERR_NOMEM;
    *in = *start + n_out + 1, *tap = *in + n_out * taps;
    int32_t n = 0;
    int64_t o = 0;
    for (int64_t od = 0; od < w->out[0]; od++)
        for (int64_t oh = 0; oh < w->out[1]; oh++)
            for (int64_t ow = 0; ow < w->out[2]; ow++, o++) {
                (*start)[o] = n;
                int32_t t = 0;
                for (int64_t kd = 0; kd < w->k[0]; kd++)
                    for (int64_t kh = 0; kh < w->k[1]; kh++)
                        for (int64_t kw = 0; kw < w->k[2]; kw++, t++) {
                            const int64_t id = od * w->stride[0] - w->pad_begin[0] + kd * w->dil[0],
                                          ih = oh * w->stride[1] - w->pad_begin[1] + kh * w->dil[1],
                                          iw = ow * w->stride[2] - w->pad_begin[2] + kw * w->dil[2];
                            if (id < 0 || id >= w->in[0] || ih < 0 || ih >= w->in[1] || iw < 0 || iw >= w->in[2])
                                continue;
                            (*in)[n] = (int32_t)((id * w->in[1] + ih) * w->in[2] + iw), (*tap)[n++] = t;
                        }
            }
    (*start)[n_out] = n;
    return OTTER_OK;
}

/* The triples (by output position: start, in, tap) regrouped by key[q] < n_keys (their input
 * positions or taps): *kstart[k] .. *kstart[k + 1] index *out_of (output positions) and *other_of
 * (other[q] of each), in output order within a key (scratch). */
static otter_status cs_regroup(ot_kernel_ctx *ctx, const int32_t *start, int64_t n_out, const int32_t *key,
                               const int32_t *other, int64_t n_keys, int32_t **kstart, int32_t **out_of,
                               int32_t **other_of) {
    const int64_t n = start[n_out];
    int32_t *ks = ot_ctx_scratch(ctx, (size_t)(2 * n_keys + 2 + 2 * n) * sizeof(int32_t));
    if (!ks) return OTTER_ERR_NOMEM;
    int32_t *fill = ks + n_keys + 1;
    *kstart = ks, *out_of = fill + n_keys + 1, *other_of = *out_of + n;
    memset(ks, 0, (size_t)(n_keys + 1) * sizeof(int32_t));
    for (int64_t q = 0; q < n; q++) ks[key[q] + 1]++;
    for (int64_t k = 0; k < n_keys; k++) ks[k + 1] += ks[k];
    memcpy(fill, ks, (size_t)(n_keys + 1) * sizeof(int32_t));
    for (int64_t o = 0; o < n_out; o++)
        for (int32_t q = start[o]; q < start[o + 1]; q++) {
            const int32_t slot = fill[key[q]]++;
            (*out_of)[slot] = (int32_t)o, (*other_of)[slot] = other[q];
        }
    return OTTER_OK;
}

/* AVX-512, measured on ResNet-18's training step (64x64 images, batch 32, 1 thread, alternating runs): with
 * this path for the forward passes and input gradients of maps up to 64 positions and the strided
 * input gradients, 297-313 -> 217-221 ms; up to 31 positions 228-230; up to 256, 223-226. One
 * convolution, weights an input, 1 thread: 512 channels at 2x2 5.5 -> 1.6 ms, 256 at 4x4 4.4 -> 2.3
 * (the channel-lane kernel), 128 at 8x8 3.7-3.8 -> 3.0-3.2 (the direct kernel), 64 at 16x16 even.
 * The weight gradient (per-node profile, ms a step): 2x2 4.5-5 -> 2.2-2.5 less a ConvGrad, 4x4 -> 2.2
 * less, 8x8 1.3 less, 16x16 9.9 -> 9.5 (the whole ConvGrad).
 * AVX2 (Zen 3, ResNet-18's per-node profile, ms a step, medians of alternating runs): forward 2x2 9.1-9.3 ->
 * 4.0-4.6, 4x4 8.1-8.7 -> 5.4-5.7, 8x8 7.1 -> 6.5-7.1, strided 4.6-4.9 -> 3.4-3.7; the input gradient 1.9-4.0
 * less a ConvGrad at 2x2, 1.7-2.7 at 4x4, but 1.3-3.5 more at 8x8 (the direct kernel is faster there), strided
 * 2.2-2.3 less from 16x16 and 8x8; the weight gradient 4.3-4.9 less at 2x2, 3.6-5.1 at 4x4, 0.5-1.6 at 8x8 (2.6-3.4
 * less than without 8x8), 0.2-1.4 more at 16x16. 1x1 kernels, no padding to skip, gain nothing: SqueezeNet's at 7x7
 * 0.1-0.4 ms slower each, MobileNetV2's even. The step, 1 thread, old and new alternating in one process: 441-504
 * -> 374-401 ms; SqueezeNet 161-194 -> 150-176. */
bool ot_conv_small_pays_off(const ot_conv_window *w, int64_t N, int64_t C, int64_t M, ot_conv_small_pass pass) {
    const int64_t in = w->in[0] * w->in[1] * w->in[2], out = w->out[0] * w->out[1] * w->out[2],
                  taps = w->k[0] * w->k[1] * w->k[2];
    const ot_conv_isa isa = ot_conv_direct_isa();
    if (isa == OT_CONV_ISA_NONE || N < 16 || C < 16 || M < 16) return false;
    const bool avx512 = isa == OT_CONV_ISA_AVX512, stride1 = w->stride[0] * w->stride[1] * w->stride[2] == 1;
    if (!avx512 && taps == 1) return false;
    switch (pass) {
    case OT_CONV_SMALL_FORWARD:
        return out <= 64;
    case OT_CONV_SMALL_INPUT_GRAD:
        return in <= (!stride1 ? 1024 : avx512 ? 64 : 16);
    case OT_CONV_SMALL_WEIGHT_GRAD:
        return out <= (avx512 ? 256 : 64) && taps <= CS_DW_TAPS;
    }
    return false;
}

otter_status ot_conv_small_forward(ot_kernel_ctx *ctx, const ot_conv_window *w, int64_t N, int64_t C, int64_t M,
                                   const float *X, const float *W, float *Y) {
    int32_t *start, *in, *tap;
    OT_TRY(cs_triples(ctx, w, &start, &in, &tap));
    const int64_t taps = w->k[0] * w->k[1] * w->k[2];
    cs_plan p = {.W = W,
                 .rs = C * taps,
                 .ks = taps,
                 .R = M,
                 .K = C,
                 .n_res = w->out[0] * w->out[1] * w->out[2],
                 .n_op = w->in[0] * w->in[1] * w->in[2],
                 .start = start,
                 .pos = in,
                 .tap = tap};
    return cs_run(ctx, cs_path_here(), &p, N, X, Y);
}

otter_status ot_conv_small_input_grad(ot_kernel_ctx *ctx, const ot_conv_window *w, int64_t N, int64_t C, int64_t M,
                                      const float *DY, const float *W, float *DX) {
    int32_t *start, *in, *tap;
    OT_TRY(cs_triples(ctx, w, &start, &in, &tap));
    const int64_t taps = w->k[0] * w->k[1] * w->k[2], n_in = w->in[0] * w->in[1] * w->in[2],
                  n_out = w->out[0] * w->out[1] * w->out[2];
    /* the same triples by input position: each one's (output, tap) pairs */
    int32_t *by_in, *out_of, *tap_of;
    OT_TRY(cs_regroup(ctx, start, n_out, in, tap, n_in, &by_in, &out_of, &tap_of));
    cs_plan p = {.W = W,
                 .rs = taps,
                 .ks = C * taps,
                 .R = C,
                 .K = M,
                 .n_res = n_in,
                 .n_op = n_out,
                 .start = by_in,
                 .pos = out_of,
                 .tap = tap_of};
    return cs_run(ctx, cs_path_here(), &p, N, DY, DX);
}

otter_status ot_conv_small_weight_grad(ot_kernel_ctx *ctx, const ot_conv_window *w, int64_t N, int64_t C, int64_t M,
                                       const float *DY, const float *X, float *DW) {
    int32_t *start, *in, *tap;
    OT_TRY(cs_triples(ctx, w, &start, &in, &tap));
    const cs_path *k = cs_path_here();
    cs_dw_plan p = {.N = N,
                    .C = C,
                    .M = M,
                    .taps = w->k[0] * w->k[1] * w->k[2],
                    .n_in = w->in[0] * w->in[1] * w->in[2],
                    .n_out = w->out[0] * w->out[1] * w->out[2],
                    .ctiles = (C + k->lanes - 1) / k->lanes,
                    .slabs = (M + k->rows - 1) / k->rows,
                    .DY = DY,
                    .X = X,
                    .dw = DW};
    const int64_t n = start[p.n_out];
    /* the triples by tap: each one's (output, input) pairs */
    int32_t *by_tap, *tout, *tin;
    OT_TRY(cs_regroup(ctx, start, p.n_out, tap, in, p.taps, &by_tap, &tout, &tin));
    p.tstart = by_tap, p.tout = tout, p.tin = tin;
    p.dys = ot_ctx_scratch(ctx, (size_t)(M * p.n_out * N + p.n_in * p.ctiles * N * k->lanes) * sizeof(float));
    if (!p.dys) return OTTER_ERR_NOMEM;
    p.xs = p.dys + M * p.n_out * N;
    ot_parallel_for(ctx, (M * p.n_out + k->vl - 1) / k->vl, 64, k->dw_pack_dy, &p);
    ot_parallel_for(ctx, N, 1, k->dw_pack_x, &p);
    /* a tile sums 2 * rows * lanes * N flops per triple: chunks of about 1 MFLOP */
    ot_parallel_for(ctx, p.slabs * p.ctiles, 1 + (1 << 20) / (2 * k->rows * k->lanes * N * (n / p.taps + 1)),
                    k->dw_tiles, &p);
    return OTTER_OK;
}

#else

bool ot_conv_small_pays_off(const ot_conv_window *w, int64_t N, int64_t C, int64_t M, ot_conv_small_pass pass) {
    (void)w, (void)N, (void)C, (void)M, (void)pass;
    return false;
}

otter_status ot_conv_small_forward(ot_kernel_ctx *ctx, const ot_conv_window *w, int64_t N, int64_t C, int64_t M,
                                   const float *X, const float *W, float *Y) {
    (void)w, (void)N, (void)C, (void)M, (void)X, (void)W, (void)Y;
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "the small-map convolution needs x86-64 with AVX2");
}

otter_status ot_conv_small_input_grad(ot_kernel_ctx *ctx, const ot_conv_window *w, int64_t N, int64_t C, int64_t M,
                                      const float *DY, const float *W, float *DX) {
    (void)w, (void)N, (void)C, (void)M, (void)DY, (void)W, (void)DX;
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "the small-map convolution needs x86-64 with AVX2");
}

otter_status ot_conv_small_weight_grad(ot_kernel_ctx *ctx, const ot_conv_window *w, int64_t N, int64_t C, int64_t M,
                                       const float *DY, const float *X, float *DW) {
    (void)w, (void)N, (void)C, (void)M, (void)DY, (void)X, (void)DW;
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "the small-map convolution needs x86-64 with AVX2");
}

#endif
