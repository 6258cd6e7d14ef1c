/* Direct 2-D convolution: see conv_direct.h.
 *
 * The padded input (ot_conv_pad) has sw column phases: output position ow under tap kw reads
 * padded column ow * sw + kw * dw = phase (kw * dw) % sw, column ow + (kw * dw) / sw, so
 * consecutive outputs read consecutive floats for any stride, and every (channel, tap) is one
 * offset (a row offset per (channel, kernel row) plus a column offset per kernel column). Padded
 * rows hold all channels, so the rows a run of output rows reads are one contiguous block
 * (hardware prefetch and TLB friendly).
 *
 * Output rows are cut into "halves" of 8 positions (the last one of a row may be short); a tile
 * is two halves (from the same or neighbouring rows), so rows of any width fill the 16 lanes.
 * Weights are packed per block of MR output channels as [K][MR] so that the inner loop
 * broadcasts MR consecutive floats. Work items are (image, group, run of tiles, run of channel
 * blocks); each item walks its tiles once per channel block, keeping the block's weights in L1.
 *
 * AVX2 tiles are 6 channels x 16 positions (12 ymm accumulators); AVX-512 tiles are 12 channels x
 * two of those tiles (24 zmm accumulators, each zmm a tile's two halves: one load when they are
 * neighbours in a row, else two), the same epilogue storing each tile. */
#include "runtime/ops/conv_direct.h"

#include <stdatomic.h>
#include <string.h>

#include "core/core.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "runtime/ops/simd_transpose.h"
#define OT_DC_X86 1
#endif

/* The tests' cap on the vector path (OT_CONV_ISA_AVX512: none). */
static atomic_int dc_isa_cap = OT_CONV_ISA_AVX512;

void ot_conv_direct_cap_isa(ot_conv_isa cap) { atomic_store(&dc_isa_cap, (int)cap); }

ot_conv_isa ot_conv_direct_isa(void) {
#ifdef OT_DC_X86
    __builtin_cpu_init();
    ot_conv_isa best = !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ? OT_CONV_ISA_NONE
                       : __builtin_cpu_supports("avx512f")                               ? OT_CONV_ISA_AVX512
                                                                                         : OT_CONV_ISA_AVX2;
    const ot_conv_isa cap = (ot_conv_isa)atomic_load(&dc_isa_cap);
    return best < cap ? best : cap;
#else
    return OT_CONV_ISA_NONE;
#endif
}

bool ot_conv_direct_supported(const ot_conv_window *w) {
    return w->in[0] == 1 && w->out[0] == 1 && w->k[0] == 1 && ot_conv_direct_isa() != OT_CONV_ISA_NONE;
}

/* The node's cache: a block per packed form, allocated on first use. */
typedef struct dc_cache {
    float *form[OT_CONV_FORMS];
} dc_cache;

static void dc_cache_free(void *p) {
    dc_cache *c = p;
    for (int f = 0; f < OT_CONV_FORMS; f++) ot_free(c->form[f]);
    ot_free(c);
}

float *ot_conv_packed_weights(ot_kernel_ctx *ctx, const ot_conv_direct *a, int form, size_t n, bool *fill) {
    *fill = true;
    if (!a->constant_w) return ot_ctx_scratch(ctx, n * sizeof(float));
    void **slot = ot_ctx_cache(ctx, dc_cache_free);
    if (!*slot && !(*slot = ot_calloc(1, sizeof(dc_cache)))) {
        OT_NOMEM();
        return NULL;
    }
    dc_cache *c = *slot;
    *fill = !c->form[form];
    if (!c->form[form] && !(c->form[form] = ot_malloc(n * sizeof(float)))) OT_NOMEM();
    return c->form[form];
}

#ifdef OT_DC_X86

#define DC_HALF  8 /* positions per half tile (one AVX register) */
#define DC_TILES 8 /* tiles per work item, at most */

typedef struct dc_plan {
    const ot_conv_direct *a;
    int64_t Cg, Mg, K, OH, OW, sh;
    ot_conv_pad pad; /* the padded input: pad.xp, pad.row, pad.image, pad.QW, ... */
    int64_t row_halves, halves, tiles, tiles_per_item, tile_chunks, blk_chunks;
    float *wp;         /* packed weights: per group (Mg_packed x K floats), the channel blocks in order */
    int64_t Mg_packed; /* channels a group's packed weights hold: Mg, or (AVX-512) the last block's rounded up */
    ot_conv_isa isa;   /* the vector path */
    int64_t *roff;     /* per (channel, kernel row): offset into one image-group of xp */
    int64_t *kwoff;    /* per kernel column: offset added to a row's */
    int64_t n_rows, KW;
    int64_t n0;         /* the first image of the padded input */
    int64_t slots;      /* > 0: images padded and convolved one by one, per slot (dc_slots) */
    int64_t buf_floats; /* per pad buffer (one per slot, or one for the batch), slack included */
    bool kw3;           /* KW == 3 at stride and dilation 1: kwoff is 0, 1, 2 */
    bool pool;          /* a->maxpool_2x2 */
    int64_t *blk_m0;    /* channel blocks of a group: first channel and height */
    int *blk_mr;
    int n_blk;
} dc_plan;

