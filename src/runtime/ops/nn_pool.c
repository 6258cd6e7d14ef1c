/* Pooling kernels: MaxPool, AveragePool, LpPool, their global forms, MaxUnpool. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "ops/shape_math.h"
#include "runtime/op.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/channel_blocks.h"
#include "runtime/ops/conv_depthwise.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/nn_internal.h"
#include "runtime/ops/vec_math.h"

#if defined(__wasm_simd128__)
#include <wasm_simd128.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define OT_POOL_X86 1
#endif

/* ---- pooling -------------------------------------------------------------------------------------- */

enum { POOL_MAX, POOL_AVG, POOL_LP };

typedef struct pool_args {
    const ot_conv_geom *g;
    int kind;
    const float *X;
    float *Y;
    int64_t *I; /* MaxPool indices or NULL */
    bool include_pad, col_major;
    float p;
} pool_args;

/* ot_v4 lanes: v where v > acc, else acc (NaN never wins, as the scalar max loops). */
static inline ot_v4 pool_v4_max(ot_v4 acc, ot_v4 v) {
    const ot_i4 gt = v > acc;
    return (ot_v4)((gt & (ot_i4)v) | (~gt & (ot_i4)acc));
}

/* h[ow - c0] = max of row r over the clipped window of output column ow, for ow in [c0, c1):
 * windows wholly inside the row four columns at a time (taps gathered at stride sw), the clipped
 * edges scalar; each from -inf by strict >, so the first maximum in scan order is kept (its bits,
 * for signed zeros). */
static void maxpool_row(const float *r, int64_t W, int64_t c0, int64_t c1, int64_t kw, int64_t sw, int64_t pw,
                        float *h) {
    /* interior: ow * sw - pw >= 0 and ow * sw - pw + kw <= W */
    int64_t lo = (pw + sw - 1) / sw, hi = W - kw + pw < 0 ? 0 : (W - kw + pw) / sw + 1;
    lo = lo < c0 ? c0 : lo > c1 ? c1 : lo;
    hi = hi > c1 ? c1 : hi < lo ? lo : hi;
    for (int64_t ow = c0; ow < c1; ow++) {
        if (ow == lo) /* the interior, vectorized; its scalar rest below */
            for (; ow + 4 <= hi; ow += 4) {
                const float *t = r + ow * sw - pw;
                ot_v4 acc = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
                for (int64_t k = 0; k < kw; k++)
                    acc = pool_v4_max(acc, (ot_v4){t[k], t[sw + k], t[2 * sw + k], t[3 * sw + k]});
                ot_v4_store(h + ow - c0, acc);
            }
        if (ow >= c1) break;
        int64_t ws = ow * sw - pw, we = ws + kw < W ? ws + kw : W;
        float acc = -INFINITY;
        for (int64_t iw = ws < 0 ? 0 : ws; iw < we; iw++) acc = r[iw] > acc ? r[iw] : acc;
        h[ow - c0] = acc;
    }
}

/* 2-D max pooling without dilation or indices, separably: each output row is the running max over
 * its window's rows of their horizontal window maxima (maxpool_row), in chunks of columns. Same
 * bits as the row-major scan: strict > in both passes keeps the first maximum in row-major order.
 * The scan's data-dependent branch mispredicted (shufflenet's 3x3 stride-2 MaxPool was 18% of its
 * inference at batch 32). Each input row's maxima are made once and kept in a ring while the
 * windows still need them: a 3x3 stride-2 window shares a row with the next, and redoing it was
 * half of squeezenet's pooling time. */
static void maxpool2d_planes(const pool_args *a, int64_t p0, int64_t p1) {
    const ot_conv_geom *g = a->g;
    const int64_t H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    enum { CHUNK = 256, RING = 2048 };
    float ring[RING];   /* rows of a chunk's horizontal maxima, row ih in slot ih % slots */
    int64_t held[RING]; /* the input row each slot holds (-1: none) */
    for (int64_t pl = p0; pl < p1; pl++) {
        const float *x = a->X + pl * g->in_size;
        for (int64_t c0 = 0; c0 < OW; c0 += CHUNK) {
            const int64_t n = OW - c0 < CHUNK ? OW - c0 : CHUNK, slots = RING / n;
            for (int64_t i = 0; i < slots; i++) held[i] = -1;
            for (int64_t oh = 0; oh < OH; oh++) {
                float *y = a->Y + pl * g->out_size + oh * OW + c0;
                int64_t hs = oh * g->stride[1] - g->pb[1], he = hs + g->k[1] < H ? hs + g->k[1] : H;
                if (hs < 0) hs = 0;
                for (int64_t j = 0; j < n; j++) y[j] = -INFINITY;
                for (int64_t ih = hs; ih < he; ih++) {
                    float *h = ring + ih % slots * n;
                    if (held[ih % slots] != ih) { /* windows taller than the ring make rows again */
                        maxpool_row(x + ih * W, W, c0, c0 + n, g->k[2], g->stride[2], g->pb[2], h);
                        held[ih % slots] = ih;
                    }
                    int64_t j = 0;
                    for (; j + 4 <= n; j += 4) ot_v4_store(y + j, pool_v4_max(ot_v4_load(y + j), ot_v4_load(h + j)));
                    for (; j < n; j++) y[j] = h[j] > y[j] ? h[j] : y[j];
                }
            }
        }
    }
}

