/* Direct convolution with output channels in the lanes: see conv_lanes.h.
 *
 * The input is read where it is when the convolution has no padding, else from a zero-padded copy
 * (ot_conv_pad, one column phase: per padded row, every channel's row). Either way input (c, r, q)
 * is at r * row + c * chan + q, so each (channel, tap) k is one offset koff[k] and each output
 * position one base: a tile of 6 positions keeps 6 base pointers and walks koff.
 *
 * Weights are packed per block of 64 output channels as [K][64] (the last block as [K][16 nv],
 * zero-padded to whole vectors; for the AVX2 tiles as [64 / 16][K][16], cl_sub). With a->parts (a Concat of
 * convolutions fused into one) the blocks are cut per part and each takes only its part's window of taps. Work items
 * are (image, block, chunk of positions); an item runs its taps in passes of equal length that keep the block's weights
 * of a pass in L1 (at most 32 KB), each over all of its tiles, the partial sums staying in a position-major buffer on
 * the stack (L1) that is then transposed into the output planes. A channel-blocked input (a->x_blocked) is read the
 * same way with a column stride of B floats (the block), padded into [C / B][PH][QW][B]; into a channel-blocked output
 * (a->y_blocked) the last pass's tiles store straight from their registers (cl_out). A MaxPool fused after it (a->pool)
 * pools each image from its slot's buffer as soon as the image is done (cl_slots), else the batch from scratch. */
#include "runtime/ops/conv_lanes.h"

#include <string.h>

#include "core/core.h"
#include "runtime/ops/conv_depthwise.h"
#include "runtime/ops/fused_act.h"
#include "runtime/ops/nn_internal.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "runtime/ops/simd_transpose.h"
#define OT_CL_X86 1
#endif

#define CL_MR            6           /* positions per register tile */
#define CL_MR_ONE        12          /* positions per register tile of one vector of channels (16 output channels) */
#define CL_BLOCK         64          /* output channels per block (4 vectors) */
#define CL_CHUNK_P       96          /* positions per item, at most: the position-major buffer is 24 KB */
#define CL_CHUNK_K       128         /* taps per pass, at most: a block's weights of a pass are 32 KB */
#define CL_GROUP_WEIGHTS (512 << 10) /* bytes of weights above which small maps run images together */
/* Taps ahead whose weights a tile prefetches. A pass's first tile reads them from memory when the
 * layer's weights don't stay in L2 (ResNet-18's 256-channel 3x3 layers, 2.4 MB, at batch 1 and 4x4
 * positions: the weights are streamed for 16 positions), and the hardware prefetcher kept too few
 * lines in flight: 0.164 -> 0.139 ms a layer, as fast as the small-image product; resnet18 batch 1
 * 1.06x, the other models even. */
#define CL_PREFETCH_K 24

/* The AVX2 tiles serve outputs in blocks of 8 channels (runtime/layout.c's blocks on CPUs without AVX-512); the
 * AVX-512 ones planar outputs and blocks of 16. */
static bool cl_avx2(const ot_conv_direct *a) { return a->y_blocked && a->block == 8; }

bool ot_conv_lanes_supported(const ot_conv_direct *a) {
    const ot_conv_window *w = &a->win;
    const ot_conv_isa isa = ot_conv_direct_isa();
    const bool path =
        cl_avx2(a) ? isa >= OT_CONV_ISA_AVX2 && a->M >= 8
                   : isa == OT_CONV_ISA_AVX512 && a->M >= 16 && (!(a->x_blocked || a->y_blocked) || a->block == 16);
    return path && a->group == 1 && !a->maxpool_2x2 && w->in[0] == 1 && w->out[0] == 1 && w->k[0] == 1 &&
           w->pad_begin[1] >= 0 && w->pad_begin[2] >= 0;
}

/* Where it beats the other paths, measured on single convolutions (batch 32, 1 thread; one session
 * per path in one process, alternating runs, medians): 3x3 at 14x14 and 7x7 (SqueezeNet's expand
 * layers, 16-64 -> 64-256 channels) 1.09-1.28x the direct kernel, 256 -> 256 at 4x4 1.08x the
 * small-image product; where the width is a multiple of 8 and there are 64 positions or more the
 * direct kernel's lanes are full too and it stays even or ahead (0.98-1.0x at 8x8 to 32x32), and
 * 16 -> 24 at 14x14 (a half-empty last vector) lost 4%. 1x1 under 64 positions (the small-image
 * product transposes both ways) 1.02-1.29x, channel counts of 8s included when the taps are at least
 * twice as many (144 -> 24: 1.28x at 7x7). 1x1 at 64 positions or more: projections to 32-64
 * channels from at least as many 0.98-2.0x the per-image product (2.0x at 32x32, where that
 * product's rows of B are 4 KB apart), but to 16 channels (mobilenet_v2's 32 -> 16, one vector a
 * tile) 0.58x and to 24 0.70-0.74x, and expansions from 16-96 channels ~1.0x. */