int ot_conv_channel_blocks(int64_t Mg, int64_t *m0, int *mr) {
    int n = 0;
    int64_t q = Mg / OT_CONV_MR, r = Mg % OT_CONV_MR, m = 0;
    if (r == 2 && q > 0) q--, r = 8;
    for (int64_t i = 0; i < q; i++, n++) m0[n] = m, mr[n] = OT_CONV_MR, m += OT_CONV_MR;
    if (r == 8) {
        m0[n] = m, mr[n] = 4, m += 4, n++;
        m0[n] = m, mr[n] = 4, n++;
    } else if (r > 0) {
        m0[n] = m, mr[n] = (int)r, n++;
    }
    return n;
}

/* The P phase rows d[s * QW + q] = srow[P q + s - pw] (0 outside the row) of one input row. The
 * columns whose P inputs are all inside are gathered with vectors for P = 2 (8 columns at a time)
 * and P = 4 (an SSE 4x4 transpose, 4 at a time), the last vector overlapping the one before; the
 * others one by one. */
__attribute__((target("avx2"))) static void pad_phases(const float *srow, int64_t W, int64_t pw, int64_t QW, int64_t P,
                                                       float *d) {
    int64_t lo = pw <= 0 ? 0 : (pw + P - 1) / P, hi = (W + pw) / P; /* 0 <= P q - pw and P q + P - 1 - pw < W */
    if (hi > QW) hi = QW;
    if (lo > hi) lo = hi;
    int64_t q = lo;
    if (P == 2)
        for (; q < hi && hi - lo >= 8; q += 8) {
            if (q + 8 > hi) q = hi - 8; /* the last 8 overlap the ones before */
            const float *src = srow + 2 * q - pw;
            __m256 a = _mm256_loadu_ps(src), b = _mm256_loadu_ps(src + 8);
            __m256 even = _mm256_shuffle_ps(a, b, 0x88), odd = _mm256_shuffle_ps(a, b, 0xDD); /* a0 a2 b0 b2 | a4 .. */
            _mm256_storeu_ps(d + q, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xD8)));
            _mm256_storeu_ps(d + QW + q, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), 0xD8)));
        }
    if (P == 4)
        for (; q < hi && hi - lo >= 4; q += 4) {
            if (q + 4 > hi) q = hi - 4;
            const float *src = srow + 4 * q - pw;
            __m128 r0 = _mm_loadu_ps(src), r1 = _mm_loadu_ps(src + 4), r2 = _mm_loadu_ps(src + 8),
                   r3 = _mm_loadu_ps(src + 12);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            _mm_storeu_ps(d + q, r0), _mm_storeu_ps(d + QW + q, r1), _mm_storeu_ps(d + 2 * QW + q, r2);
            _mm_storeu_ps(d + 3 * QW + q, r3);
        }
    for (int64_t c = 0; c < QW; c++) {
        if (c == lo) c = q; /* [lo, q) done above */
        if (c >= QW) break;
        for (int64_t s = 0; s < P; s++) {
            int64_t iw = P * c + s - pw;
            d[s * QW + c] = iw >= 0 && iw < W ? srow[iw] : 0.0f;
        }
    }
}

/* One channel of a padded row: d[0..lo) = 0, d[lo..hi) = s[0..hi - lo), d[hi..QW) = 0. Such rows
 * hold tens of floats, where a memcpy / memset call costs more than the stores; the empty asm
 * statements keep the compiler from turning the loops into those calls. */
__attribute__((target("avx2"))) static void pad_channel(float *restrict d, const float *restrict s, int64_t lo,
                                                        int64_t hi, int64_t QW) {
    int64_t q = 0;
    for (; q < lo; q++) {
        d[q] = 0.0f;
        __asm__("" ::: "memory");
    }
    for (; q + 8 <= hi; q += 8) {
        __m256 v = _mm256_loadu_ps(s + q - lo);
        __asm__("" : "+x"(v));
        _mm256_storeu_ps(d + q, v);
    }
    for (; q < hi; q++) {
        d[q] = s[q - lo];
        __asm__("" ::: "memory");
    }
    for (; q < QW; q++) {
        d[q] = 0.0f;
        __asm__("" ::: "memory");
    }
}

/* Padded row r of image n, channel c: its ph phase rows at d (QW floats apart). */
static void pad_channel_row(const ot_conv_pad *p, const float *srow, float *d) {
    const int64_t W = p->W, ph = p->phases, pw = p->pad_w, QW = p->QW;
    if (ph == 1) {
        /* columns q with 0 <= q - pw < W are copied, the rest are zero (pw < 0 crops) */
        int64_t lo = pw < 0 ? 0 : pw < QW ? pw : QW, hi = pw + W < lo ? lo : pw + W < QW ? pw + W : QW;
        pad_channel(d, srow + (lo - pw), lo, hi, QW);
    } else {
        pad_phases(srow, W, pw, QW, ph, d);
    }
}

/* Padded rows u = (image, row) in [u0, u1). Per image, channel by channel, so that the input is
 * read in order (its rows of one channel are contiguous; reading all channels of one row instead
 * jumps a plane per row, which the prefetchers don't follow). */