/* 2-D max / average pooling without dilation or indices: clipped windows, no per-tap tests. */
static void pool2d_fast(pool_args *a, int64_t p0, int64_t p1) {
    const ot_conv_geom *g = a->g;
    const int64_t H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2], kh = g->k[1], kw = g->k[2];
    const int64_t sh = g->stride[1], sw = g->stride[2], ph = g->pb[1], pw = g->pb[2];
    const bool max = a->kind == POOL_MAX;
    for (int64_t pl = p0; pl < p1; pl++) {
        const float *x = a->X + pl * g->in_size;
        float *y = a->Y + pl * g->out_size;
        if (max && kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && OH * 2 <= H && OW * 2 <= W) {
            for (int64_t oh = 0; oh < OH; oh++) {
                const float *r0 = x + 2 * oh * W, *r1 = r0 + W;
                float *yr = y + oh * OW;
                for (int64_t ow = 0; ow < OW; ow++) {
                    float m0 = r0[2 * ow] > r0[2 * ow + 1] ? r0[2 * ow] : r0[2 * ow + 1];
                    float m1 = r1[2 * ow] > r1[2 * ow + 1] ? r1[2 * ow] : r1[2 * ow + 1];
                    yr[ow] = m0 > m1 ? m0 : m1;
                }
            }
            continue;
        }
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t hs = oh * sh - ph, he = hs + kh, hp = he < H + g->pe[1] ? he : H + g->pe[1];
            if (he > H) he = H;
            int64_t cnt_h = hp - hs;
            if (hs < 0) hs = 0;
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t ws = ow * sw - pw, we = ws + kw, wp = we < W + g->pe[2] ? we : W + g->pe[2];
                if (we > W) we = W;
                int64_t cnt_w = wp - ws;
                if (ws < 0) ws = 0;
                float acc = max ? -INFINITY : 0.0f;
                for (int64_t ih = hs; ih < he; ih++) {
                    const float *r = x + ih * W;
                    if (max)
                        for (int64_t iw = ws; iw < we; iw++) acc = r[iw] > acc ? r[iw] : acc;
                    else
                        for (int64_t iw = ws; iw < we; iw++) acc += r[iw];
                }
                if (max) {
                    y[oh * OW + ow] = acc;
                } else {
                    int64_t c = a->include_pad ? cnt_h * cnt_w : (he - hs) * (we - ws);
                    y[oh * OW + ow] = c > 0 ? acc / (float)c : 0.0f;
                }
            }
        }
    }
}

/* 2-D max pooling with row-major indices (training) and no dilation: clipped windows as
 * pool2d_fast, the general loop's scan order and ties (the first maximum wins, NaN stays once
 * taken); a window wholly in the padding gives -inf at index 0 of its plane, as the general loop. */
static void pool2d_max_indices(pool_args *a, int64_t p0, int64_t p1) {
    const ot_conv_geom *g = a->g;
    const int64_t H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    for (int64_t pl = p0; pl < p1; pl++) {
        const float *x = a->X + pl * g->in_size;
        float *y = a->Y + pl * g->out_size;
        int64_t *ind = a->I + pl * g->out_size;
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t hs = oh * g->stride[1] - g->pb[1], he = hs + g->k[1];
            hs = hs < 0 ? 0 : hs, he = he > H ? H : he;
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t ws = ow * g->stride[2] - g->pb[2], we = ws + g->k[2];
                ws = ws < 0 ? 0 : ws, we = we > W ? W : we;
                float acc = -INFINITY;
                int64_t best = 0;
                if (hs < he && ws < we) {
                    best = hs * W + ws, acc = x[best];
                    for (int64_t ih = hs; ih < he; ih++)
                        for (int64_t iw = ws; iw < we; iw++) {
                            const int64_t off = ih * W + iw, m = -(int64_t)(x[off] > acc);
                            acc = x[off] > acc ? x[off] : acc;
                            best = (best & ~m) | (off & m);
                        }
                }
                y[oh * OW + ow] = acc;
                ind[oh * OW + ow] = pl * g->in_size + best;
            }
        }
    }
}