bool ot_conv_lanes_pays_off(const ot_conv_direct *a) {
    if (!ot_conv_lanes_supported(a)) return false;
    const int64_t P = a->win.out[1] * a->win.out[2], OW = a->win.out[2], K = a->C * a->win.k[1] * a->win.k[2];
    if (P < 16) return false;
    if (a->win.k[1] * a->win.k[2] == 1)
        return P < 64 ? a->M % 16 == 0 || (a->M % 8 == 0 && K >= 2 * a->M)
                      : a->M % 16 == 0 && a->M >= 32 && a->M <= 64 && K >= a->M;
    return a->M % 16 == 0 && (OW % 8 != 0 || P < 64);
}

#ifdef OT_CL_X86

/* Channels a tile of a block of nm covers: all (AVX-512), or 16 (AVX2), each such part of the block's packed
 * weights [K][sub] on its own, so that a tile streams them in order (as [K][64] an AVX2 tile read a quarter of each
 * 256-byte row: ResNet-18's 512-channel layers, whose weights come from memory at batch 1, ran at two thirds of the
 * speed). */
static int64_t cl_sub(const ot_conv_direct *a, int64_t nm) { return cl_avx2(a) ? 16 : (nm + 15) / 16 * 16; }

/* Up to CL_BLOCK output channels of one part (a->parts; the whole kernel without): its taps, its weights. */
typedef struct cl_block {
    int64_t m0, nm, K;   /* first channel, channels, taps */
    const int64_t *koff; /* per tap (channel, kernel row, kernel column) of the part's window */
    const float *wp;     /* packed weights [K][16 nv] (AVX2: [nv][K][16], cl_sub) */
    const float *bias;   /* the block's first bias, or NULL */
} cl_block;

/* How a tile reads its weights: from L1 or L2 where they stay for image after image (no software prefetch: its
 * loads would take the broadcasts' ports), prefetched CL_PREFETCH_K taps ahead (weights read once, from L3 or
 * memory), or in two streams as well (weights that don't stay in L2, see ot_conv_lanes_run). Only a pass's first
 * tile prefetches; the others find the pass's weights in L1 and read them in the same order (the same sums):
 * ResNet-18 at batch 1, one thread, 3.33 -> 3.22 ms against every tile prefetching (64 channels at 16x16: 0.117 ->
 * 0.111 ms a layer). */
typedef enum { CL_FEED_HOT, CL_FEED_PREFETCH, CL_FEED_TWO_STREAMS, CL_FEED_TWO_STREAMS_HOT } cl_feed;

typedef struct cl_plan {
    const ot_conv_direct *a;
    ot_conv_pad pad;        /* the padded copy (pad.xp NULL: none, the input is read in place) */
    int64_t row, chan, col; /* floats between input rows, channels (blocks of 16 when a->x_blocked) and columns */
    int64_t P, OW;          /* output positions, output width */
    int64_t sh, sw;         /* strides */
    const cl_block *blk;
    int64_t blocks, chunks; /* channel blocks and position chunks an image */
    int64_t groups;         /* > 0: an item is one of `groups` runs of whole images (small maps), not a chunk of one */
    int64_t slots;          /* > 0: images convolved one by one, a contiguous share a slot (cl_slots) */
    cl_feed feed;
    float *y; /* the unpooled result: a->y, or with a->pool the batch's scratch (images not one by one) */
    /* with a->pool, images one by one: per slot its image's unpooled result, then the pooling's scratch */
    float *slot_y;
    int64_t slot_floats;
} cl_plan;

/* A tile's last pass into a channel-blocked output: y[j][i][VL] = act(acc[i][j] + b[VL j..] (+ z[j][i][VL])) for
 * its positions i and vectors j (a vector a block), blocks bstride floats apart, Relu in registers (the epilogue of
 * ot_conv_rows_to_planes_avx512 in its order, so the same bits). Stored tile by tile, the stores overlap the next
 * tile's products; the other activations run on the item's blocks afterwards, while they are in cache. */