void ot_conv_pad_rows(void *arg, int64_t u0, int64_t u1) {
    const ot_conv_pad *p = arg;
    const int64_t C = p->C, H = p->H, W = p->W, rowc = p->phases * p->QW; /* floats per channel of a row */
    for (int64_t u = u0; u < u1;) {
        const int64_t n = u / p->PH, r0 = u % p->PH, r1 = u1 - u < p->PH - r0 ? r0 + (u1 - u) : p->PH;
        float *img = p->xp + n * p->image;
        for (int64_t r = r0; r < r1; r++)
            if (r - p->pad_h < 0 || r - p->pad_h >= H) memset(img + r * p->row, 0, (size_t)p->row * sizeof(float));
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = r0; r < r1; r++) {
                const int64_t ih = r - p->pad_h;
                if (ih >= 0 && ih < H)
                    pad_channel_row(p, p->x + ((n * C + c) * H + ih) * W, img + r * p->row + c * rowc);
            }
        u += r1 - r0;
    }
}

/* acc + bias + z[0..lanes) (z: NULL for no sum input; lanes >= 1). */
__attribute__((target("avx2,fma"), always_inline)) static inline __m256 dc_bias_sum(__m256 acc, float bias,
                                                                                    const float *z, int lanes) {
    acc = _mm256_add_ps(acc, _mm256_set1_ps(bias));
    if (z) acc = _mm256_add_ps(acc, lanes == DC_HALF ? _mm256_loadu_ps(z) : _mm256_maskload_ps(z, ot_lanes8(lanes)));
    return acc;
}

/* Store one accumulator row: y[0..lanes) = act(acc + bias + z). */
__attribute__((target("avx2,fma"), always_inline)) static inline void dc_store(__m256 acc, float bias, const float *z,
                                                                               float *y, int lanes, bool relu) {
    if (lanes <= 0) return;
    acc = dc_bias_sum(acc, bias, z, lanes);
    if (relu) acc = _mm256_max_ps(acc, _mm256_setzero_ps());
    if (lanes == DC_HALF)
        _mm256_storeu_ps(y, acc);
    else
        _mm256_maskstore_ps(y, ot_lanes8(lanes), acc);
}

/* Store one accumulator row pair with 2x2 max pooling: the halves are rows 2r and 2r + 1 of one
 * channel at the same columns; y[0..plane_lanes) = act(max over each 2x2 of (acc + bias + z)),
 * the same operations in the same order as the unfused Conv, Add, Relu and MaxPool. */
__attribute__((target("avx2,fma"), always_inline)) static inline void dc_store_pool(__m256 a0, __m256 a1, float bias,
                                                                                    const float *z0, const float *z1,
                                                                                    float *y, int lanes,
                                                                                    int plane_lanes, bool relu) {
    a0 = dc_bias_sum(a0, bias, z0, lanes), a1 = dc_bias_sum(a1, bias, z1, lanes);
    __m256 v = _mm256_max_ps(a0, a1);
    v = _mm256_max_ps(v, _mm256_permute_ps(v, 0xB1)); /* lanes 2j and 2j + 1 both hold their max */
    __m128 q = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
    if (relu) q = _mm_max_ps(q, _mm_setzero_ps());
    if (plane_lanes == DC_HALF / 2)
        _mm_storeu_ps(y, q);
    else if (plane_lanes > 0)
        _mm_maskstore_ps(y, _mm256_castsi256_si128(ot_lanes8(plane_lanes)), q);
}

/* dc_store_pool with MaxPool's Indices: the activation first (as a Relu node before the MaxPool),
 * then per window the first maximum in scan order (a later tap wins only when greater: ties and NaN
 * keep the first), as the MaxPool kernel scans. ind: the window's index out; ibase: the flat position
 * of the first window's top-left input; W: the unpooled row length. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
dc_store_pool_ind(__m256 a0, __m256 a1, float bias, const float *z0, const float *z1, float *y, int64_t *ind,
                  int64_t ibase, int64_t W, int lanes, int plane_lanes, bool relu) {
    a0 = dc_bias_sum(a0, bias, z0, lanes), a1 = dc_bias_sum(a1, bias, z1, lanes);
    if (relu) a0 = _mm256_max_ps(a0, _mm256_setzero_ps()), a1 = _mm256_max_ps(a1, _mm256_setzero_ps());
    const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7); /* low half: even lanes, high: odd */
    a0 = _mm256_permutevar8x32_ps(a0, even), a1 = _mm256_permutevar8x32_ps(a1, even);
    __m128 acc = _mm256_castps256_ps128(a0), m;
    __m128i best = _mm_setzero_si128();
#define DC_TAKE(v, off)                                                                                                \
    m = _mm_cmp_ps(v, acc, _CMP_GT_OQ);                                                                                \
    acc = _mm_blendv_ps(acc, v, m);                                                                                    \
    best = _mm_blendv_epi8(best, _mm_set1_epi32((int)(off)), _mm_castps_si128(m));
    DC_TAKE(_mm256_extractf128_ps(a0, 1), 1)
    DC_TAKE(_mm256_castps256_ps128(a1), W)
    DC_TAKE(_mm256_extractf128_ps(a1, 1), W + 1)
