/* Winograd F(4x4, 3x3) convolution (Lavin and Gray, "Fast Algorithms for Convolutional Neural
 * Networks", 2015): each 4x4 output tile comes from its 6x6 input tile d as
 *
 *     Y = A^T [ (G g G^T) (.) (B^T d B) ] A,
 *
 * 36 multiplications per channel pair where the direct convolution does 144. The 36 element-wise
 * products summed over input channels are 36 matrix products U[xi] (M x C) V[xi] (C x tiles).
 *
 * Tiles are taken in blocks of WG_TB (image-major, row by row). Per block, on one thread: the input
 * transform writes V[36][C][WG_TB] from the padded input (split into 4 column phases, so that the
 * same element of 8 horizontally neighbouring tiles is 8 consecutive floats: one vector load), the
 * 36 products write Y[36][M][WG_TB] with the direct kernel's 6 x 16 register tiles, and the output
 * transform writes the 4x4 tiles, adding bias and sum input, applying ReLU and the 2x2 max pooling.
 * V and Y of a block stay in L2. Transforms run 8 tiles per vector; a run of tiles shorter than 8
 * (narrow images) computes garbage in the spare lanes and never stores them. */
#include <string.h>

#include "core/core.h"
#include "runtime/ops/conv_direct.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#define WG_TB 32 /* tiles per block: two 16-wide register tiles */

/* Where the transforms pay off against the direct kernel (measured on the CIFAR and ResNet layers):
 * 16 channels or more on both sides, rows of 4 tiles or more (the transforms run 8 neighbouring
 * tiles per vector), and 16 tiles or more (32 when the weights are transformed every run). */
bool ot_conv_winograd_applies(const ot_conv_direct *a) {
    const ot_conv_window *w = &a->win;
    const int64_t th = (w->out[1] + 3) / 4, tw = (w->out[2] + 3) / 4;
    return !a->indices && a->group == 1 && a->C >= 16 && a->M >= 16 && w->k[1] == 3 && w->k[2] == 3 &&
           w->stride[1] == 1 && w->stride[2] == 1 && w->dil[1] == 1 && w->dil[2] == 1 && tw >= 4 &&
           a->N * th * tw >= (a->constant_w ? 16 : 32);
}

/* n <= 8 neighbouring tiles of one tile row: image, tile row and first column, position in the block */
typedef struct wg_run {
    int64_t img, ti, tj, slot;
    int n;
} wg_run;

typedef struct wg_plan {
    const ot_conv_direct *a;
    ot_conv_pad pad;
    int64_t C, M, OH, OW, th, tw, tiles, n_blocks;
    float *u;    /* transformed weights, per xi the channel blocks packed [C][mr] */
    float *work; /* per slot: V (36 planes of C x WG_TB, ldv apart), Yb (36 of OT_CONV_MR x WG_TB, ldy apart) */
    int64_t ldv, ldy, work_floats;
    int64_t *blk_m0;
    int *blk_mr;
    int n_blk;
    int64_t n_slots;
} wg_plan;

/* ---- transforms ------------------------------------------------------------------------------ */

/* U = G g G^T for one 3x3 kernel g, in double: 36 values, xi = 6 * i + j. */
static void wg_weight(const float *g, double *u) {
    double t[6][3];
    for (int k = 0; k < 3; k++) {
        double g0 = g[k], g1 = g[3 + k], g2 = g[6 + k];
        t[0][k] = g0 / 4;
        t[1][k] = -(g0 + g1 + g2) / 6;
        t[2][k] = -(g0 - g1 + g2) / 6;
        t[3][k] = g0 / 24 + g1 / 12 + g2 / 6;
        t[4][k] = g0 / 24 - g1 / 12 + g2 / 6;
        t[5][k] = g2;
    }
    for (int i = 0; i < 6; i++) {
        double g0 = t[i][0], g1 = t[i][1], g2 = t[i][2];
        u[6 * i + 0] = g0 / 4;
        u[6 * i + 1] = -(g0 + g1 + g2) / 6;
        u[6 * i + 2] = -(g0 - g1 + g2) / 6;
        u[6 * i + 3] = g0 / 24 + g1 / 12 + g2 / 6;
        u[6 * i + 4] = g0 / 24 - g1 / 12 + g2 / 6;
        u[6 * i + 5] = g2;
    }
}