typedef struct cl_out {
    float *y;       /* the tile's first position in its first block */
    const float *z; /* shaped like y (it may be y), or NULL */
    const float *b; /* the block's biases, or NULL */
    int64_t bstride;
    bool relu;
} cl_out;

typedef void (*cl_tile_fn)(const float *const *xb, const int64_t *koff, int64_t kn, const float *w, int64_t ldw,
                           float *yt, bool add, cl_feed feed, const cl_out *out);

#include "runtime/ops/simd_v_avx512.inc"
#define CLT_ATTR     __attribute__((target("avx512f")))
#define CLT_SUFFIX   _avx512
#define CLT_NV       4
#define CLT_TWO_TAPS 16
#include "runtime/ops/conv_lanes_tile.inc"

/* AVX2: 6 positions x 16 channels (two blocks of 8) in 12 of the 16 registers, the direct GEMM kernel's shape */
#include "runtime/ops/simd_v_avx2.inc"
#define CLT_ATTR     __attribute__((target("avx2,fma")))
#define CLT_SUFFIX   _avx2
#define CLT_NV       2
#define CLT_TWO_TAPS 8
#include "runtime/ops/conv_lanes_tile.inc"

/* 16 x 16 transposes: a store is a plane's 16 positions (the 4 x 4 SSE ones of nn_conv.c store 16
 * bytes a plane at a time, one line each: store-bound, 5.9% of mobilenet_v2's inference at batch
 * 32). Relu in registers (max with +0: NaN and -0 become +0, Relu's bits); the other activations on
 * runs of planes of at least 256 floats when the planes are contiguous (ldy == P), else plane by
 * plane, as they are written (in L1). */
__attribute__((target("avx512f"))) void ot_conv_rows_to_planes_avx512(const float *yt, int64_t ldt, int64_t M,
                                                                      int64_t P, const float *b, const float *z,
                                                                      const ot_fused_act *act, float *y, int64_t ldy) {
    const bool relu = act && act->kind == OT_FUSED_RELU, other = act && act->kind != OT_FUSED_NONE && !relu;
    int64_t m_act = 0; /* contiguous planes [m_act, m) written, not yet activated */
    for (int64_t m = 0; m < M; m += 16) {
        const int64_t nm = M - m < 16 ? M - m : 16;
        const __mmask16 mm = ot_lanes16(nm);
        const __m512 bias = b ? _mm512_maskz_loadu_ps(mm, b + m) : _mm512_setzero_ps();
        for (int64_t p = 0; p < P; p += 16) {
            const int64_t np = P - p < 16 ? P - p : 16;
            const __mmask16 pm = ot_lanes16(np);
            __m512 r[16];
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                r[j] = j < np ? _mm512_add_ps(_mm512_maskz_loadu_ps(mm, yt + (p + j) * ldt + m), bias)
                              : _mm512_setzero_ps();
            ot_transpose16_avx512(r);
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                if (i >= nm) break;
                const int64_t at = (m + i) * ldy + p;
                __m512 v = z ? _mm512_add_ps(r[i], _mm512_maskz_loadu_ps(pm, z + at)) : r[i];
                if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
                _mm512_mask_storeu_ps(y + at, pm, v);
            }
        }
        if (other && ldy != P)
            for (int64_t i = 0; i < nm; i++) ot_fused_act_apply(act, y + (m + i) * ldy, P);
        else if (other && (m + nm - m_act) * P >= 256) {
            ot_fused_act_apply(act, y + m_act * P, (m + nm - m_act) * P);
            m_act = m + nm;
        }
    }
    if (other && ldy == P) ot_fused_act_apply(act, y + m_act * P, (M - m_act) * P);
}

/* Image x's zero-padded copy xp when the input is in blocks of B channels: [C / B][PH][QW][B], each padded
 * row the input row's run of columns (all of them, or as many as the windows reach) between zeros. */
