/* Convolutions of small maps over a batch (ResNet's later stages in training: 4x4 and 2x2 maps at
 * 64x64 inputs, weights that change every step). im2col's product multiplies every tap by every
 * position, the padding included (at 2x2 with a 3x3 kernel, 20 of a position's 36 products are
 * with zeros), and the weights (9.4 MB at 512 channels) were packed again on every pass, forward and
 * backward. Here the images of a block of 32 are the lanes of two vectors: a register tile of 12
 * result channels x 32 images at one result position sums, over the (operand position, tap) pairs
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
#include "runtime/ops/simd_transpose.h"

#define CS_LANES   32 /* images a block: two vectors */
#define CS_ROWS    12 /* result channels a register tile */
#define CS_KB      64 /* summed channels per pass over a position's pairs: the weights' lines stay in L1 */
#define CS_DW_TAPS 25 /* the largest kernel the weight gradient stages in a tile (5x5) */

/* fn(args..., rows) with the tile's row count (1 .. CS_ROWS) a constant, so its loops unroll. */
#define CS_ROWS_DISPATCH(rows, fn, ...)                                                                                \
    switch (rows) {                                                                                                    \
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
        return;                                                                                                        \
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
        return;                                                                                                        \
    }

/* v[j][i] = src[i * ld + j] for rows i < nr and columns j < nc (<= 16 each), 0 elsewhere: a block's
 * rows loaded (masked) and transposed, for every packing below. */
__attribute__((target("avx512f"), always_inline)) static inline void cs_load_t16(__m512 *v, const float *src,
                                                                                 int64_t ld, int64_t nr, int64_t nc) {
    const __mmask16 m = ot_lanes16(nc);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) v[i] = i < nr ? _mm512_maskz_loadu_ps(m, src + i * ld) : _mm512_setzero_ps();
    ot_transpose16_avx512(v);
}

/* One block of images: the result block yt[R][n_res][32] from the operand block bp[n_op][K][32]. */
typedef struct cs_plan {
    const float *W;
    int64_t rs, ks; /* the weight of result channel r, summed channel k, tap t: W[r * rs + k * ks + t] */
    int64_t R, K, n_res, n_op, slabs; /* slabs: ceil(R / CS_ROWS) */
    const int32_t *start, *pos, *tap; /* result position o sums the pairs [start[o], start[o + 1]) */
    const float *src;                 /* the operand images of this block, K * n_op floats apart */
    float *dst;                       /* the result images, R * n_res floats apart */
    int64_t nb;                       /* images in this block (<= CS_LANES) */
    float *bp, *yt;
} cs_plan;

/* acc[r] += a[r * rs + k * ks] b[32 k .. 32 k + 32) over k < kc and the rows r < ROWS: both tiles'
 * micro-kernel, its a (weights or dY) broadcast where it lies, its b packed. */
__attribute__((target("avx512f,fma"), always_inline)) static inline void
cs_fma(__m512 acc[][2], int64_t kc, const float *a, int64_t rs, int64_t ks, const float *b, const int ROWS) {
    for (int64_t k = 0; k < kc; k++, a += ks, b += CS_LANES) {
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
        for (int r = 0; r < ROWS; r++) {
            const __m512 av = _mm512_set1_ps(a[r * rs]);
            acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
        }
    }
}

/* yt's tile of ROWS result channels from r0 at result position o: the sum over o's pairs, CS_KB
 * summed channels at a time so that the weights read for the first pair are in L1 for the next. */
__attribute__((target("avx512f,fma"), always_inline)) static inline void cs_tile_rows(const cs_plan *p, int64_t r0,
                                                                                      int64_t o, const int ROWS) {
    __m512 acc[CS_ROWS][2];
#pragma GCC unroll 12
    for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const float *a = p->W + r0 * p->rs;
    const int64_t rs = p->rs, ks = p->ks;
    for (int64_t k0 = 0; k0 < p->K; k0 += CS_KB) {
        const int64_t kb = p->K - k0 < CS_KB ? p->K - k0 : CS_KB;
        for (int32_t q = p->start[o]; q < p->start[o + 1]; q++) {
            cs_fma(acc, kb, a + k0 * ks + p->tap[q], rs, ks, p->bp + (p->pos[q] * p->K + k0) * CS_LANES, ROWS);
        }
    }
    float *c = p->yt + (r0 * p->n_res + o) * CS_LANES;
#pragma GCC unroll 12
    for (int r = 0; r < ROWS; r++) {
        _mm512_storeu_ps(c + r * p->n_res * CS_LANES, acc[r][0]);
        _mm512_storeu_ps(c + r * p->n_res * CS_LANES + 16, acc[r][1]);
    }
}