static void pool_planes(void *arg, int64_t p0, int64_t p1) {
    pool_args *a = arg;
    const ot_conv_geom *g = a->g;
    if (g->nd == 2 && !a->I && a->kind != POOL_LP && g->dil[1] == 1 && g->dil[2] == 1) {
        const bool max_2x2 =
            g->k[1] == 2 && g->k[2] == 2 && g->stride[1] == 2 && g->stride[2] == 2 && g->pb[1] == 0 && g->pb[2] == 0;
        if (a->kind == POOL_MAX && !max_2x2)
            maxpool2d_planes(a, p0, p1);
        else
            pool2d_fast(a, p0, p1);
        return;
    }
    const int64_t D = g->in[0], H = g->in[1], W = g->in[2];
    if (g->nd == 2 && a->I && !a->col_major && a->kind == POOL_MAX && g->k[1] == 2 && g->k[2] == 2 &&
        g->stride[1] == 2 && g->stride[2] == 2 && g->dil[1] == 1 && g->dil[2] == 1 && g->pb[1] == 0 && g->pb[2] == 0 &&
        g->out[1] * 2 <= H && g->out[2] * 2 <= W) {
        /* 2x2 stride 2 with indices (training): the general loop's scan order and ties (first max).
         * The winning tap's offset is chosen with masks: GCC turns selects of it into branches, which
         * mispredict (the winner is data-dependent) and keep the loop from vectorizing. */
        const int64_t OH = g->out[1], OW = g->out[2];
        for (int64_t pl = p0; pl < p1; pl++)
            for (int64_t oh = 0; oh < OH; oh++) {
                const float *restrict r0 = a->X + pl * g->in_size + 2 * oh * W, *restrict r1 = r0 + W;
                float *restrict y = a->Y + pl * g->out_size + oh * OW;
                int64_t *restrict ind = a->I + pl * g->out_size + oh * OW;
                const int64_t row = pl * g->in_size + 2 * oh * W;
                int64_t ow = 0;
#if defined(__wasm_simd128__)
                /* 4 windows at a time: the taps deinterleaved from two vectors per row, the scalar
                 * loop's compare-and-select chain lane-wise (same maxima, same first-max index) */
                const v128_t one = wasm_i32x4_splat(1), w0 = wasm_i32x4_splat((int32_t)W),
                             w1 = wasm_i32x4_splat((int32_t)W + 1);
                for (; ow + 4 <= OW; ow += 4) {
                    v128_t a0 = wasm_v128_load(r0 + 2 * ow), a1 = wasm_v128_load(r0 + 2 * ow + 4);
                    v128_t b0 = wasm_v128_load(r1 + 2 * ow), b1 = wasm_v128_load(r1 + 2 * ow + 4);
                    v128_t acc = wasm_i32x4_shuffle(a0, a1, 0, 2, 4, 6), best = wasm_i32x4_splat(0), m;
                    v128_t v1 = wasm_i32x4_shuffle(a0, a1, 1, 3, 5, 7), v2 = wasm_i32x4_shuffle(b0, b1, 0, 2, 4, 6),
                           v3 = wasm_i32x4_shuffle(b0, b1, 1, 3, 5, 7);
                    m = wasm_f32x4_gt(v1, acc);
                    acc = wasm_v128_bitselect(v1, acc, m);
                    best = wasm_v128_bitselect(one, best, m);
                    m = wasm_f32x4_gt(v2, acc);
                    acc = wasm_v128_bitselect(v2, acc, m);
                    best = wasm_v128_bitselect(w0, best, m);
                    m = wasm_f32x4_gt(v3, acc);
                    acc = wasm_v128_bitselect(v3, acc, m);
                    best = wasm_v128_bitselect(w1, best, m);
                    wasm_v128_store(y + ow, acc);
                    const v128_t base = wasm_i64x2_make(row + 2 * ow, row + 2 * ow + 2), four = wasm_i64x2_splat(4);
                    wasm_v128_store(ind + ow, wasm_i64x2_add(base, wasm_i64x2_extend_low_i32x4(best)));
                    wasm_v128_store(ind + ow + 2,
                                    wasm_i64x2_add(wasm_i64x2_add(base, four), wasm_i64x2_extend_high_i32x4(best)));
                }
#endif
                for (; ow < OW; ow++) {
                    float v0 = r0[2 * ow], v1 = r0[2 * ow + 1], v2 = r1[2 * ow], v3 = r1[2 * ow + 1], acc = v0;
                    int64_t best = 0, m;
                    m = -(int64_t)(v1 > acc), acc = v1 > acc ? v1 : acc, best = (best & ~m) | (1 & m);
                    m = -(int64_t)(v2 > acc), acc = v2 > acc ? v2 : acc, best = (best & ~m) | (W & m);
                    m = -(int64_t)(v3 > acc), acc = v3 > acc ? v3 : acc, best = (best & ~m) | ((W + 1) & m);
                    y[ow] = acc;
                    ind[ow] = row + 2 * ow + best;
                }
            }
        return;
    }
    if (g->nd == 2 && a->I && !a->col_major && a->kind == POOL_MAX && g->dil[1] == 1 && g->dil[2] == 1) {
        pool2d_max_indices(a, p0, p1);
        return;
    }
    for (int64_t pl = p0; pl < p1; pl++) {
        const float *x = a->X + pl * g->in_size;
        float *y = a->Y + pl * g->out_size;
        int64_t *ind = a->I ? a->I + pl * g->out_size : NULL;
        for (int64_t od = 0; od < g->out[0]; od++)
            for (int64_t oh = 0; oh < g->out[1]; oh++)
                for (int64_t ow = 0; ow < g->out[2]; ow++) {
                    int64_t s0 = od * g->stride[0] - g->pb[0], s1 = oh * g->stride[1] - g->pb[1],
                            s2 = ow * g->stride[2] - g->pb[2];
                    float acc = a->kind == POOL_MAX ? -INFINITY : 0.0f;
                    int64_t best = -1, cnt = 0, cnt_pad = 0;
                    for (int64_t kd = 0; kd < g->k[0]; kd++) {
                        int64_t id = s0 + kd * g->dil[0];
                        bool okd = id >= 0 && id < D;
                        if (id >= D + g->pe[0]) continue;
                        for (int64_t kh = 0; kh < g->k[1]; kh++) {
                            int64_t ih = s1 + kh * g->dil[1];
                            bool okh = okd && ih >= 0 && ih < H;
                            if (ih >= H + g->pe[1]) continue;
                            for (int64_t kw = 0; kw < g->k[2]; kw++) {
                                int64_t iw = s2 + kw * g->dil[2];
                                if (iw >= W + g->pe[2]) continue;
                                cnt_pad++;
                                if (!okh || iw < 0 || iw >= W) continue;
                                int64_t off = (id * H + ih) * W + iw;
                                float v = x[off];
                                cnt++;
                                if (a->kind == POOL_MAX) {
                                    if (v > acc || best < 0) acc = v, best = off;
                                } else if (a->kind == POOL_AVG) {
                                    acc += v;
                                } else {
                                    acc += powf(fabsf(v), a->p);
                                }
                            }
                        }
                    }
                    int64_t o = (od * g->out[1] + oh) * g->out[2] + ow;
                    if (a->kind == POOL_MAX) {
                        y[o] = acc;
                        if (ind) {
                            int64_t bi = best < 0 ? 0 : best;
                            if (a->col_major) { /* (h, w) -> h + w * H (2-D), general: reversed strides */
                                int64_t bw = bi % W, bh = (bi / W) % H, bd = bi / (W * H);
                                bi = bd + bh * D + bw * D * H;
                                if (g->nd == 2) bi = bh + bw * H;
                            }
                            ind[o] = pl * g->in_size + bi;
                        }
                    } else if (a->kind == POOL_AVG) {
                        int64_t c = a->include_pad ? cnt_pad : cnt;
                        y[o] = c ? acc / (float)c : 0.0f;
                    } else {
                        y[o] = powf(acc, 1.0f / a->p);
                    }
                }
    }
}