static void cl_pad_blocked(const ot_conv_pad *p, int64_t B, const float *x, float *xp, int64_t cb0, int64_t cb1) {
    const int64_t run = p->W < p->QW - p->pad_w ? p->W : p->QW - p->pad_w, after = p->QW - p->pad_w - run;
    for (int64_t cb = cb0; cb < cb1; cb++)
        for (int64_t r = 0; r < p->PH; r++) {
            float *dst = xp + (cb * p->PH + r) * p->QW * B;
            const int64_t ih = r - p->pad_h;
            if (ih < 0 || ih >= p->H) {
                memset(dst, 0, (size_t)(p->QW * B) * sizeof(float));
                continue;
            }
            memset(dst, 0, (size_t)(p->pad_w * B) * sizeof(float));
            memcpy(dst + p->pad_w * B, x + (cb * p->H + ih) * p->W * B, (size_t)(run * B) * sizeof(float));
            memset(dst + (p->pad_w + run) * B, 0, (size_t)(after * B) * sizeof(float));
        }
}

/* ot_parallel_for body: units [u0, u1) = image * (C / B) + channel block padded (arg: the cl_plan of a blocked
 * input; one image's blocks split over the threads too). */
static void cl_pad_blocked_units(void *arg, int64_t u0, int64_t u1) {
    const cl_plan *pl = arg;
    const ot_conv_pad *p = &pl->pad;
    const int64_t B = pl->a->block, nb = p->C / B;
    for (int64_t u = u0; u < u1;) {
        const int64_t n = u / nb, cb1 = u1 - n * nb < nb ? u1 - n * nb : nb;
        cl_pad_blocked(p, B, p->x + n * p->C * p->H * p->W, p->xp + n * p->image, u % nb, cb1);
        u = n * nb + cb1;
    }
}

/* The run of an item's positions [s0, s0 + *len) (of [g0, g0 + np)) that lies in one image, and the offset of
 * its first output in the block's first output plane (ps floats a position: the block size when blocked). */
static int64_t cl_run(const cl_plan *pl, int64_t m0, int64_t ps, int64_t g0, int64_t s0, int64_t np, int64_t *len) {
    const int64_t P = pl->P, g = g0 + s0;
    *len = P - g % P < np - s0 ? P - g % P : np - s0;
    return (g / P * pl->a->M + m0) * P + g % P * ps;
}

/* One item: channel block blk at the flattened positions [g0, g0 + np) (g = image * P + position: an item of
 * a small map spans images, its tiles don't); image n's input (padded or not) at x + (n - n0) * xstride, its
 * output at y + (n - y_n0) * M * P (a->sum's at a->sum + n * M * P). */