/* B^T applied to 6 vectors in place. */
__attribute__((target("avx2,fma"), always_inline)) static inline void wg_bt(__m256 *d) {
    const __m256 c4 = _mm256_set1_ps(4.0f), c5 = _mm256_set1_ps(5.0f), c2 = _mm256_set1_ps(2.0f);
    __m256 d0 = d[0], d1 = d[1], d2 = d[2], d3 = d[3], d4 = d[4], d5 = d[5];
    __m256 a = _mm256_sub_ps(d4, d2), b = _mm256_sub_ps(d3, d1); /* shared terms */
    d[0] = _mm256_add_ps(_mm256_fnmadd_ps(c5, d2, _mm256_mul_ps(c4, d0)), d4);
    d[1] = _mm256_fnmadd_ps(c4, _mm256_add_ps(d1, d2), _mm256_add_ps(d3, d4));
    d[2] = _mm256_fmadd_ps(c4, _mm256_sub_ps(d1, d2), _mm256_sub_ps(d4, d3));
    d[3] = _mm256_fmadd_ps(c2, b, a);
    d[4] = _mm256_fnmadd_ps(c2, b, a);
    d[5] = _mm256_add_ps(_mm256_fnmadd_ps(c5, d3, _mm256_mul_ps(c4, d1)), d5);
}

/* A^T applied to 6 vectors: 4 results. */
__attribute__((target("avx2,fma"), always_inline)) static inline void wg_at(const __m256 *m, __m256 *o) {
    const __m256 c2 = _mm256_set1_ps(2.0f), c4 = _mm256_set1_ps(4.0f), c8 = _mm256_set1_ps(8.0f);
    __m256 s12 = _mm256_add_ps(m[1], m[2]), d12 = _mm256_sub_ps(m[1], m[2]);
    __m256 s34 = _mm256_add_ps(m[3], m[4]), d34 = _mm256_sub_ps(m[3], m[4]);
    o[0] = _mm256_add_ps(_mm256_add_ps(m[0], s12), s34);
    o[1] = _mm256_fmadd_ps(c2, d34, d12);
    o[2] = _mm256_fmadd_ps(c4, s34, s12);
    o[3] = _mm256_add_ps(_mm256_fmadd_ps(c8, d34, d12), m[5]);
}

/* V[xi][c][slot .. slot + n) for a run of n <= 8 tiles of tile row ti from column tj of image img; the padded input has
 * 4 phases, so element (r, cc) of 8 neighbouring tiles is one load at row 4 ti + r, phase cc % 4, column tj + cc / 4.
 */
__attribute__((target("avx2,fma"))) static void wg_input(const wg_plan *p, const wg_run *run, float *v) {
    const int64_t img = run->img, ti = run->ti, tj = run->tj, slot = run->slot;
    const int n = run->n;
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const float *base = p->pad.xp + img * p->pad.image + 4 * ti * p->pad.row + tj;
    for (int64_t c = 0; c < p->C; c++) {
        const float *xc = base + c * 4 * p->pad.QW;
        __m256 d[6][6];
        for (int r = 0; r < 6; r++)
            for (int cc = 0; cc < 6; cc++)
                d[r][cc] = _mm256_loadu_ps(xc + r * p->pad.row + (cc % 4) * p->pad.QW + cc / 4);
        for (int cc = 0; cc < 6; cc++) { /* columns: B^T d */
            __m256 col[6] = {d[0][cc], d[1][cc], d[2][cc], d[3][cc], d[4][cc], d[5][cc]};
            wg_bt(col);
            for (int r = 0; r < 6; r++) d[r][cc] = col[r];
        }
        float *vc = v + c * WG_TB + slot;
        for (int r = 0; r < 6; r++) { /* rows: (B^T d) B */
            wg_bt(d[r]);
            for (int cc = 0; cc < 6; cc++) {
                float *dst = vc + (6 * r + cc) * p->ldv;
                if (n == 8)
                    _mm256_storeu_ps(dst, d[r][cc]);
                else
                    _mm256_maskstore_ps(dst, mask, d[r][cc]);
            }
        }
    }
}