#undef DC_TAKE
    __m256i iv = _mm256_add_epi64(_mm256_set1_epi64x(ibase),
                                  _mm256_cvtepi32_epi64(_mm_add_epi32(best, _mm_setr_epi32(0, 2, 4, 6))));
    if (plane_lanes == DC_HALF / 2) {
        _mm_storeu_ps(y, acc);
        _mm256_storeu_si256((__m256i *)ind, iv);
    } else if (plane_lanes > 0) {
        __m256i pm = ot_lanes8(plane_lanes);
        _mm_maskstore_ps(y, _mm256_castsi256_si128(pm), acc);
        _mm256_maskstore_epi64((long long *)ind, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(pm)), iv);
    }
}

/* The stores of a register tile (acc[2 i], acc[2 i + 1]: channel i's two halves). Out of line, so
 * that the constants of the stores are not hoisted into registers the tile's loop needs. */
__attribute__((target("avx2,fma"), noinline)) static void
dc_epilogue(const __m256 *acc, int mr, bool pool, const float *bias, const float *z0, const float *z1, float *y0,
            float *y1, int lanes0, int lanes1, int64_t ystride, int64_t pstride, int plane_lanes, bool relu,
            int64_t *ind0, int64_t ibase, int64_t ind_w) {
    for (int i = 0; i < mr; i++) {
        const float b = bias ? bias[i] : 0.0f;
        const float *zi0 = z0 ? z0 + i * ystride : NULL, *zi1 = z1 ? z1 + i * ystride : NULL;
        if (pool && ind0) {
            dc_store_pool_ind(acc[2 * i], acc[2 * i + 1], b, zi0, zi1, y0 + i * pstride, ind0 + i * pstride,
                              ibase + i * ystride, ind_w, lanes0, plane_lanes, relu);
        } else if (pool) {
            dc_store_pool(acc[2 * i], acc[2 * i + 1], b, zi0, zi1, y0 + i * pstride, lanes0, plane_lanes, relu);
        } else {
            dc_store(acc[2 * i], b, zi0, y0 + i * ystride, lanes0, relu);
            dc_store(acc[2 * i + 1], b, zi1, y1 + i * ystride, lanes1, relu);
        }
    }
}

/* Where one tile (two halves) reads and writes: x / y / z: the halves' first input in the
 * image-group's padded input, first output and sum input in channel 0 of the block (channels
 * ystride apart), lanes (0: no such half). Pooling: the halves are vertical neighbours, pooled into
 * y[0] (channels pstride apart, plane_lanes outputs), with Indices into ind when not NULL (ibase:
 * flat position of y[0]'s first window, channels ystride apart). */
typedef struct dc_io {
    const float *x[2];
    float *y[2];
    const float *z[2];
    int lanes[2], plane_lanes;
    int64_t *ind, ibase;
} dc_io;

/* What a block of channels shares over its tiles. */
typedef struct dc_block {
    const float *a;    /* packed weights [K][mr], or (AVX-512) [K][mr rounded up to 4] */
    const float *bias; /* the block's first, or NULL */
    int mr;            /* channels */
    int64_t ystride, pstride, ind_w;
    bool relu;
} dc_block;

/* The lines the stores read and write, fetched while the taps run: at large batches the sum input
 * and the output are in DRAM, and the stores would wait for them. */
static inline void dc_prefetch_io(const dc_io *io, const dc_block *bk, bool pool) {
    for (int i = 0; i < bk->mr; i++) {
        if (io->z[0]) __builtin_prefetch(io->z[0] + i * bk->ystride), __builtin_prefetch(io->z[1] + i * bk->ystride);
        __builtin_prefetch(io->y[0] + i * (pool ? bk->pstride : bk->ystride), 1);
        if (!pool) __builtin_prefetch(io->y[1] + i * bk->ystride, 1);
    }
}