/* MaxPool in channel blocks (conv_depthwise.h): 16 planes a vector (AVX-512; AVX2: 8), so
 * small maps fill whole vectors and no tap needs a gather. squeezenet's 3x3 stride-2 pools (96 to
 * 512 channels, 29x29 to 7x7 maps) took 8x ORT's time as planes: the separable path's row maxima
 * are scalar or gathered on maps a few vectors wide. Slot s of n_slots takes its share of the
 * blocks with its own scratch. */
typedef struct maxpool_blocks_args {
    const ot_dw_plan *plan;
    const float *X;
    float *Y, *scratch;
    int64_t *I;   /* the indices output (row-major), or NULL */
    bool blocked; /* X and Y channel-blocked (channel_blocks.h): a block's planes are its positions' vectors */
    int64_t planes, n_blocks, n_slots, in_size, out_size;
} maxpool_blocks_args;

static void maxpool_block_slots(void *arg, int64_t s0, int64_t s1) {
    const maxpool_blocks_args *a = arg;
    const int64_t blk = a->plan->block;
    for (int64_t s = s0; s < s1; s++) {
        float *scratch = a->scratch + s * ot_conv_depthwise_block_scratch(a->plan);
        ot_conv_depthwise_block_max_init(a->plan, scratch);
        for (int64_t b = s * a->n_blocks / a->n_slots; b < (s + 1) * a->n_blocks / a->n_slots; b++) {
            const int64_t c = b * blk, nc = a->planes - c < blk ? a->planes - c : blk;
            if (a->blocked)
                ot_conv_depthwise_block_maxpool_blocked(a->plan, a->X + c * a->in_size, a->Y + c * a->out_size,
                                                        scratch);
            else if (a->I)
                ot_conv_depthwise_block_maxpool_indices(a->plan, a->X + c * a->in_size, nc, c, a->Y + c * a->out_size,
                                                        a->I + c * a->out_size, scratch);
            else
                ot_conv_depthwise_block_maxpool(a->plan, a->X + c * a->in_size, nc, a->Y + c * a->out_size, scratch);
        }
    }
}