/* Y[xi][m0 .. m0 + MR)[16 columns] = U[xi] block (packed [C][MR]) x V[xi][C][16 columns]. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
wg_tile(const int MR, const float *restrict a, const float *restrict v, int64_t C, float *restrict y) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps(),
           c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(), c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(),
           c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int64_t c = 0; c < C; c++, v += WG_TB, a += MR) {
        const __m256 b0 = _mm256_loadu_ps(v), b1 = _mm256_loadu_ps(v + 8);
        __m256 av;
#define WG_ROW(i, ca, cb)                                                                                              \
    if (MR > i) {                                                                                                      \
        av = _mm256_broadcast_ss(a + i);                                                                               \
        ca = _mm256_fmadd_ps(av, b0, ca);                                                                              \
        cb = _mm256_fmadd_ps(av, b1, cb);                                                                              \
    }
        WG_ROW(0, c00, c01)
        WG_ROW(1, c10, c11)
        WG_ROW(2, c20, c21)
        WG_ROW(3, c30, c31)
        WG_ROW(4, c40, c41)
        WG_ROW(5, c50, c51)
#undef WG_ROW
    }
#define WG_OUT(i, ca, cb)                                                                                              \
    if (MR > i) _mm256_storeu_ps(y + i * WG_TB, ca), _mm256_storeu_ps(y + i * WG_TB + 8, cb);
    WG_OUT(0, c00, c01)
    WG_OUT(1, c10, c11)
    WG_OUT(2, c20, c21)
    WG_OUT(3, c30, c31)
    WG_OUT(4, c40, c41)
    WG_OUT(5, c50, c51)
#undef WG_OUT
}

/* Yb[xi][0 .. mr)[WG_TB] = U[xi] rows of channel block b x V[xi], for the 36 xi. */
__attribute__((target("avx2,fma"))) static void wg_products(const wg_plan *p, int b, const float *v, float *yb) {
    const int64_t m0 = p->blk_m0[b];
    for (int xi = 0; xi < 36; xi++) {
        const float *vx = v + xi * p->ldv, *ab = p->u + (xi * p->M + m0) * p->C;
        float *yx = yb + xi * p->ldy;
        for (int col = 0; col < WG_TB; col += 16) switch (p->blk_mr[b]) {
#define WG_CASE(R)                                                                                                     \
    case R:                                                                                                            \
        wg_tile(R, ab, vx + col, p->C, yx + col);                                                                      \
        break;
                WG_CASE(6)
                WG_CASE(5)
                WG_CASE(4)
                WG_CASE(3)
                WG_CASE(2)
                WG_CASE(1)
#undef WG_CASE
            }
    }
}

/* Whole tiles, 8 or 4 of them (nv = 4 or 2 vectors a row): o[r][c] holds element (r, c) of each
 * tile in its lane; a 4x8 transpose makes each output row nv contiguous vectors, and the epilogue
 * (bias, sum, ReLU, pooling) runs on those. */
__attribute__((target("avx2,fma"))) static void wg_store_rows(const wg_plan *p, __m256 o[4][4], float bias,
                                                              int64_t plane, int64_t oh0, int64_t ow0, int nv,
                                                              int64_t pplane) {
    const ot_conv_direct *a = p->a;
    const int64_t OW = p->OW;
    const __m256 bv = _mm256_set1_ps(bias), zero = _mm256_setzero_ps();
    __m256 row[4][4];
    for (int r = 0; r < 4; r++) {
        __m256 lo01 = _mm256_unpacklo_ps(o[r][0], o[r][1]), lo23 = _mm256_unpacklo_ps(o[r][2], o[r][3]);
        __m256 hi01 = _mm256_unpackhi_ps(o[r][0], o[r][1]), hi23 = _mm256_unpackhi_ps(o[r][2], o[r][3]);
        __m256 t04 = _mm256_shuffle_ps(lo01, lo23, 0x44), t15 = _mm256_shuffle_ps(lo01, lo23, 0xEE);
        __m256 t26 = _mm256_shuffle_ps(hi01, hi23, 0x44), t37 = _mm256_shuffle_ps(hi01, hi23, 0xEE);
        row[r][0] = _mm256_permute2f128_ps(t04, t15, 0x20), row[r][1] = _mm256_permute2f128_ps(t26, t37, 0x20);
        row[r][2] = _mm256_permute2f128_ps(t04, t15, 0x31), row[r][3] = _mm256_permute2f128_ps(t26, t37, 0x31);
        for (int v = 0; v < nv; v++) {
            const int64_t at = plane + (oh0 + r) * OW + ow0 + 8 * v;
            __m256 e = _mm256_add_ps(row[r][v], bv);
            if (a->sum) e = _mm256_add_ps(e, _mm256_loadu_ps(a->sum + at));
            if (a->relu) e = _mm256_max_ps(e, zero);
            if (a->maxpool_2x2)
                row[r][v] = e;
            else
                _mm256_storeu_ps(a->y + at, e);
        }
    }
    if (!a->maxpool_2x2) return;
    const int64_t PW = OW / 2;
    const __m256i pick = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    for (int r = 0; r < 2; r++)
        for (int v = 0; v < nv; v++) {
            __m256 e = _mm256_max_ps(row[2 * r][v], row[2 * r + 1][v]);
            e = _mm256_max_ps(e, _mm256_permute_ps(e, 0xB1));
            _mm_storeu_ps(a->y + pplane + (oh0 / 2 + r) * PW + ow0 / 2 + 4 * v,
                          _mm256_castps256_ps128(_mm256_permutevar8x32_ps(e, pick)));
        }
}