/* One AVX2 register tile: MR channels x two halves. a: packed weights [K][MR]; taps: n_rows
 * (channel, kernel row) offsets roff, each followed by KW column offsets kwoff (KW3: the common 3
 * taps at +0, +1, +2, unrolled). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
dc_tile(const int MR, const bool KW3, const bool POOL, const dc_block *bk, const int64_t *restrict roff, int64_t n_rows,
        const int64_t *restrict kwoff, int64_t KW, const dc_io *io) {
    const float *restrict a = bk->a;
    const float *x0 = io->x[0], *x1 = io->x[1];
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps(),
           c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(), c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(),
           c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    __m256 b0, b1, av;
    dc_prefetch_io(io, bk, POOL);
#define DC_ROW(i, ca, cb)                                                                                              \
    if (MR > i) {                                                                                                      \
        av = _mm256_broadcast_ss(a + i);                                                                               \
        ca = _mm256_fmadd_ps(av, b0, ca);                                                                              \
        cb = _mm256_fmadd_ps(av, b1, cb);                                                                              \
    }
#define DC_TAP(p0, p1)                                                                                                 \
    b0 = _mm256_loadu_ps(p0), b1 = _mm256_loadu_ps(p1);                                                                \
    DC_ROW(0, c00, c01)                                                                                                \
    DC_ROW(1, c10, c11) DC_ROW(2, c20, c21) DC_ROW(3, c30, c31) DC_ROW(4, c40, c41) DC_ROW(5, c50, c51) a += MR;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *p0 = x0 + roff[r], *p1 = x1 + roff[r];
        if (KW3) {
            DC_TAP(p0, p1)
            DC_TAP(p0 + 1, p1 + 1)
            DC_TAP(p0 + 2, p1 + 2)
        } else {
            for (int64_t j = 0; j < KW; j++) {
                DC_TAP(p0 + kwoff[j], p1 + kwoff[j])
            }
        }
    }
#undef DC_TAP
#undef DC_ROW
    const __m256 acc[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
    dc_epilogue(acc, MR, POOL, bk->bias, io->z[0], io->z[1], io->y[0], io->y[1], io->lanes[0], io->lanes[1],
                bk->ystride, bk->pstride, io->plane_lanes, bk->relu, io->ind, io->ibase, bk->ind_w);
}

/* The n tiles io of one channel block, AVX2. */
__attribute__((target("avx2,fma"))) static void dc_block_avx2(const dc_plan *p, const dc_block *bk, const dc_io *io,
                                                              int64_t n) {
    for (int64_t t = 0; t < n; t++) switch (bk->mr) {
#define DC_CASE(R)                                                                                                     \
    case R:                                                                                                            \
        if (p->kw3 && p->pool)                                                                                         \
            dc_tile(R, true, true, bk, p->roff, p->n_rows, p->kwoff, 3, io + t);                                       \
        else if (p->kw3)                                                                                               \
            dc_tile(R, true, false, bk, p->roff, p->n_rows, p->kwoff, 3, io + t);                                      \
        else                                                                                                           \
            dc_tile(R, false, p->pool, bk, p->roff, p->n_rows, p->kwoff, p->KW, io + t);                               \
        break;
            DC_CASE(6)
            DC_CASE(5)
            DC_CASE(4)
            DC_CASE(3)
            DC_CASE(2)
            DC_CASE(1)
#undef DC_CASE
        }
}

#define DC_MR512 12 /* AVX-512: channels per register tile */

/* A zmm of tile io's two halves: one load where they are neighbours in memory (CONTIG), else two. */
__attribute__((target("avx512f"), always_inline)) static inline __m512
dc_load_halves(const bool CONTIG, const float *h0, const float *h1) {
    if (CONTIG) return _mm512_loadu_ps(h0);
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(h0))),
                                               _mm256_castps_pd(_mm256_loadu_ps(h1)), 1));
}

/* One AVX-512 register tile: MR (4, 8 or 12) channels x NV (1 or 2) tiles of the AVX2 kernel, zmm v
 * holding tile io[v]'s two halves; the weights are packed [K][MR] (channels past bk->mr are zero and
 * never stored). CONTIG: each tile's second half follows its first in memory. The stores are the
 * AVX2 kernel's, per tile. */
__attribute__((target("avx512f,avx2,fma"), always_inline)) static inline void
dc_tile512(const int MR, const int NV, const bool KW3, const bool CONTIG, const bool POOL, const dc_block *bk,
           const int64_t *restrict roff, int64_t n_rows, const int64_t *restrict kwoff, int64_t KW, const dc_io *io) {
    const float *restrict a = bk->a;
    const float *x00 = io[0].x[0], *x01 = io[0].x[1], *x10 = io[NV - 1].x[0], *x11 = io[NV - 1].x[1];
    __m512 c[DC_MR512][2];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
    for (int v = 0; v < NV; v++) dc_prefetch_io(io + v, bk, POOL);
#define DC_TAP512(off)                                                                                                 \
    {                                                                                                                  \
        const __m512 v0 = dc_load_halves(CONTIG, x00 + (off), x01 + (off));                                            \
        const __m512 v1 = NV > 1 ? dc_load_halves(CONTIG, x10 + (off), x11 + (off)) : v0;                              \
        _Pragma("GCC unroll 12") for (int i = 0; i < MR; i++) {                                                        \
            const __m512 av = _mm512_set1_ps(a[i]);                                                                    \
            c[i][0] = _mm512_fmadd_ps(av, v0, c[i][0]);                                                                \
            if (NV > 1) c[i][1] = _mm512_fmadd_ps(av, v1, c[i][1]);                                                    \
        }                                                                                                              \
        a += MR;                                                                                                       \
    }
    for (int64_t r = 0; r < n_rows; r++) {
        const int64_t o = roff[r];
        if (KW3) {
            DC_TAP512(o)
            DC_TAP512(o + 1)
            DC_TAP512(o + 2)
        } else {
            for (int64_t j = 0; j < KW; j++) DC_TAP512(o + kwoff[j])
        }
    }
#undef DC_TAP512
    for (int v = 0; v < NV; v++) {
        __m256 acc[2 * DC_MR512];
        for (int i = 0; i < MR; i++) {
            acc[2 * i] = _mm512_castps512_ps256(c[i][v]);
            acc[2 * i + 1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c[i][v]), 1));
        }
        dc_epilogue(acc, bk->mr, POOL, bk->bias, io[v].z[0], io[v].z[1], io[v].y[0], io[v].y[1], io[v].lanes[0],
                    io[v].lanes[1], bk->ystride, bk->pstride, io[v].plane_lanes, bk->relu, io[v].ind, io[v].ibase,
                    bk->ind_w);
    }
}