/* The channel-block pooling of the planes (or blocks) of a (plan, X, Y, I, blocked and the sizes set). */
static otter_status maxpool_blocks_run(ot_kernel_ctx *ctx, maxpool_blocks_args a) {
    a.n_blocks = (a.planes + a.plan->block - 1) / a.plan->block;
    a.n_slots = ctx->n_threads > 1 ? OT_PARALLEL_CHUNKS_PER_THREAD * ctx->n_threads : 1;
    if (a.n_slots > a.n_blocks) a.n_slots = a.n_blocks;
    a.scratch = ot_ctx_scratch(ctx, (size_t)(a.n_slots * ot_conv_depthwise_block_scratch(a.plan)) * sizeof(float));
    if (!a.scratch) return OTTER_ERR_NOMEM;
    ot_parallel_for(ctx, a.n_slots, 1, maxpool_block_slots, &a);
    return OTTER_OK;
}

/* MaxPool in channel blocks (with row-major indices when I), *done, when the geometry allows and
 * they pay off. */
static otter_status maxpool_in_blocks(ot_kernel_ctx *ctx, const ot_conv_geom *g, const float *X, float *Y, int64_t *I,
                                      bool *done) {
    ot_dw_plan plan;
    const ot_conv_window w = ot_conv_geom_window(g);
    *done = g->nd == 2 && (!I || g->in_size <= INT32_MAX) /* offsets in a plane as int32 lanes */ &&
            ot_conv_depthwise_plan(&plan, &w, ot_conv_depthwise_isa()) && ot_conv_depthwise_block_pays_off(&plan);
    if (!*done) return OTTER_OK;
    const maxpool_blocks_args a = {
        .plan = &plan, .X = X, .Y = Y, .I = I, .planes = g->N * g->C, .in_size = g->in_size, .out_size = g->out_size};
    return maxpool_blocks_run(ctx, a);
}

void ot_nn_maxpool_2x2_indices(const ot_kernel_ctx *ctx, const float *x, int64_t planes, int64_t H, int64_t W, float *y,
                               int64_t *ind) {
    ot_conv_geom g = {.nd = 2, .in = {H, W}, .k = {2, 2}, .out = {H / 2, W / 2}, .stride = {2, 2}, .dil = {1, 1}};
    ot_conv_geom_to3(&g);
    pool_args a = {.g = &g, .kind = POOL_MAX, .X = x, .Y = y, .I = ind};
    ot_parallel_for(ctx, planes, 1 + 4096 / (g.out_size * g.k_size + 1), pool_planes, &a);
}

static otter_status pool_common(ot_kernel_ctx *ctx, int kind) {
    const otter_tensor *x = ot_ctx_input(ctx, 0);
    OT_TRY(ot_nn_check_x(ctx, x, 3));
    bool int_ok = kind == POOL_MAX && (x->dtype == OTTER_DTYPE_UINT8 || x->dtype == OTTER_DTYPE_INT8);
    if (!ot_nn_float_like(x->dtype) && !int_ok)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s': dtype %s not supported", ot_ctx_input_name(ctx, 0),
                            otter_dtype_name(x->dtype));
    ot_conv_geom g;
    memset(&g, 0, sizeof g);
    int nd = x->rank - 2;
    bool has;
    OT_TRY(ot_ctx_ints_attr(ctx, "kernel_shape", nd, g.k, &has));
    if (!has) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'kernel_shape' is missing");
    int64_t ceil_mode = 0, include_pad = 0, col_major = 0;
    if (kind == POOL_LP) /* LpPool has it from opset 18, after the ONNX 1.12 schemas */
        ceil_mode = ot_ctx_attr_int_or(ctx, "ceil_mode", 0);
    else
        OT_TRY(ot_ctx_attr_int(ctx, "ceil_mode", &ceil_mode));
    if (kind == POOL_AVG) OT_TRY(ot_ctx_attr_int(ctx, "count_include_pad", &include_pad));
    if (kind == POOL_MAX) OT_TRY(ot_ctx_attr_int(ctx, "storage_order", &col_major));
    OT_TRY(ot_nn_geom_forward(ctx, x, &g, ceil_mode));
    if (kind != POOL_MAX)
        for (int i = 0; i < nd; i++) g.dil[i] = g.dil[i] ? g.dil[i] : 1;
    int64_t yd[2 + OT_SP] = {g.N, g.C};
    for (int i = 0; i < nd; i++) yd[2 + i] = g.out[i];
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, yd);
    if (!y) return ctx->output_status;
    otter_tensor *ind = NULL;
    if (kind == POOL_MAX && ctx->n_outputs > 1 && ctx->node->n_outputs > 1 && !ot_str_empty(ctx->node->outputs[1])) {
        ind = ot_ctx_output(ctx, 1, OTTER_DTYPE_INT64, x->rank, yd);
        if (!ind) return ctx->output_status;
    }
    ot_conv_geom_to3(&g);
    pool_args a = {.g = &g,
                   .kind = kind,
                   .I = ind ? ind->data : NULL,
                   .include_pad = include_pad != 0,
                   .col_major = col_major != 0};
    if (kind == POOL_LP) {
        double p;
        OT_TRY(ot_nn_lp_pool_p(ctx, &p));
        a.p = (float)p;
    }
    float *tx = NULL, *ty = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, x, &a.X, &tx);
    if (s == OTTER_OK) s = ot_output_f32(y, &a.Y, &ty);
    bool in_blocks = false;
    if (s == OTTER_OK && kind == POOL_MAX && !a.col_major) s = maxpool_in_blocks(ctx, &g, a.X, a.Y, a.I, &in_blocks);
    if (s == OTTER_OK && !in_blocks)
        ot_parallel_for(ctx, g.N * g.C, 1 + 4096 / (g.out_size * g.k_size + 1), pool_planes, &a);
    if (s == OTTER_OK)
        ot_output_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(tx);
    return s;
}