static void cl_item(const cl_plan *pl, const float *x, int64_t n0, int64_t xstride, float *y, int64_t y_n0, int64_t blk,
                    int64_t g0, int64_t np) {
    const ot_conv_direct *a = pl->a;
    const cl_block *bk = &pl->blk[blk];
    const int64_t P = pl->P, K = bk->K, m0 = bk->m0, nm = bk->nm;
    const int64_t B = a->y_blocked ? a->block : 1; /* floats between an output block's (plane's) positions */
    /* channels a tile: all of the block's (AVX-512: up to 4 vectors), or 16 (AVX2: two vectors, the registers'
     * limit), the tiles of a block's parts then running one after another at each run of positions; the
     * weights of a part are [K][sub] from w + j0 * K (cl_sub) */
    const bool avx2 = cl_avx2(a);
    const int64_t sub = cl_sub(a, nm), vl = avx2 ? 8 : 16;
    const int64_t y_skip = y_n0 * a->M * P;
    const float *w = bk->wp, *b = bk->bias;
    float yt[CL_CHUNK_P * CL_BLOCK] __attribute__((aligned(64)));
    /* each tile's base pointers: position p at output (p / OW, p % OW) of image n */
    const float *xb[CL_CHUNK_P];
    const int64_t OW = pl->OW, OH = P / OW, drow = pl->sh * pl->row, dcol = pl->sw * pl->col;
    int64_t oh = g0 % P / OW, ow = g0 % P % OW;
    const float *img = x + (g0 / P - n0) * xstride, *rowp = img + oh * drow, *xp = rowp + ow * dcol;
    for (int64_t i = 0; i < np; i++, xp += dcol) {
        xb[i] = xp;
        if (++ow < OW) continue;
        ow = 0, xp = (rowp += drow) - dcol;
        if (++oh == OH) oh = 0, xp = (rowp = img += xstride) - dcol;
    }
    cl_out out = {.bstride = P * B, .relu = a->act.kind == OT_FUSED_RELU};
    /* passes of equal length: a short last pass (144 = 128 + 16 taps) pays the partial sums' round trip for
     * few products */
    const int64_t passes = (K + CL_CHUNK_K - 1) / CL_CHUNK_K, ck = (K + passes - 1) / passes;
    const int64_t mr = nm <= vl ? CL_MR_ONE : CL_MR;
    /* the pass's first tile brings its weights into L1, the others find them there */
    const cl_feed hot = pl->feed == CL_FEED_TWO_STREAMS ? CL_FEED_TWO_STREAMS_HOT : CL_FEED_HOT;
    for (int64_t k0 = 0; k0 < K; k0 += ck) {
        const int64_t kn = K - k0 < ck ? K - k0 : ck;
        const bool last = a->y_blocked && k0 + kn == K;
        /* part by part of the block's channels (its weights of the pass stay in L1 for all positions), image by image
         * ([s0, s0 + len) of the item), tile by tile */
        for (int64_t j0 = 0; j0 < nm; j0 += sub) {
            const int64_t nv = ((nm - j0 < sub ? nm - j0 : sub) + vl - 1) / vl;
            for (int64_t s0 = 0, len; s0 < np; s0 += len) {
                const int64_t at = cl_run(pl, m0, B, g0, s0, np, &len);
                /* tiles of near-equal size: 49 positions as 6 x 4 + 5 x 5, not 6 x 8 + 1 (a tile of one position
                 * waits an FMA latency a tap: half speed) */
                const int64_t n_tiles = (len + mr - 1) / mr;
                for (int64_t t = 0, i = s0; t < n_tiles; t++) {
                    const int64_t r = (len * (t + 1)) / n_tiles - (len * t) / n_tiles;
                    const cl_tile_fn tile = nv == 1 ? (avx2 ? cl_tiles_one_avx2 : cl_tiles_one_avx512)[r - 1]
                                            : avx2  ? cl_tiles_avx2[r - 1][nv - 1]
                                                    : cl_tiles_avx512[r - 1][nv - 1];
                    const int64_t o = (at - y_skip) + (i - s0) * B + j0 / vl * P * B; /* its first output */
                    out.y = y + o, out.z = a->sum ? a->sum + o + y_skip : NULL, out.b = b ? b + j0 : NULL;
                    tile(xb + i, bk->koff + k0, kn, w + j0 * K + k0 * sub, sub, yt + i * CL_BLOCK + j0, k0 > 0,
                         s0 == 0 && t == 0 ? pl->feed : hot, last ? &out : NULL);
                    i += r;
                }
            }
        }
    }
    /* image by image: the blocked output's other activations, the planar output's transposes */
    for (int64_t s0 = 0, len; s0 < np; s0 += len) {
        const int64_t at = cl_run(pl, m0, B, g0, s0, np, &len);
        if (!a->y_blocked)
            ot_conv_rows_to_planes_avx512(yt + s0 * CL_BLOCK, CL_BLOCK, nm, len, b, a->sum ? a->sum + at : NULL,
                                          &a->act, y + (at - y_skip), P);
        else if (a->act.kind != OT_FUSED_NONE && !out.relu)
            for (int64_t j = 0; j < nm / B; j++) ot_fused_act_apply(&a->act, y + (at - y_skip) + j * P * B, len * B);
    }
}

/* Item i of an image's chunks (i < blocks * chunks): its block, and its positions [*p0, *p0 + *np) of the image. */
static void cl_chunk(const cl_plan *pl, int64_t i, int64_t *blk, int64_t *p0, int64_t *np) {
    const int64_t per = (pl->P + pl->chunks - 1) / pl->chunks;
    *blk = i / pl->chunks, *p0 = i % pl->chunks * per;
    *np = pl->P - *p0 < per ? pl->P - *p0 : per;
}

/* Items [i0, i1) of (image, block, chunk), or of (group of images, block), the images already padded (or
 * read in place). */
static void cl_items(void *arg, int64_t i0, int64_t i1) {
    const cl_plan *pl = arg;
    const ot_conv_direct *a = pl->a;
    const float *x = pl->pad.xp ? pl->pad.xp : a->x;
    const int64_t xstride = pl->pad.xp ? pl->pad.image : a->C * pl->pad.H * pl->pad.W;
    for (int64_t i = i0; i < i1; i++) {
        if (pl->groups) {
            const int64_t q = i / pl->blocks, n0 = q * a->N / pl->groups, n1 = (q + 1) * a->N / pl->groups;
            cl_item(pl, x, 0, xstride, pl->y, 0, i % pl->blocks, n0 * pl->P, (n1 - n0) * pl->P);
            continue;
        }
        const int64_t per_image = pl->blocks * pl->chunks, n = i / per_image;
        int64_t blk, p0, np;
        cl_chunk(pl, i % per_image, &blk, &p0, &np);
        if (np > 0) cl_item(pl, x, 0, xstride, pl->y, 0, blk, n * pl->P + p0, np);
    }
}