/* The 4x4 outputs of channel m for the run of n tiles at `slot` of the block: out = act(A^T Y A
 * + bias + sum), max-pooled 2x2 when asked. ym: the channel's row of Yb (36 planes, ldy apart). */
__attribute__((target("avx2,fma"))) static void wg_output(const wg_plan *p, const float *ym, int64_t m,
                                                          const wg_run *run) {
    const ot_conv_direct *a = p->a;
    const int64_t OH = p->OH, OW = p->OW, PH = OH / 2, PW = OW / 2, img = run->img, ti = run->ti, tj = run->tj;
    const int n = run->n;
    ym += run->slot;
    __m256 t[6][6], o[4][4];
    for (int r = 0; r < 6; r++)
        for (int c = 0; c < 6; c++) t[r][c] = _mm256_loadu_ps(ym + (6 * r + c) * p->ldy);
    __m256 s[4][6];
    for (int j = 0; j < 6; j++) { /* columns: A^T t */
        __m256 col[6] = {t[0][j], t[1][j], t[2][j], t[3][j], t[4][j], t[5][j]}, r[4];
        wg_at(col, r);
        for (int i = 0; i < 4; i++) s[i][j] = r[i];
    }
    for (int i = 0; i < 4; i++) wg_at(s[i], o[i]); /* rows: (A^T t) A */
    const float bias = a->bias ? a->bias[m] : 0.0f;
    const int64_t plane = (img * p->M + m) * OH * OW;
    if ((n == 8 || n == 4) && 4 * ti + 4 <= OH && 4 * (tj + n) <= OW) {
        wg_store_rows(p, o, bias, plane, 4 * ti, 4 * tj, n / 2, (img * p->M + m) * PH * PW);
        return;
    }
    float tile[16][8]; /* tile[4 r + c][lane] */
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) _mm256_storeu_ps(tile[4 * r + c], o[r][c]);
    for (int k = 0; k < n; k++) {
        const int64_t oh0 = 4 * ti, ow0 = 4 * (tj + k);
        float v[4][4];
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 4; c++) {
                int64_t oh = oh0 + r, ow = ow0 + c;
                float e = tile[4 * r + c][k] + bias;
                if (a->sum && oh < OH && ow < OW) e += a->sum[plane + oh * OW + ow];
                v[r][c] = a->relu && !(e > 0.0f) ? 0.0f : e;
            }
        if (a->maxpool_2x2) {
            float *yp = a->y + (img * p->M + m) * PH * PW;
            for (int r = 0; r < 2; r++)
                for (int c = 0; c < 2; c++) {
                    int64_t ph = oh0 / 2 + r, pw = ow0 / 2 + c;
                    if (ph >= PH || pw >= PW) continue;
                    float x0 = v[2 * r][2 * c] > v[2 * r][2 * c + 1] ? v[2 * r][2 * c] : v[2 * r][2 * c + 1];
                    float x1 =
                        v[2 * r + 1][2 * c] > v[2 * r + 1][2 * c + 1] ? v[2 * r + 1][2 * c] : v[2 * r + 1][2 * c + 1];
                    yp[ph * PW + pw] = x0 > x1 ? x0 : x1;
                }
        } else {
            for (int r = 0; r < 4 && oh0 + r < OH; r++)
                for (int c = 0; c < 4 && ow0 + c < OW; c++) a->y[plane + (oh0 + r) * OW + ow0 + c] = v[r][c];
        }
    }
}

/* Slots [s0, s1): slot s takes its share of the blocks with its own V and Yb. Per block: the
 * input transform of every run; then per channel block, the 36 products into Yb (in L1) and the
 * output transform of its channels. */
static void wg_slots(void *arg, int64_t s0, int64_t s1) {
    const wg_plan *p = arg;
    for (int64_t s = s0; s < s1; s++) {
        float *v = p->work + s * p->work_floats, *yb = v + 36 * p->ldv;
        for (int64_t blk = s * p->n_blocks / p->n_slots; blk < (s + 1) * p->n_blocks / p->n_slots; blk++) {
            /* runs: at most 8 tiles, one tile row of one image */
            wg_run runs[WG_TB];
            int n_runs = 0;
            int64_t t0 = blk * WG_TB, t1 = t0 + WG_TB < p->tiles ? t0 + WG_TB : p->tiles;
            for (int64_t t = t0; t < t1; t += runs[n_runs++].n) {
                wg_run *r = &runs[n_runs];
                r->img = t / (p->th * p->tw), r->ti = t / p->tw % p->th, r->tj = t % p->tw, r->slot = t - t0;
                r->n = (int)(p->tw - r->tj < 8 ? p->tw - r->tj : 8);
                if (r->n > t1 - t) r->n = (int)(t1 - t);
                wg_input(p, r, v);
            }
            for (int b = 0; b < p->n_blk; b++) {
                wg_products(p, b, v, yb);
                for (int i = 0; i < p->blk_mr[b]; i++)
                    for (int k = 0; k < n_runs; k++) wg_output(p, yb + i * WG_TB, p->blk_m0[b] + i, &runs[k]);
            }
        }
    }
}