otter_status ot_kernel_maxpool(ot_kernel_ctx *ctx) { return pool_common(ctx, POOL_MAX); }

/* com.otter BlockedMaxPool (runtime/layout.c): MaxPool's Y alone, X and Y channel-blocked,
 * the channel-block pooling reading each block as it is (the same bits as MaxPool). */
otter_status ot_kernel_blocked_maxpool(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0);
    OT_TRY(ot_channel_blocks_check(ctx, 0, x));
    const otter_tensor xv = ot_channel_blocks_planar(x);
    ot_conv_geom g;
    memset(&g, 0, sizeof g);
    bool has;
    OT_TRY(ot_ctx_ints_attr(ctx, "kernel_shape", 2, g.k, &has));
    if (!has) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'kernel_shape' is missing");
    int64_t ceil_mode = 0;
    OT_TRY(ot_ctx_attr_int(ctx, "ceil_mode", &ceil_mode));
    OT_TRY(ot_nn_geom_forward(ctx, &xv, &g, ceil_mode));
    const int64_t B = x->dims[4], yd[5] = {g.N, x->dims[1], g.out[0], g.out[1], B};
    ot_conv_geom_to3(&g);
    const ot_conv_window w = ot_conv_geom_window(&g);
    ot_dw_plan plan;
    if (!ot_conv_depthwise_plan(&plan, &w, ot_channel_block_isa(B)) || plan.block != B)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED,
                            "channel-blocked MaxPool of '%s' needs a window of at most %d taps",
                            ot_ctx_input_name(ctx, 0), OT_DW_MAX_TAPS);
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_FLOAT, 5, yd);
    if (!y) return ctx->output_status;
    if (otter_tensor_numel(y) == 0) return OTTER_OK;
    return ot_nn_blocked_maxpool(ctx, &plan, x->data, y->data, g.N * g.C / B, g.in_size, g.out_size);
}

otter_status ot_nn_blocked_maxpool(ot_kernel_ctx *ctx, const ot_dw_plan *plan, const float *x, float *y, int64_t blocks,
                                   int64_t in_size, int64_t out_size) {
    const maxpool_blocks_args a = {.plan = plan,
                                   .X = x,
                                   .Y = y,
                                   .blocked = true,
                                   .planes = blocks * plan->block,
                                   .in_size = in_size,
                                   .out_size = out_size};
    return maxpool_blocks_run(ctx, a);
}

otter_status ot_kernel_averagepool(ot_kernel_ctx *ctx) { return pool_common(ctx, POOL_AVG); }
otter_status ot_kernel_lppool(ot_kernel_ctx *ctx) { return pool_common(ctx, POOL_LP); }

typedef struct gpool_args {
    const float *X;
    float *Y;
    int64_t sp, B;    /* B: channels a block (channel-blocked X) */
    bool max, avx512; /* avx512: the CPU runs plane_sum_avx512 */
} gpool_args;

/* A plane's sum in double, eight lanes (lane l: elements l, l + 8, ...): a sequential sum waits an
 * add latency per element (GlobalAveragePool was 5% of efficientnet_b0 at batch 32). The order moves
 * the double sum by about n * 2^-53 * sum |x|, far below a float ulp: the float mean differs from
 * the sequential sum's only when the exact one is that close to a rounding boundary. */
static double plane_sum(const float *x, int64_t n) {
    typedef double d4 __attribute__((vector_size(32)));
    d4 s0 = {0, 0, 0, 0}, s1 = s0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 += __builtin_convertvector(ot_v4_load(x + i), d4);
        s1 += __builtin_convertvector(ot_v4_load(x + i + 4), d4);
    }
    s0 += s1;
    double s = (s0[0] + s0[1]) + (s0[2] + s0[3]);
    for (; i < n; i++) s += x[i];
    return s;
}

#ifdef OT_POOL_X86
/* plane_sum with AVX-512 for planes of at least 32 floats: four accumulators of eight doubles, so
 * the adds don't wait on each other (x86-64's baseline SSE2 converts two floats an instruction). */
__attribute__((target("avx512f"))) static double plane_sum_avx512(const float *x, int64_t n) {
    __m512d s0 = _mm512_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm256_loadu_ps(x + i)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8)));
        s2 = _mm512_add_pd(s2, _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 16)));
        s3 = _mm512_add_pd(s3, _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 24)));
    }
    for (; i + 8 <= n; i += 8) s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm256_loadu_ps(x + i)));
    double s = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(s0, s1), _mm512_add_pd(s2, s3)));
    for (; i < n; i++) s += x[i];
    return s;
}
#endif