/* The n tiles io of one channel block, AVX-512: two at a time (the last alone when n is odd). */
__attribute__((target("avx512f,avx2,fma"))) static void dc_block_avx512(const dc_plan *p, const dc_block *bk,
                                                                        const dc_io *io, int64_t n) {
    const int mrp = (bk->mr + 3) / 4 * 4;
    for (int64_t t = 0; t < n; t += 2) {
        const int nv = t + 1 < n ? 2 : 1;
        bool contig = !p->pool;
        for (int v = 0; v < nv; v++) contig = contig && io[t + v].x[1] == io[t + v].x[0] + DC_HALF;
        const int sel = (mrp / 4 - 1) * 2 + (nv - 1);
        switch (sel) {
#define DC_VARIANTS(R, V)                                                                                              \
    if (p->kw3 && p->pool)                                                                                             \
        dc_tile512(R, V, true, false, true, bk, p->roff, p->n_rows, p->kwoff, 3, io + t);                              \
    else if (p->kw3 && contig)                                                                                         \
        dc_tile512(R, V, true, true, false, bk, p->roff, p->n_rows, p->kwoff, 3, io + t);                              \
    else if (p->kw3)                                                                                                   \
        dc_tile512(R, V, true, false, false, bk, p->roff, p->n_rows, p->kwoff, 3, io + t);                             \
    else if (contig)                                                                                                   \
        dc_tile512(R, V, false, true, false, bk, p->roff, p->n_rows, p->kwoff, p->KW, io + t);                         \
    else                                                                                                               \
        dc_tile512(R, V, false, false, p->pool, bk, p->roff, p->n_rows, p->kwoff, p->KW, io + t);                      \
    break;
        case 0:
            DC_VARIANTS(4, 1)
        case 1:
            DC_VARIANTS(4, 2)
        case 2:
            DC_VARIANTS(8, 1)
        case 3:
            DC_VARIANTS(8, 2)
        case 4:
            DC_VARIANTS(12, 1)
        default:
            DC_VARIANTS(12, 2)
#undef DC_VARIANTS
        }
    }
}

/* Work items [i0, i1): item = (image, group, run of tiles). */
static void dc_items(void *arg, int64_t i0, int64_t i1) {
    const dc_plan *p = arg;
    const ot_conv_direct *a = p->a;
    const int64_t OH = p->OH, OW = p->OW, osz = OH * OW, psz = (OH / 2) * (OW / 2), rh = p->row_halves;
    const bool relu = a->act.kind == OT_FUSED_RELU, other_act = !relu && a->act.kind != OT_FUSED_NONE;
    for (int64_t it = i0; it < i1; it++) {
        int64_t per_group = p->tile_chunks * p->blk_chunks, ng = it / per_group, gr = ng % a->group;
        int64_t in = ng / a->group, n = p->n0 + in; /* image in the padded input, in the batch */
        /* channel-block chunks counted from the last: the ones with an extra block are handed out
         * first, and the smaller ones even out the threads' finishing times */
        int64_t tc = it % per_group / p->blk_chunks, bc = p->blk_chunks - 1 - it % p->blk_chunks;
        int64_t t0 = tc * p->tiles_per_item, t1 = t0 + p->tiles_per_item < p->tiles ? t0 + p->tiles_per_item : p->tiles;
        int b0 = (int)(bc * p->n_blk / p->blk_chunks), b1 = (int)((bc + 1) * p->n_blk / p->blk_chunks);
        const float *xg = p->pad.xp + in * p->pad.image + gr * p->Cg * a->win.stride[2] * p->pad.QW;
        int64_t ych = n * a->M + gr * p->Mg; /* first output channel of the group */
        const float *wg = p->wp + gr * p->Mg_packed * p->K;
        /* the tiles' halves, worked out once for all the channel blocks */
        struct {
            int64_t x, y, pooled; /* offsets: padded input, output plane, pooled plane */
            int lanes;
        } hv[DC_TILES][2];
        int plane_lanes[DC_TILES];
        for (int64_t t = t0; t < t1; t++)
            for (int h = 0; h < 2; h++) {
                /* half tiles: two of a row in order, or (pooling) one below the other */
                int64_t hh = p->pool ? (t / rh * 2 + h) * rh + t % rh : 2 * t + h;
                bool none = hh >= p->halves; /* odd count: recompute half 0, store nothing */
                if (none) hh = 2 * t;
                int64_t oh = hh / rh, ow0 = (hh % rh) * DC_HALF;
                hv[t - t0][h].lanes = none ? 0 : OW - ow0 < DC_HALF ? (int)(OW - ow0) : DC_HALF;
                hv[t - t0][h].x = oh * p->sh * p->pad.row + ow0;
                hv[t - t0][h].y = oh * OW + ow0;
                hv[t - t0][h].pooled = oh / 2 * (OW / 2) + ow0 / 2;
                if (h == 0)
                    plane_lanes[t - t0] = OW / 2 - ow0 / 2 < DC_HALF / 2 ? (int)(OW / 2 - ow0 / 2) : DC_HALF / 2;
            }
        for (int b = b0; b < b1; b++) {
            const int64_t m0 = p->blk_m0[b];
            const dc_block bk = {.a = wg + m0 * p->K,
                                 .bias = a->bias ? a->bias + gr * p->Mg + m0 : NULL,
                                 .mr = p->blk_mr[b],
                                 .ystride = osz,
                                 .pstride = psz,
                                 .ind_w = OW,
                                 .relu = relu};
            const int64_t plane = (ych + m0) * osz, pplane = (ych + m0) * psz;
            dc_io io[DC_TILES];
            for (int64_t t = t0; t < t1; t++) {
                dc_io *o = io + (t - t0);
                for (int h = 0; h < 2; h++) {
                    o->x[h] = xg + hv[t - t0][h].x;
                    o->y[h] = a->y + plane + hv[t - t0][h].y;
                    o->z[h] = a->sum ? a->sum + plane + hv[t - t0][h].y : NULL;
                    o->lanes[h] = hv[t - t0][h].lanes;
                }
                o->plane_lanes = p->pool ? plane_lanes[t - t0] : 0;
                o->ind = NULL, o->ibase = 0;
                if (p->pool) {
                    o->ibase = plane + hv[t - t0][0].y;
                    o->y[0] = a->y + pplane + hv[t - t0][0].pooled;
                    if (a->indices) o->ind = a->indices + pplane + hv[t - t0][0].pooled;
                }
            }
            if (p->isa == OT_CONV_ISA_AVX512)
                dc_block_avx512(p, &bk, io, t1 - t0);
            else
                dc_block_avx2(p, &bk, io, t1 - t0);
            /* the item's outputs of each channel are one run of the plane (never pooled here) */
            const int64_t last = t1 - 1 - t0, first_y = hv[0][0].y,
                          end_y =
                              hv[last][1].lanes ? hv[last][1].y + hv[last][1].lanes : hv[last][0].y + hv[last][0].lanes;
            for (int i = 0; other_act && i < bk.mr; i++)
                ot_fused_act_apply(&a->act, a->y + plane + i * osz + first_y, end_y - first_y);
        }
    }
}