__attribute__((target("avx512f,fma"))) static void cs_tile(const cs_plan *p, int64_t r0, int64_t o) {
    CS_ROWS_DISPATCH(p->R - r0 < CS_ROWS ? p->R - r0 : CS_ROWS, cs_tile_rows, p, r0, o);
}

/* Tiles [t0, t1): slab by slab, its result positions in turn (a slab's weights stay in L2). */
static void cs_tiles(void *arg, int64_t t0, int64_t t1) {
    const cs_plan *p = arg;
    for (int64_t t = t0; t < t1; t++) cs_tile(p, t / p->n_res * CS_ROWS, t % p->n_res);
}

/* bp[pos][k][i] = src[i * L + k * n_op + pos] (L = K * n_op) for images i < 32 (0 past nb), over the
 * 16-float runs [16 * u0, 16 * u1) of src's images: 16 x 16 transposes. Position-major, so that a
 * pair's channels are consecutive lines (channel-major, 2 KB apart at 16 positions, they fell in a
 * few L1 sets: ResNet-18's 4x4 layers ran at 105 GFLOP/s against 163 at 2x2). */
__attribute__((target("avx512f"))) static void cs_pack(void *arg, int64_t u0, int64_t u1) {
    const cs_plan *p = arg;
    const int64_t L = p->K * p->n_op;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t l = 16 * u, nl = L - l < 16 ? L - l : 16;
        for (int g = 0; g < CS_LANES; g += 16) {
            __m512 v[16];
            cs_load_t16(v, p->src + g * L + l, L, p->nb - g, nl);
            for (int64_t j = 0, k = l / p->n_op, i = l % p->n_op; j < nl; j++) {
                _mm512_storeu_ps(p->bp + (i * p->K + k) * CS_LANES + g, v[j]);
                if (++i == p->n_op) i = 0, k++;
            }
        }
    }
}

/* dst[i * L + l] = yt[l][i] for the images i < nb: cs_pack's way back. */
__attribute__((target("avx512f"))) static void cs_unpack(void *arg, int64_t u0, int64_t u1) {
    const cs_plan *p = arg;
    const int64_t L = p->R * p->n_res;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t l = 16 * u, nl = L - l < 16 ? L - l : 16;
        const __mmask16 lm = ot_lanes16(nl);
        for (int g = 0; g < CS_LANES && g < p->nb; g += 16) {
            __m512 v[16];
            cs_load_t16(v, p->yt + l * CS_LANES + g, CS_LANES, nl, 16);
            for (int i = 0; i < 16 && g + i < p->nb; i++) _mm512_mask_storeu_ps(p->dst + (g + i) * L + l, lm, v[i]);
        }
    }
}