/* Slots [s0, s1): slot s takes its contiguous share of the images (as the thread pool hands each thread
 * its own share of a range first, so a thread mostly reads images it wrote in the layer before), pads
 * each into its own buffer (when there is padding) and runs all of its items while that copy is in its
 * core's cache; with a->pool, into the slot's buffer, pooled from there while it is in cache. */
static void cl_slots(void *arg, int64_t s0, int64_t s1) {
    const cl_plan *pl = arg;
    const ot_conv_direct *a = pl->a;
    const int64_t image_in = a->C * pl->pad.H * pl->pad.W, per_image = pl->blocks * pl->chunks;
    for (int64_t s = s0; s < s1; s++) {
        ot_conv_pad pad = pl->pad;
        if (pad.xp) pad.xp += s * pad.image;
        float *y = pl->y, *pool_scratch = NULL;
        const int64_t B = a->block;
        const int64_t pooled_block = a->pool ? a->pool->OH * a->pool->OW * B : 0; /* floats a pooled block */
        if (a->pool) {
            y = pl->slot_y + s * pl->slot_floats, pool_scratch = y + a->M * pl->P;
            ot_conv_depthwise_block_max_init(a->pool, pool_scratch);
        }
        for (int64_t n = s * a->N / pl->slots; n < (s + 1) * a->N / pl->slots; n++) {
            const float *x = a->x + n * image_in;
            if (pad.xp && a->x_blocked) {
                cl_pad_blocked(&pad, B, x, pad.xp, 0, a->C / B);
                x = pad.xp;
            } else if (pad.xp) {
                pad.x = x;
                ot_conv_pad_rows(&pad, 0, pad.PH);
                x = pad.xp;
            }
            for (int64_t i = 0; i < per_image; i++) {
                int64_t blk, p0, np;
                cl_chunk(pl, i, &blk, &p0, &np);
                if (np > 0) cl_item(pl, x, n, 0, y, a->pool ? n : 0, blk, n * pl->P + p0, np);
            }
            for (int64_t j = 0; a->pool && j < a->M / B; j++)
                ot_conv_depthwise_block_maxpool_blocked(a->pool, y + j * pl->P * B,
                                                        a->pooled + (n * (a->M / B) + j) * pooled_block, pool_scratch);
        }
    }
}