/* Slots [s0, s1): slot s takes its contiguous share of the images (the thread pool hands each thread
 * its own share of the slots first, so a thread mostly reads images its core wrote in the layer
 * before; two slots a thread leave a slowed thread's second one to the other), pads each into its
 * own buffer and runs all of the image's items. */
static void dc_slots(void *arg, int64_t s0, int64_t s1) {
    const dc_plan *p = arg;
    const ot_conv_direct *a = p->a;
    const int64_t image_in = a->C * p->pad.H * p->pad.W, items = a->group * p->tile_chunks * p->blk_chunks;
    for (int64_t s = s0; s < s1; s++) {
        dc_plan q = *p;
        q.pad.xp = p->pad.xp + s * p->buf_floats;
        for (q.n0 = s * a->N / p->slots; q.n0 < (s + 1) * a->N / p->slots; q.n0++) {
            q.pad.x = a->x + q.n0 * image_in;
            ot_conv_pad_rows(&q.pad, 0, q.pad.PH);
            dc_items(&q, 0, items);
        }
    }
}

otter_status ot_conv_direct_run(ot_kernel_ctx *ctx, const ot_conv_direct *a) {
    const int wino = ot_conv_winograd_tile(a, ctx->n_threads);
    if (wino) return ot_conv_winograd_run(ctx, a, wino);
    const ot_conv_window *w = &a->win;
    dc_plan p = {
        .a = a, .Cg = a->C / a->group, .Mg = a->M / a->group, .OH = w->out[1], .OW = w->out[2], .sh = w->stride[1]};
    const int64_t KH = w->k[1], KW = w->k[2], sw = w->stride[2], dh = w->dil[1], dw = w->dil[2];
    p.K = p.Cg * KH * KW;
    const int64_t pw_full = (p.OW - 1) * sw + (KW - 1) * dw + 1; /* padded columns read */
    p.pad = (ot_conv_pad){.x = a->x,
                          .C = a->C,
                          .H = w->in[1],
                          .W = w->in[2],
                          .pad_h = w->pad_begin[1],
                          .pad_w = w->pad_begin[2],
                          .phases = sw,
                          .PH = (p.OH - 1) * p.sh + (KH - 1) * dh + 1,
                          .QW = (pw_full + sw - 1) / sw};
    p.pad.row = a->C * sw * p.pad.QW;
    p.pad.image = p.pad.PH * p.pad.row;
    p.row_halves = (p.OW + DC_HALF - 1) / DC_HALF;
    p.halves = p.OH * p.row_halves;
    p.pool = a->maxpool_2x2;
    /* pooling: a tile is two rows of one column of halves (an odd last row is never pooled) */
    p.tiles = p.pool ? p.OH / 2 * p.row_halves : (p.halves + 1) / 2;
    p.isa = ot_conv_direct_isa();
    const bool avx512 = p.isa == OT_CONV_ISA_AVX512;
    int64_t max_blk = p.Mg / 4 + 2;
    /* Batches of 4 images a thread or more go image by image, each slot padding its own into
     * its own buffer and convolving it while the padded rows are in its L2 (a whole padded batch,
     * tens of MB at batch 64, came back from DRAM, and one barrier a conv replaces two an image).
     * Smaller batches are padded whole and their items shared by every thread. */
    p.slots = a->N >= 4 * (int64_t)ctx->n_threads ? 2 * (int64_t)ctx->n_threads : 0;
    const int64_t bufs = p.slots ? p.slots : 1, buf_images = p.slots ? 1 : a->N;
    p.buf_floats = buf_images * p.pad.image + OT_CONV_PAD_SLACK;
    p.pad.xp = ot_ctx_scratch(ctx, (size_t)(bufs * p.buf_floats) * sizeof(float));
    bool fill_w;
    p.Mg_packed = avx512 ? (p.Mg + 3) / 4 * 4 : p.Mg;
    p.wp = ot_conv_packed_weights(ctx, a, avx512 ? OT_CONV_FORM_DIRECT_AVX512 : OT_CONV_FORM_DIRECT,
                                  (size_t)(a->group * p.Mg_packed * p.K), &fill_w);
    p.n_rows = p.Cg * KH, p.KW = KW, p.kw3 = KW == 3 && sw == 1 && dw == 1;
    p.roff = ot_ctx_scratch(ctx, (size_t)p.n_rows * sizeof(int64_t));
    p.kwoff = ot_ctx_scratch(ctx, (size_t)KW * sizeof(int64_t));
    p.blk_m0 = ot_ctx_scratch(ctx, (size_t)max_blk * sizeof(int64_t));
    p.blk_mr = ot_ctx_scratch(ctx, (size_t)max_blk * sizeof(int));
    if (!p.pad.xp || !p.wp || !p.roff || !p.kwoff || !p.blk_m0 || !p.blk_mr) return OTTER_ERR_NOMEM;
    for (int64_t b = 0; b < bufs; b++) /* vector reads run past the last row */
        memset(p.pad.xp + (b + 1) * p.buf_floats - OT_CONV_PAD_SLACK, 0, OT_CONV_PAD_SLACK * sizeof(float));
    if (avx512) {
        /* blocks of 12; the last one's weights are padded with zeros to 4 or 8 channels */
        p.n_blk = 0;
        for (int64_t m = 0; m < p.Mg; m += DC_MR512, p.n_blk++)
            p.blk_m0[p.n_blk] = m, p.blk_mr[p.n_blk] = (int)(p.Mg - m < DC_MR512 ? p.Mg - m : DC_MR512);
    } else {
        p.n_blk = ot_conv_channel_blocks(p.Mg, p.blk_m0, p.blk_mr);
    }
    /* Items of at most DC_TILES tiles; when that leaves threads idle (small images), split the
     * channel blocks too rather than the tiles, so each block's weights still serve every tile. */
    int64_t groups = a->N * a->group, want = ctx->n_threads > 1 && !p.slots ? 4 * (int64_t)ctx->n_threads : 1;
    p.tiles_per_item = p.tiles < DC_TILES ? p.tiles : DC_TILES;
    p.tile_chunks = (p.tiles + p.tiles_per_item - 1) / p.tiles_per_item;
    p.blk_chunks = 1;
    while (p.blk_chunks < p.n_blk && groups * p.tile_chunks * p.blk_chunks < want) p.blk_chunks++;

    for (int64_t c = 0; c < p.Cg; c++)
        for (int64_t kh = 0; kh < KH; kh++) p.roff[c * KH + kh] = kh * dh * p.pad.row + c * sw * p.pad.QW;
    for (int64_t kw = 0; kw < KW; kw++) p.kwoff[kw] = (kw * dw) % sw * p.pad.QW + (kw * dw) / sw;
    for (int64_t gr = 0; fill_w && gr < a->group; gr++)
        for (int b = 0; b < p.n_blk; b++) {
            const int mr = p.blk_mr[b], mrp = avx512 ? (mr + 3) / 4 * 4 : mr;
            const int64_t m0 = gr * p.Mg + p.blk_m0[b];
            float *dst = p.wp + (gr * p.Mg_packed + p.blk_m0[b]) * p.K;
            for (int64_t k = 0; k < p.K; k++)
                for (int i = 0; i < mrp; i++) dst[k * mrp + i] = i < mr ? a->w[(m0 + i) * p.K + k] : 0.0f;
        }
    if (p.slots) {
        ot_parallel_for(ctx, p.slots, 1, dc_slots, &p);
    } else {
        ot_parallel_for(ctx, a->N * p.pad.PH, 1, ot_conv_pad_rows, &p.pad);
        ot_parallel_for(ctx, groups * p.tile_chunks * p.blk_chunks, 1, dc_items, &p);
    }
    return OTTER_OK;
}

#else

otter_status ot_conv_direct_run(ot_kernel_ctx *ctx, const ot_conv_direct *a) {
    (void)a;
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "direct convolution needs x86-64 with AVX2");
}

#endif