static void gpool_planes(void *arg, int64_t p0, int64_t p1) {
    gpool_args *a = arg;
    const int64_t sp = a->sp;
    int64_t p = p0;
    if (!a->max && sp < 8) /* tiny planes (2x2 maps): four side by side, each summed in order */
        for (; p + 4 <= p1; p += 4) {
            const float *x = a->X + p * sp;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int64_t i = 0; i < sp; i++) s0 += x[i], s1 += x[sp + i], s2 += x[2 * sp + i], s3 += x[3 * sp + i];
            a->Y[p] = (float)(s0 / (double)sp), a->Y[p + 1] = (float)(s1 / (double)sp);
            a->Y[p + 2] = (float)(s2 / (double)sp), a->Y[p + 3] = (float)(s3 / (double)sp);
        }
    for (; p < p1; p++) {
        const float *x = a->X + p * sp;
        if (a->max) {
            float m = -INFINITY;
            for (int64_t i = 0; i < sp; i++) m = x[i] > m ? x[i] : m;
            a->Y[p] = m;
            continue;
        }
#ifdef OT_POOL_X86
        if (a->avx512 && sp >= 32) {
            a->Y[p] = (float)(plane_sum_avx512(x, sp) / (double)sp);
            continue;
        }
#endif
        a->Y[p] = (float)(plane_sum(x, sp) / (double)sp);
    }
}

#ifdef OT_POOL_X86
/* y[c] = the mean of x [sp][16] over its sp positions, c < 16, summed in double position by position (as
 * plane_sum, within n * 2^-53 of the exact sum). */
__attribute__((target("avx512f"))) static void block_mean_avx512(const float *x, int64_t sp, float *y) {
    __m512d lo = _mm512_setzero_pd(), hi = lo;
    for (int64_t i = 0; i < sp; i++) {
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm256_loadu_ps(x + i * 16)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_loadu_ps(x + i * 16 + 8)));
    }
    const __m512d n = _mm512_set1_pd((double)sp);
    _mm256_storeu_ps(y, _mm512_cvtpd_ps(_mm512_div_pd(lo, n)));
    _mm256_storeu_ps(y + 8, _mm512_cvtpd_ps(_mm512_div_pd(hi, n)));
}

/* The same for x [sp][8], even and odd positions summed apart (two adds in flight a lane) and then together. */
__attribute__((target("avx2"))) static void block_mean_avx2(const float *x, int64_t sp, float *y) {
    __m256d lo = _mm256_setzero_pd(), hi = lo, lo2 = lo, hi2 = lo;
    int64_t i = 0;
    for (; i + 2 <= sp; i += 2) {
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm_loadu_ps(x + i * 8)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm_loadu_ps(x + i * 8 + 4)));
        lo2 = _mm256_add_pd(lo2, _mm256_cvtps_pd(_mm_loadu_ps(x + i * 8 + 8)));
        hi2 = _mm256_add_pd(hi2, _mm256_cvtps_pd(_mm_loadu_ps(x + i * 8 + 12)));
    }
    if (i < sp) {
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm_loadu_ps(x + i * 8)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm_loadu_ps(x + i * 8 + 4)));
    }
    const __m256d n = _mm256_set1_pd((double)sp);
    _mm_storeu_ps(y, _mm256_cvtpd_ps(_mm256_div_pd(_mm256_add_pd(lo, lo2), n)));
    _mm_storeu_ps(y + 4, _mm256_cvtpd_ps(_mm256_div_pd(_mm256_add_pd(hi, hi2), n)));
}
#endif

/* Blocks [b0, b1) of B channels of a channel-blocked X: each channel's mean (ot_channel_blocks_check admits only
 * the blocks of the vector paths this CPU runs). */
static void gpool_blocks(void *arg, int64_t b0, int64_t b1) {
#ifdef OT_POOL_X86
    const gpool_args *a = arg;
    for (int64_t b = b0; b < b1; b++) {
        if (a->B == 16)
            block_mean_avx512(a->X + b * 16 * a->sp, a->sp, a->Y + b * 16);
        else
            block_mean_avx2(a->X + b * 8 * a->sp, a->sp, a->Y + b * 8);
    }
#else
    (void)arg, (void)b0, (void)b1;
#endif
}

/* com.otter BlockedGlobalAveragePool (runtime/layout.c): GlobalAveragePool of a channel-blocked X
 * [N][C / B][H][W][B] into planar [N][C][1][1] (the same layout as [N][C / B][1][1][B]). */