otter_status ot_conv_lanes_run(ot_kernel_ctx *ctx, const ot_conv_direct *a) {
    const ot_conv_window *w = &a->win;
    const int64_t C = a->C, H = w->in[1], W = w->in[2], OH = w->out[1], OW = w->out[2], KH = w->k[1], KW = w->k[2];
    const int64_t dh = w->dil[1], dw = w->dil[2];
    const int64_t K = C * KH * KW;
    cl_plan pl = {.a = a, .P = OH * OW, .OW = OW, .sh = w->stride[1], .sw = w->stride[2]};
    pl.pad = (ot_conv_pad){.x = a->x,
                           .C = C,
                           .H = H,
                           .W = W,
                           .pad_h = w->pad_begin[1],
                           .pad_w = w->pad_begin[2],
                           .phases = 1,
                           .PH = (OH - 1) * pl.sh + (KH - 1) * dh + 1,
                           .QW = (OW - 1) * pl.sw + (KW - 1) * dw + 1};
    const bool padded = pl.pad.pad_h > 0 || pl.pad.pad_w > 0 || pl.pad.PH > H || pl.pad.QW > W;
    pl.pad.row = C * pl.pad.QW;
    pl.pad.image = pl.pad.PH * pl.pad.row;
    if (a->x_blocked) { /* [C / B][rows][columns][B], padded or not */
        pl.col = a->block;
        pl.row = (padded ? pl.pad.QW : W) * a->block;
        pl.chan = (padded ? pl.pad.PH * pl.pad.QW : H * W) * a->block;
    } else { /* [rows][C][columns] padded, [C][rows][columns] not */
        pl.col = 1;
        pl.row = padded ? pl.pad.row : W;
        pl.chan = padded ? pl.pad.QW : H * W;
    }
    /* the parts (one, the whole kernel, without a->parts): each its taps, its blocks */
    const int64_t whole[OT_CONV_PART_INTS] = {a->M, KH, KW, 0, 0};
    const int64_t *parts = a->parts ? a->parts : whole, n_parts = a->parts ? a->n_parts : 1;
    const float *const whole_w[1] = {a->w}, *const whole_b[1] = {a->bias};
    const float *const *part_w = a->parts ? a->part_w : whole_w, *const *part_b = a->parts ? a->part_b : whole_b;
    int64_t n_taps = 0;
    pl.blocks = 0;
    for (int64_t q = 0; q < n_parts; q++) {
        const int64_t *pt = parts + q * OT_CONV_PART_INTS;
        pl.blocks += (pt[0] + CL_BLOCK - 1) / CL_BLOCK;
        n_taps += C * pt[1] * pt[2];
    }
    pl.chunks = (pl.P + CL_CHUNK_P - 1) / CL_CHUNK_P;
    /* image by image (each slot padding its own), when every thread gets images: two slots a thread
     * with padding (a padded image's buffer each), OT_PARALLEL_CHUNKS_PER_THREAD without; else the
     * batch padded first and the items of its images shared */
    const int64_t T = ctx->n_threads, most = (padded ? 2 : OT_PARALLEL_CHUNKS_PER_THREAD) * T;
    /* small maps under weights that don't stay in L2: items of whole images, so that a block's weights stream
     * once for up to CL_CHUNK_P positions (ResNet-18's 512-channel layers at 2x2, 9.4 MB of weights: once an
     * image from L3 ran at 129 GFLOP/s), while every thread still gets OT_PARALLEL_CHUNKS_PER_THREAD items; the
     * batch is padded first. (Under smaller weights image by image kept its input in L1 and was faster:
     * mobilenet_v2's 96 -> 576 at 4x4, 221 KB, 0.17 ms against 0.22 at 2 threads.) */
    if (a->N > 1 && 2 * pl.P <= CL_CHUNK_P && a->M * K * (int64_t)sizeof(float) > CL_GROUP_WEIGHTS) {
        /* as few runs as fit, enough for the threads' items, a multiple of the threads (runs of equal size) */
        const int64_t fit = CL_CHUNK_P / pl.P, want = OT_PARALLEL_CHUNKS_PER_THREAD * T;
        int64_t g = (a->N + fit - 1) / fit;
        if (g * pl.blocks < want) g = (want + pl.blocks - 1) / pl.blocks;
        g = (g + T - 1) / T * T;
        pl.groups = g < a->N ? g : a->N;
    }
    /* Weights that don't stay in L2 are streamed from L3 or memory by each pass's first tile (all of them
     * at 2x2 to 4x4 positions), bound by how many of their lines are in flight: read as two streams, taps k
     * and half + k of a pass in turn, the prefetchers keep twice as many (ResNet-18 at batch 1, one thread:
     * the 512-channel 3x3 layers 0.47 -> 0.37 ms, the 128- and 256-channel ones 0.13 -> 0.12 and 0.20 ->
     * 0.18). A different summation order, so the whole convolution takes it or none of it; smaller weights
     * (read from L1 by every tile) gain nothing. Weights that stay in L2 are read from L3 or memory once a
     * thread's image: prefetched where that is most of their reads (up to two images a thread; batch 1:
     * efficientnet_b0 1.36 -> 1.30 ms, mobilenet_v2 0.70 -> 0.68), not where they are hot (SqueezeNet at batch 32,
     * one thread: 19.2 -> 18.5 ms, the prefetches' loads took issue slots from the broadcasts). */
    pl.feed = a->M * K * (int64_t)sizeof(float) > CL_GROUP_WEIGHTS ? CL_FEED_TWO_STREAMS
              : a->N <= 2 * T                                      ? CL_FEED_PREFETCH
                                                                   : CL_FEED_HOT;
    const int64_t slots = a->N < T || pl.groups ? 0 : a->N < most ? a->N : most, bufs = slots ? slots : a->N;
    pl.slots = slots;
    pl.y = a->y;
    if (a->pool && slots) {
        pl.slot_floats = a->M * pl.P + (ot_conv_depthwise_block_scratch(a->pool) + 15) / 16 * 16;
        if (!(pl.slot_y = ot_ctx_scratch(ctx, (size_t)(slots * pl.slot_floats) * sizeof(float))))
            return OTTER_ERR_NOMEM;
    } else if (a->pool && !(pl.y = ot_ctx_scratch(ctx, (size_t)(a->N * a->M * pl.P) * sizeof(float)))) {
        return OTTER_ERR_NOMEM;
    }
    /* fewer images than threads and items that don't split evenly: chunks of positions small enough (down
     * to four tiles) that every thread gets OT_PARALLEL_CHUNKS_PER_THREAD items (ResNet-18 at batch 1: a
     * 64-channel layer's 16x16 positions in 3 chunks left one of two threads a third of the work; smaller
     * chunks of an even split only stream the weights more often) */
    if (!slots && !pl.groups && T > 1 && a->N * pl.blocks * pl.chunks % T != 0) {
        const int64_t want = (OT_PARALLEL_CHUNKS_PER_THREAD * T + a->N * pl.blocks - 1) / (a->N * pl.blocks),
                      most_chunks = (pl.P + 4 * CL_MR - 1) / (4 * CL_MR);
        const int64_t c = want < most_chunks ? want : most_chunks;
        if (c > pl.chunks) pl.chunks = c;
    }
    int64_t *koff = ot_ctx_scratch(ctx, (size_t)n_taps * sizeof(int64_t));
    cl_block *blk = ot_ctx_scratch(ctx, (size_t)pl.blocks * sizeof *blk);
    bool fill_w;
    /* (every part but the last has a multiple of 16 channels: the blocks' packed weights fit) */
    float *wp = ot_conv_packed_weights(ctx, a, OT_CONV_FORM_LANES, (size_t)((a->M + 15) / 16 * 16 * K), &fill_w);
    if (padded && !(pl.pad.xp = ot_ctx_scratch(ctx, (size_t)(bufs * pl.pad.image) * sizeof(float))))
        return OTTER_ERR_NOMEM;
    if (!koff || !blk || !wp) return OTTER_ERR_NOMEM;
    float *wb = wp;
    for (int64_t q = 0, m0 = 0, nb = 0; q < n_parts; q++) {
        const int64_t *pt = parts + q * OT_CONV_PART_INTS, Kq = C * pt[1] * pt[2];
        for (int64_t c = 0, k = 0; c < C; c++)
            for (int64_t r = pt[3]; r < pt[3] + pt[1]; r++)
                for (int64_t s = pt[4]; s < pt[4] + pt[2]; s++)
                    koff[k++] = (a->x_blocked ? c / a->block * pl.chan + c % a->block : c * pl.chan) + r * dh * pl.row +
                                s * dw * pl.col;
        for (int64_t mb = 0; mb < pt[0]; mb += CL_BLOCK) {
            const int64_t nm = pt[0] - mb < CL_BLOCK ? pt[0] - mb : CL_BLOCK, ldw = (nm + 15) / 16 * 16,
                          sub = cl_sub(a, nm);
            blk[nb++] = (cl_block){
                .m0 = m0 + mb, .nm = nm, .K = Kq, .koff = koff, .wp = wb, .bias = part_b[q] ? part_b[q] + mb : NULL};
            /* the part's weights [channels][C][rows][columns] as [ldw / sub][Kq][sub] */
            for (int64_t k = 0; fill_w && k < Kq; k++)
                for (int64_t i = 0; i < ldw; i++)
                    wb[(i / sub * Kq + k) * sub + i % sub] = i < nm ? part_w[q][(mb + i) * Kq + k] : 0.0f;
            wb += ldw * Kq;
        }
        koff += Kq, m0 += pt[0];
    }
    pl.blk = blk;
    if (slots) {
        ot_parallel_for(ctx, slots, 1, cl_slots, &pl);
    } else {
        if (padded && a->x_blocked)
            ot_parallel_for(ctx, a->N * (C / a->block), 1, cl_pad_blocked_units, &pl);
        else if (padded)
            ot_parallel_for(ctx, a->N * pl.pad.PH, 1, ot_conv_pad_rows, &pl.pad);
        ot_parallel_for(ctx, pl.groups ? pl.groups * pl.blocks : a->N * pl.blocks * pl.chunks, 1, cl_items, &pl);
        if (a->pool)
            return ot_nn_blocked_maxpool(ctx, a->pool, pl.y, a->pooled, a->N * a->M / a->block, pl.P,
                                         a->pool->OH * a->pool->OW);
    }
    return OTTER_OK;
}

#else

otter_status ot_conv_lanes_run(ot_kernel_ctx *ctx, const ot_conv_direct *a) {
    (void)a;
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "channel-lane convolution needs x86-64 with AVX2 or AVX-512");
}

#endif