otter_status ot_conv_winograd_run(ot_kernel_ctx *ctx, const ot_conv_direct *a) {
    const ot_conv_window *w = &a->win;
    wg_plan p = {.a = a, .C = a->C, .M = a->M, .OH = w->out[1], .OW = w->out[2]};
    p.th = (p.OH + 3) / 4, p.tw = (p.OW + 3) / 4;
    p.tiles = a->N * p.th * p.tw;
    p.n_blocks = (p.tiles + WG_TB - 1) / WG_TB;
    p.n_slots = ctx->n_threads < p.n_blocks ? ctx->n_threads : p.n_blocks;
    /* tile (ti, tj) reads padded rows 4 ti .. 4 ti + 5 and columns 4 tj .. 4 tj + 5 */
    p.pad = (ot_conv_pad){.x = a->x,
                          .C = a->C,
                          .H = w->in[1],
                          .W = w->in[2],
                          .pad_h = w->pad_begin[1],
                          .pad_w = w->pad_begin[2],
                          .phases = 4,
                          .PH = 4 * p.th + 2,
                          .QW = p.tw + 1};
    p.pad.row = a->C * 4 * p.pad.QW;
    p.pad.image = p.pad.PH * p.pad.row;
    /* one cache line more than the matrices need: the 36 planes must not all map to one L1 set */
    p.ldv = p.C * WG_TB + 16, p.ldy = OT_CONV_MR * WG_TB + 16;
    p.work_floats = 36 * (p.ldv + p.ldy);
    int64_t max_blk = p.M / 4 + 2;
    p.pad.xp = ot_ctx_scratch(ctx, (size_t)(a->N * p.pad.image + OT_CONV_PAD_SLACK) * sizeof(float));
    bool fill_u;
    p.u = ot_conv_packed_weights(ctx, a, 1, (size_t)(36 * p.M * p.C), &fill_u);
    p.work = ot_ctx_scratch(ctx, (size_t)(p.n_slots * p.work_floats) * sizeof(float));
    p.blk_m0 = ot_ctx_scratch(ctx, (size_t)max_blk * sizeof(int64_t));
    p.blk_mr = ot_ctx_scratch(ctx, (size_t)max_blk * sizeof(int));
    if (!p.pad.xp || !p.u || !p.work || !p.blk_m0 || !p.blk_mr) return OTTER_ERR_NOMEM;
    memset(p.pad.xp + a->N * p.pad.image, 0, OT_CONV_PAD_SLACK * sizeof(float));
    /* a last block's unused columns of V are multiplied too (and never stored): zeros, not garbage */
    for (int64_t s = 0; s < p.n_slots; s++) memset(p.work + s * p.work_floats, 0, (size_t)(36 * p.ldv) * sizeof(float));
    p.n_blk = ot_conv_channel_blocks(p.M, p.blk_m0, p.blk_mr);
    for (int b = 0; fill_u && b < p.n_blk; b++)
        for (int64_t c = 0; c < p.C; c++)
            for (int i = 0; i < p.blk_mr[b]; i++) {
                double u[36];
                int64_t m = p.blk_m0[b] + i;
                wg_weight(a->w + (m * p.C + c) * 9, u);
                for (int xi = 0; xi < 36; xi++)
                    p.u[(xi * p.M + p.blk_m0[b]) * p.C + c * p.blk_mr[b] + i] = (float)u[xi];
            }
    ot_parallel_for(ctx, a->N * p.pad.PH, 1, ot_conv_pad_rows, &p.pad);
    ot_parallel_for(ctx, p.n_slots, 1, wg_slots, &p);
    return OTTER_OK;
}

#else

bool ot_conv_winograd_applies(const ot_conv_direct *a) {
    (void)a;
    return false;
}

otter_status ot_conv_winograd_run(ot_kernel_ctx *ctx, const ot_conv_direct *a) {
    (void)a;
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "Winograd convolution needs x86-64 with AVX2");
}

#endif