otter_status ot_kernel_blocked_globalaveragepool(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0);
    OT_TRY(ot_channel_blocks_check(ctx, 0, x));
    const int64_t yd[4] = {x->dims[0], x->dims[1] * x->dims[4], 1, 1};
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_FLOAT, 4, yd);
    if (!y) return ctx->output_status;
    gpool_args a = {.X = x->data, .Y = y->data, .sp = x->dims[2] * x->dims[3], .B = x->dims[4]};
    const int64_t blocks = x->dims[0] * x->dims[1];
    if (blocks) ot_parallel_for(ctx, blocks, 1 + 4096 / (a.B * a.sp + 1), gpool_blocks, &a); /* empty maps: 0 / 0 */
    return OTTER_OK;
}

static otter_status global_pool(ot_kernel_ctx *ctx, bool max) {
    const otter_tensor *x = ot_ctx_input(ctx, 0);
    if (!x) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input X is missing");
    if (x->rank < 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' must have rank >= 2", ot_ctx_input_name(ctx, 0));
    int64_t yd[OTTER_MAX_RANK];
    gpool_args a = {.sp = 1, .max = max, .avx512 = ot_vec_isa_best() == OT_VEC_AVX512};
    for (int i = 0; i < x->rank; i++) {
        yd[i] = i < 2 ? x->dims[i] : 1;
        if (i >= 2) a.sp *= x->dims[i];
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, yd);
    if (!y) return ctx->output_status;
    float *tx = NULL, *ty = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, x, &a.X, &tx);
    if (s == OTTER_OK) s = ot_output_f32(y, &a.Y, &ty);
    if (s == OTTER_OK) ot_parallel_for(ctx, x->dims[0] * x->dims[1], 1 + 16384 / (a.sp + 1), gpool_planes, &a);
    if (s == OTTER_OK)
        ot_output_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(tx);
    return s;
}

otter_status ot_kernel_globalaveragepool(ot_kernel_ctx *ctx) { return global_pool(ctx, false); }
otter_status ot_kernel_globalmaxpool(ot_kernel_ctx *ctx) { return global_pool(ctx, true); }
/* ---- MaxUnpool ------------------------------------------------------------------------------------ */

otter_status ot_kernel_maxunpool(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *ind = ot_ctx_input(ctx, 1), *os = ot_ctx_input(ctx, 2);
    OT_TRY(ot_nn_check_x(ctx, x, 3));
    if (!ind || ind->dtype != OTTER_DTYPE_INT64 || otter_tensor_numel(ind) != otter_tensor_numel(x))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' must be int64 with the shape of X",
                            ot_ctx_input_name(ctx, 1));
    int nd = x->rank - 2;
    int64_t k[OT_SP], st[OT_SP], pads[2 * OT_SP] = {0}, yd[2 + OT_SP] = {x->dims[0], x->dims[1]};
    bool has;
    OT_TRY(ot_ctx_ints_attr(ctx, "kernel_shape", nd, k, &has));
    if (!has) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'kernel_shape' is missing");
    for (int i = 0; i < nd; i++) st[i] = 1;
    OT_TRY(ot_ctx_ints_attr(ctx, "strides", nd, st, &has));
    OT_TRY(ot_ctx_ints_attr(ctx, "pads", 2 * nd, pads, &has));
    for (int i = 0; i < nd; i++) { /* unpooling is a transposed window (the same rule as shape inference) */
        int64_t pb = pads[i], pe = pads[nd + i];
        if (ot_window_transpose_axis(x->dims[2 + i], k[i], st[i], 1, 0, OT_AUTO_PAD_NOTSET, -1, true, &pb, &pe,
                                     &yd[2 + i]) != OT_WINDOW_OK)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "strides, kernel_shape and pads leave spatial axis %d no output", i);
    }
    int64_t dd[2 + OT_SP]; /* the default shape: indices are positions in it */
    memcpy(dd, yd, sizeof dd);
    if (os) {
        int64_t n;
        OT_TRY(ot_ctx_input_ints(ctx, 2, yd, 2 + OT_SP, &n));
        if (n != x->rank)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "output_shape '%s' must have %d values",
                                ot_ctx_input_name(ctx, 2), x->rank);
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, yd);
    if (!y) return ctx->output_status;
    int64_t ny = otter_tensor_numel(y), nx = otter_tensor_numel(x);
    size_t es = otter_dtype_size(x->dtype);
    memset(y->data, 0, (size_t)ny * es);
    const int64_t *I = ind->data;
    int64_t nd_total = 1;
    for (int i = 0; i < x->rank; i++) nd_total *= dd[i];
    for (int64_t i = 0; i < nx; i++) {
        int64_t q = I[i], o = 0, mul = 1;
        if (q < 0 || q >= nd_total)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' value %lld out of range [0, %lld)",
                                ot_ctx_input_name(ctx, 1), (long long)q, (long long)nd_total);
        for (int d = x->rank - 1; d >= 0; d--) {
            o += (q % dd[d]) * mul;
            q /= dd[d];
            mul *= yd[d];
        }
        if (o >= ny) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "output_shape is smaller than the pooled input");
        memcpy((char *)y->data + (size_t)o * es, (const char *)x->data + (size_t)i * es, es);
    }
    return OTTER_OK;
}