/* Every block of images through the plan (W, rs, ks, R, K, positions and pairs set). */
static otter_status cs_run(ot_kernel_ctx *ctx, cs_plan *p, int64_t N, const float *src, float *dst) {
    p->slabs = (p->R + CS_ROWS - 1) / CS_ROWS;
    p->bp = ot_ctx_scratch(ctx, (size_t)(p->K * p->n_op + p->R * p->n_res) * CS_LANES * sizeof(float));
    if (!p->bp) return OTTER_ERR_NOMEM;
    p->yt = p->bp + p->K * p->n_op * CS_LANES;
    const int64_t lk = p->K * p->n_op, lr = p->R * p->n_res;
    /* a tile sums 2 * 12 * 32 * (pairs x K) flops: chunks of about 1 MFLOP */
    const int64_t pairs = p->start[p->n_res], grain = 1 + (1 << 20) / (768 * (pairs / p->n_res + 1) * p->K + 1);
    for (int64_t n0 = 0; n0 < N; n0 += CS_LANES) {
        p->nb = N - n0 < CS_LANES ? N - n0 : CS_LANES;
        p->src = src + n0 * lk, p->dst = dst + n0 * lr;
        ot_parallel_for(ctx, (lk + 15) / 16, 64, cs_pack, p);
        ot_parallel_for(ctx, p->slabs * p->n_res, grain, cs_tiles, p);
        ot_parallel_for(ctx, (lr + 15) / 16, 64, cs_unpack, p);
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

/* Measured on ResNet-18's training step (64x64 images, batch 32, 1 thread, alternating runs): with
 * this path for the forward passes and input gradients of maps up to 64 positions and the strided
 * input gradients, 297-313 -> 217-221 ms; up to 31 positions 228-230; up to 256, 223-226. One
 * convolution, weights an input, 1 thread: 512 channels at 2x2 5.5 -> 1.6 ms, 256 at 4x4 4.4 -> 2.3
 * (the channel-lane kernel), 128 at 8x8 3.7-3.8 -> 3.0-3.2 (the direct kernel), 64 at 16x16 even.
 * The weight gradient (per-node profile, ms a step): 2x2 4.5-5 -> 2.2-2.5 less a ConvGrad, 4x4 -> 2.2
 * less, 8x8 1.3 less, 16x16 9.9 -> 9.5 (the whole ConvGrad). */
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

bool ot_conv_small_pays_off(const ot_conv_window *w, int64_t N, int64_t C, int64_t M, ot_conv_small_pass pass) {
    const int64_t in = w->in[0] * w->in[1] * w->in[2], out = w->out[0] * w->out[1] * w->out[2],
                  taps = w->k[0] * w->k[1] * w->k[2];
    if (ot_conv_direct_isa() != OT_CONV_ISA_AVX512 || N < 16 || C < 16 || M < 16) return false;
    const bool stride1 = w->stride[0] * w->stride[1] * w->stride[2] == 1;
    switch (pass) {
    case OT_CONV_SMALL_FORWARD:
        return out <= 64;
    case OT_CONV_SMALL_INPUT_GRAD:
        return in <= (stride1 ? 64 : 1024);
    case OT_CONV_SMALL_WEIGHT_GRAD:
        return out <= 256 && taps <= CS_DW_TAPS;
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
    return cs_run(ctx, &p, N, X, Y);
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
    return cs_run(ctx, &p, N, DY, DX);
}

/* ---- the weight gradient: the images summed, the input channels in the lanes ---------------------- */

/* dW[m][c][t] = sum over t's pairs (o, i) and images n of dY[n][m][o] X[n][c][i]: per tap a product
 * of the pairs' images, so the padding costs nothing here either. A register tile is 12 output
 * channels x 32 input channels; dY, as dys[m][o][n], is read in place (each broadcast), X packed as
 * xs[i][c / 32][n][32]. A tile's taps are staged and written as its rows of dW, 32 x taps floats. */
typedef struct cs_dw_plan {
    int64_t N, C, M, taps, n_in, n_out, ctiles, slabs;
    const int32_t *tstart, *tout, *tin; /* tap t's pairs: [tstart[t], tstart[t + 1]) */
    const float *DY, *X;
    float *dys, *xs, *dw;
} cs_dw_plan;

__attribute__((target("avx512f,fma"), always_inline)) static inline void
cs_dw_tile_rows(const cs_dw_plan *p, int64_t m0, int64_t j, const int ROWS) {
    float stage[CS_ROWS][CS_DW_TAPS][CS_LANES];
    const int64_t N = p->N, rs = p->n_out * N;
    for (int64_t t = 0; t < p->taps; t++) {
        __m512 acc[CS_ROWS][2];
#pragma GCC unroll 12
        for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        for (int32_t q = p->tstart[t]; q < p->tstart[t + 1]; q++) {
            cs_fma(acc, N, p->dys + (m0 * p->n_out + p->tout[q]) * N, rs, 1,
                   p->xs + (p->tin[q] * p->ctiles + j) * N * CS_LANES, ROWS);
        }
#pragma GCC unroll 12
        for (int r = 0; r < ROWS; r++) {
            _mm512_storeu_ps(stage[r][t], acc[r][0]);
            _mm512_storeu_ps(stage[r][t] + 16, acc[r][1]);
        }
    }
    const int64_t c0 = j * CS_LANES, nc = p->C - c0 < CS_LANES ? p->C - c0 : CS_LANES;
    for (int r = 0; r < ROWS; r++) {
        float *d = p->dw + ((m0 + r) * p->C + c0) * p->taps;
        for (int64_t c = 0; c < nc; c++)
            for (int64_t t = 0; t < p->taps; t++) d[c * p->taps + t] = stage[r][t][c];
    }
}

__attribute__((target("avx512f,fma"))) static void cs_dw_tile(const cs_dw_plan *p, int64_t m0, int64_t j) {
    CS_ROWS_DISPATCH(p->M - m0 < CS_ROWS ? p->M - m0 : CS_ROWS, cs_dw_tile_rows, p, m0, j);
}

/* Tiles [t0, t1): by column tile, its slabs in turn (the tile's packed X stays in L1/L2). */
static void cs_dw_tiles(void *arg, int64_t t0, int64_t t1) {
    const cs_dw_plan *p = arg;
    for (int64_t t = t0; t < t1; t++) cs_dw_tile(p, t % p->slabs * CS_ROWS, t / p->slabs);
}

/* dys[l][n] = DY[n][l] (l = m * n_out + o) for the 16-float runs [16 * u0, 16 * u1) of l. */
__attribute__((target("avx512f"))) static void cs_dw_pack_dy(void *arg, int64_t u0, int64_t u1) {
    const cs_dw_plan *p = arg;
    const int64_t L = p->M * p->n_out;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t l = 16 * u, nl = L - l < 16 ? L - l : 16;
        for (int64_t n0 = 0; n0 < p->N; n0 += 16) {
            const int64_t nn = p->N - n0 < 16 ? p->N - n0 : 16;
            __m512 v[16];
            cs_load_t16(v, p->DY + n0 * L + l, L, nn, nl);
            for (int64_t k = 0; k < nl; k++) _mm512_mask_storeu_ps(p->dys + (l + k) * p->N + n0, ot_lanes16(nn), v[k]);
        }
    }
}

/* xs[i][c / 32][n][c % 32] = X[n][c][i] (0 past C) for the images [n0, n1). */
__attribute__((target("avx512f"))) static void cs_dw_pack_x(void *arg, int64_t n0, int64_t n1) {
    const cs_dw_plan *p = arg;
    for (int64_t n = n0; n < n1; n++)
        for (int64_t c = 0; c < p->ctiles * CS_LANES; c += 16) {
            const int64_t nc = p->C - c < 16 ? (p->C - c > 0 ? p->C - c : 0) : 16;
            for (int64_t i0 = 0; i0 < p->n_in; i0 += 16) {
                const int64_t ni = p->n_in - i0 < 16 ? p->n_in - i0 : 16;
                __m512 v[16];
                cs_load_t16(v, p->X + (n * p->C + c) * p->n_in + i0, p->n_in, nc, ni);
                for (int64_t i = 0; i < ni; i++)
                    _mm512_storeu_ps(
                        p->xs + (((i0 + i) * p->ctiles + c / CS_LANES) * p->N + n) * CS_LANES + c % CS_LANES, v[i]);
            }
        }
}

otter_status ot_conv_small_weight_grad(ot_kernel_ctx *ctx, const ot_conv_window *w, int64_t N, int64_t C, int64_t M,
                                       const float *DY, const float *X, float *DW) {
    int32_t *start, *in, *tap;
    OT_TRY(cs_triples(ctx, w, &start, &in, &tap));
    cs_dw_plan p = {.N = N,
                    .C = C,
                    .M = M,
                    .taps = w->k[0] * w->k[1] * w->k[2],
                    .n_in = w->in[0] * w->in[1] * w->in[2],
                    .n_out = w->out[0] * w->out[1] * w->out[2],
                    .ctiles = (C + CS_LANES - 1) / CS_LANES,
                    .slabs = (M + CS_ROWS - 1) / CS_ROWS,
                    .DY = DY,
                    .X = X,
                    .dw = DW};
    const int64_t n = start[p.n_out];
    /* the triples by tap: each one's (output, input) pairs */
    int32_t *by_tap, *tout, *tin;
    OT_TRY(cs_regroup(ctx, start, p.n_out, tap, in, p.taps, &by_tap, &tout, &tin));
    p.tstart = by_tap, p.tout = tout, p.tin = tin;
    p.dys = ot_ctx_scratch(ctx, (size_t)(M * p.n_out * N + p.n_in * p.ctiles * N * CS_LANES) * sizeof(float));
    if (!p.dys) return OTTER_ERR_NOMEM;
    p.xs = p.dys + M * p.n_out * N;
    ot_parallel_for(ctx, (M * p.n_out + 15) / 16, 64, cs_dw_pack_dy, &p);
    ot_parallel_for(ctx, N, 1, cs_dw_pack_x, &p);
    /* a tile sums 2 * 12 * 32 * N flops per triple: chunks of about 1 MFLOP */
    ot_parallel_for(ctx, p.slabs * p.ctiles, 1 + (1 << 20) / (768 * N * (n / p.taps + 1)), cs_dw_tiles, &p);
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
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "the small-map convolution needs x86-64 with AVX-512");
}

otter_status ot_conv_small_input_grad(ot_kernel_ctx *ctx, const ot_conv_window *w, int64_t N, int64_t C, int64_t M,
                                      const float *DY, const float *W, float *DX) {
    (void)w, (void)N, (void)C, (void)M, (void)DY, (void)W, (void)DX;
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "the small-map convolution needs x86-64 with AVX-512");
}

otter_status ot_conv_small_weight_grad(ot_kernel_ctx *ctx, const ot_conv_window *w, int64_t N, int64_t C, int64_t M,
                                       const float *DY, const float *X, float *DW) {
    (void)w, (void)N, (void)C, (void)M, (void)DY, (void)X, (void)DW;
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "the small-map convolution needs x86-64 with AVX-512");
}

#endif
