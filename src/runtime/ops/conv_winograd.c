/* Winograd convolution for 3x3 kernels (Lavin and Gray, "Fast Algorithms for Convolutional Neural
 * Networks", 2015): each T x T output tile comes from its (T + 2) x (T + 2) input tile d as
 *
 *     Y = A^T [ (G g G^T) (.) (B^T d B) ] A.
 *
 * Two sizes: F(2x2, 3x3), 16 multiplications per channel pair where the direct convolution does
 * 36, whose transforms only add, subtract and halve (its rounding error is the direct kernel's:
 * tests/test_conv_algos.c measures both against double sums), and F(4x4, 3x3), 36 for 144, whose
 * transforms scale by up to 8 and 1/24 (~10x the rounding error, so only at opt level 3). The
 * element-wise products summed over input channels are T2 = (T + 2)^2 matrix products
 * U[xi] (M x C) V[xi] (C x tiles).
 *
 * Tiles are taken in blocks of WG_TB (image-major, row by row), from an input padded whole or, for
 * large batches, a few images at a time by the thread that takes them. Per block, on one thread: the input
 * transform writes V[T2][C][WG_TB] from the padded input (split into T column phases, so that the
 * same element of 8 horizontally neighbouring tiles is 8 consecutive floats: one vector load), the
 * T2 products write Y[T2][M][WG_TB] with the direct kernel's 6 x 16 register tiles, and the output
 * transform writes the T x T tiles, adding bias and sum input, applying ReLU and the 2x2 max pooling.
 * V and Y of a block stay in L2. Transforms run 8 tiles per vector; a run of tiles shorter than 8
 * (narrow images) computes garbage in the spare lanes and never stores them. */
#include <string.h>

#include "core/core.h"
#include "runtime/ops/conv_direct.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "runtime/ops/simd_transpose.h"

#define WG_TB 32 /* tiles per block: two 16-wide register tiles */

/* The largest tile a->winograd allows that pays off against the direct kernel (measured on the
 * CIFAR and ResNet layers): 16 channels or more on both sides, and for F(4x4) rows of 4 tiles or
 * more (the transforms run 8 neighbouring tiles per vector) and 16 tiles or more (32 when the
 * weights are transformed every run). F(2x2), whose products are the larger share of its time,
 * needs full rows of 8 tiles, 64 tiles a thread, and transformed weights that stay in L2 (every
 * block of tiles reads all of them): C x M up to 4096. 0: none. Never beside the direct kernel's
 * AVX-512 tiles (this file's products and transforms are AVX2): measured (one run, alternating,
 * minima, 1 thread) the direct kernel took 4.3 ms where F(2x2) took 5.9 and F(4x4) 4.8 (ResNet-18's
 * 64 -> 64 channels at 16x16, batch 32), 8.1 ms where F(2x2) took 10.5 (the CIFAR CNN's 32 -> 64 at
 * 16x16, batch 64), 4.0 where F(4x4) took 6.8 (SqueezeNet's 32 -> 128 at 14x14, batch 32), and as
 * little or less at batch 1. */
int ot_conv_winograd_tile(const ot_conv_direct *a, int n_threads) {
    const ot_conv_window *w = &a->win;
    if (a->winograd < 2 || ot_conv_direct_isa() == OT_CONV_ISA_AVX512 || a->indices || a->group != 1 || a->C < 16 ||
        a->M < 16 || w->k[1] != 3 || w->k[2] != 3 || w->stride[1] != 1 || w->stride[2] != 1 || w->dil[1] != 1 ||
        w->dil[2] != 1)
        return 0;
    const int64_t oh = w->out[1], ow = w->out[2];
    if (a->winograd >= 4 && (ow + 3) / 4 >= 4 && a->N * ((oh + 3) / 4) * ((ow + 3) / 4) >= (a->constant_w ? 16 : 32))
        return 4;
    if ((ow + 1) / 2 >= 8 && a->N * ((oh + 1) / 2) * ((ow + 1) / 2) >= 64 * (int64_t)n_threads && a->C * a->M <= 4096)
        return 2;
    return 0;
}

/* n <= 8 neighbouring tiles of one tile row: image, its padded copy, tile row and first column,
 * position in the block */
typedef struct wg_run {
    const float *xp;
    int64_t img, ti, tj, slot;
    int n;
} wg_run;

typedef struct wg_plan {
    const ot_conv_direct *a;
    ot_conv_pad pad;
    int T, T2; /* output tile T x T, T2 = (T + 2)^2 transformed values a tile */
    int64_t C, M, OH, OW, th, tw;
    float *u;    /* transformed weights, per xi the channel blocks packed [C][mr] */
    float *work; /* per slot: V (T2 planes of C x WG_TB, ldv apart), Yb (T2 of OT_CONV_MR x WG_TB, ldy apart) */
    int64_t ldv, ldy, work_floats;
    int64_t *blk_m0;
    int *blk_mr;
    int n_blk;
    int64_t n_slots;
    int64_t chunk;      /* images a slot takes at a time; 0: slot s takes the s-th band of tile rows */
    int64_t buf_floats; /* a slot's padded buffer (a chunk's or a band's images), slack included */
    int64_t *next;      /* with chunk: the next image to take */
} wg_plan;

/* ---- transforms ------------------------------------------------------------------------------ */

/* G applied to the 3 values g[0], g[s], g[2 s]: T + 2 results, in double. */
static void wg_g(int T, const double *g, int s, double *o) {
    double g0 = g[0], g1 = g[s], g2 = g[2 * s];
    if (T == 2) {
        o[0] = g0, o[1] = (g0 + g1 + g2) / 2, o[2] = (g0 - g1 + g2) / 2, o[3] = g2;
        return;
    }
    o[0] = g0 / 4;
    o[1] = -(g0 + g1 + g2) / 6;
    o[2] = -(g0 - g1 + g2) / 6;
    o[3] = g0 / 24 + g1 / 12 + g2 / 6;
    o[4] = g0 / 24 - g1 / 12 + g2 / 6;
    o[5] = g2;
}

/* U = G g G^T for one 3x3 kernel g: T2 values, xi = (T + 2) i + j. */
static void wg_weight(int T, const float *g, double *u) {
    const int n = T + 2;
    double gd[9], t[6][3], col[6];
    for (int i = 0; i < 9; i++) gd[i] = g[i];
    for (int k = 0; k < 3; k++) { /* t[.][k] = G g[., k] */
        wg_g(T, gd + k, 3, col);
        for (int i = 0; i < n; i++) t[i][k] = col[i];
    }
    for (int i = 0; i < n; i++) wg_g(T, t[i], 1, u + n * i);
}

/* F(4x4): B^T applied to 6 vectors in place. */
__attribute__((target("avx2,fma"), always_inline)) static inline void wg4_bt(__m256 *d) {
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

/* F(2x2): B^T applied to 4 vectors in place. */
__attribute__((target("avx2,fma"), always_inline)) static inline void wg2_bt(__m256 *d) {
    __m256 d0 = d[0], d1 = d[1], d2 = d[2], d3 = d[3];
    d[0] = _mm256_sub_ps(d0, d2);
    d[1] = _mm256_add_ps(d1, d2);
    d[2] = _mm256_sub_ps(d2, d1);
    d[3] = _mm256_sub_ps(d1, d3);
}

__attribute__((target("avx2,fma"), always_inline)) static inline void wg_bt(int T, __m256 *d) {
    if (T == 2)
        wg2_bt(d);
    else
        wg4_bt(d);
}

/* A^T applied to T + 2 vectors m: T results o. */
__attribute__((target("avx2,fma"), always_inline)) static inline void wg_at(int T, const __m256 *m, __m256 *o) {
    if (T == 2) {
        o[0] = _mm256_add_ps(_mm256_add_ps(m[0], m[1]), m[2]);
        o[1] = _mm256_sub_ps(_mm256_sub_ps(m[1], m[2]), m[3]);
        return;
    }
    const __m256 c2 = _mm256_set1_ps(2.0f), c4 = _mm256_set1_ps(4.0f), c8 = _mm256_set1_ps(8.0f);
    __m256 s12 = _mm256_add_ps(m[1], m[2]), d12 = _mm256_sub_ps(m[1], m[2]);
    __m256 s34 = _mm256_add_ps(m[3], m[4]), d34 = _mm256_sub_ps(m[3], m[4]);
    o[0] = _mm256_add_ps(_mm256_add_ps(m[0], s12), s34);
    o[1] = _mm256_fmadd_ps(c2, d34, d12);
    o[2] = _mm256_fmadd_ps(c4, s34, s12);
    o[3] = _mm256_add_ps(_mm256_fmadd_ps(c8, d34, d12), m[5]);
}

/* V[xi][c][slot .. slot + n) for a run of n <= 8 tiles of tile row ti from column tj of image img; the padded input has
 * T phases, so element (r, cc) of 8 neighbouring tiles is one load at row T ti + r, phase cc % T, column tj + cc / T.
 * T is a constant in each of the two instances. */
__attribute__((target("avx2,fma"), always_inline)) static inline void wg_input_t(const int T, const wg_plan *p,
                                                                                 const wg_run *run, float *v) {
    const int n_d = T + 2;
    const int64_t ti = run->ti, tj = run->tj, slot = run->slot;
    const int n = run->n;
    const __m256i mask = ot_lanes8(n);
    const float *base = run->xp + T * ti * p->pad.row + tj;
    for (int64_t c = 0; c < p->C; c++) {
        const float *xc = base + c * T * p->pad.QW;
        __m256 d[6][6];
        for (int r = 0; r < n_d; r++)
            for (int cc = 0; cc < n_d; cc++)
                d[r][cc] = _mm256_loadu_ps(xc + r * p->pad.row + (cc % T) * p->pad.QW + cc / T);
        for (int cc = 0; cc < n_d; cc++) { /* columns: B^T d */
            __m256 col[6];
            for (int r = 0; r < n_d; r++) col[r] = d[r][cc];
            wg_bt(T, col);
            for (int r = 0; r < n_d; r++) d[r][cc] = col[r];
        }
        float *vc = v + c * WG_TB + slot;
        for (int r = 0; r < n_d; r++) { /* rows: (B^T d) B */
            wg_bt(T, d[r]);
            for (int cc = 0; cc < n_d; cc++) {
                float *dst = vc + (n_d * r + cc) * p->ldv;
                if (n == 8)
                    _mm256_storeu_ps(dst, d[r][cc]);
                else
                    _mm256_maskstore_ps(dst, mask, d[r][cc]);
            }
        }
    }
}

__attribute__((target("avx2,fma"))) static void wg_input(const wg_plan *p, const wg_run *run, float *v) {
    if (p->T == 2)
        wg_input_t(2, p, run, v);
    else
        wg_input_t(4, p, run, v);
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

/* Yb[xi][0 .. mr)[0 .. cols) = U[xi] rows of channel block b x V[xi], for the T2 xi (cols: 16 or WG_TB). */
__attribute__((target("avx2,fma"))) static void wg_products(const wg_plan *p, int b, const float *v, float *yb,
                                                            int cols) {
    const int64_t m0 = p->blk_m0[b];
    for (int xi = 0; xi < p->T2; xi++) {
        const float *vx = v + xi * p->ldv, *ab = p->u + (xi * p->M + m0) * p->C;
        float *yx = yb + xi * p->ldy;
        for (int col = 0; col < cols; col += 16) switch (p->blk_mr[b]) {
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

/* One output row r of 8 or 4 whole tiles as nv contiguous vectors: o[r][c] holds element (r, c) of
 * each tile in its lane; T = 4 transposes 4x8, T = 2 interleaves the two columns. */
__attribute__((target("avx2,fma"), always_inline)) static inline void wg_row_vectors(int T, __m256 *o, __m256 *row) {
    if (T == 2) {
        __m256 lo = _mm256_unpacklo_ps(o[0], o[1]), hi = _mm256_unpackhi_ps(o[0], o[1]);
        row[0] = _mm256_permute2f128_ps(lo, hi, 0x20), row[1] = _mm256_permute2f128_ps(lo, hi, 0x31);
        return;
    }
    __m256 lo01 = _mm256_unpacklo_ps(o[0], o[1]), lo23 = _mm256_unpacklo_ps(o[2], o[3]);
    __m256 hi01 = _mm256_unpackhi_ps(o[0], o[1]), hi23 = _mm256_unpackhi_ps(o[2], o[3]);
    __m256 t04 = _mm256_shuffle_ps(lo01, lo23, 0x44), t15 = _mm256_shuffle_ps(lo01, lo23, 0xEE);
    __m256 t26 = _mm256_shuffle_ps(hi01, hi23, 0x44), t37 = _mm256_shuffle_ps(hi01, hi23, 0xEE);
    row[0] = _mm256_permute2f128_ps(t04, t15, 0x20), row[1] = _mm256_permute2f128_ps(t26, t37, 0x20);
    row[2] = _mm256_permute2f128_ps(t04, t15, 0x31), row[3] = _mm256_permute2f128_ps(t26, t37, 0x31);
}

/* Whole tiles, 8 or 4 of them (nv = T n / 8 vectors a row): each output row becomes nv contiguous
 * vectors, and the epilogue (bias, sum, ReLU, pooling) runs on those. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
wg_store_rows(const int T, const wg_plan *p, __m256 o[4][4], float bias, int64_t plane, int64_t oh0, int64_t ow0,
              int nv, int64_t pplane) {
    const ot_conv_direct *a = p->a;
    const int64_t OW = p->OW;
    const __m256 bv = _mm256_set1_ps(bias), zero = _mm256_setzero_ps();
    __m256 row[4][4];
    for (int r = 0; r < T; r++) {
        wg_row_vectors(T, o[r], row[r]);
        for (int v = 0; v < nv; v++) {
            const int64_t at = plane + (oh0 + r) * OW + ow0 + 8 * v;
            __m256 e = _mm256_add_ps(row[r][v], bv);
            if (a->sum) e = _mm256_add_ps(e, _mm256_loadu_ps(a->sum + at));
            if (a->act.kind == OT_FUSED_RELU) e = _mm256_max_ps(e, zero);
            if (a->maxpool_2x2)
                row[r][v] = e;
            else
                _mm256_storeu_ps(a->y + at, e);
        }
        if (!a->maxpool_2x2 && a->act.kind != OT_FUSED_RELU)
            ot_fused_act_apply(&a->act, a->y + plane + (oh0 + r) * OW + ow0, 8 * nv);
    }
    if (!a->maxpool_2x2) return;
    const int64_t PW = OW / 2;
    const __m256i pick = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    for (int r = 0; r < T / 2; r++)
        for (int v = 0; v < nv; v++) {
            __m256 e = _mm256_max_ps(row[2 * r][v], row[2 * r + 1][v]);
            e = _mm256_max_ps(e, _mm256_permute_ps(e, 0xB1));
            _mm_storeu_ps(a->y + pplane + (oh0 / 2 + r) * PW + ow0 / 2 + 4 * v,
                          _mm256_castps256_ps128(_mm256_permutevar8x32_ps(e, pick)));
        }
}

/* The T x T outputs of channel m for the run of n tiles at `slot` of the block: out = act(A^T Y A
 * + bias + sum), max-pooled 2x2 when asked. ym: the channel's row of Yb (T2 planes, ldy apart). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
wg_output_t(const int T, const wg_plan *p, const float *ym, int64_t m, const wg_run *run) {
    const int n_d = T + 2;
    const ot_conv_direct *a = p->a;
    const int64_t OH = p->OH, OW = p->OW, PH = OH / 2, PW = OW / 2, img = run->img, ti = run->ti, tj = run->tj;
    const int n = run->n;
    ym += run->slot;
    __m256 t[6][6], s[4][6], o[4][4];
    for (int r = 0; r < n_d; r++)
        for (int c = 0; c < n_d; c++) t[r][c] = _mm256_loadu_ps(ym + (n_d * r + c) * p->ldy);
    for (int j = 0; j < n_d; j++) { /* columns: A^T t */
        __m256 col[6], r[4];
        for (int i = 0; i < n_d; i++) col[i] = t[i][j];
        wg_at(T, col, r);
        for (int i = 0; i < T; i++) s[i][j] = r[i];
    }
    for (int i = 0; i < T; i++) wg_at(T, s[i], o[i]); /* rows: (A^T t) A */
    const float bias = a->bias ? a->bias[m] : 0.0f;
    const int64_t plane = (img * p->M + m) * OH * OW;
    if ((n == 8 || n == 4) && T * ti + T <= OH && T * (tj + n) <= OW) {
        wg_store_rows(T, p, o, bias, plane, T * ti, T * tj, T * n / 8, (img * p->M + m) * PH * PW);
        return;
    }
    float tile[16][8]; /* tile[T r + c][lane] */
    for (int r = 0; r < T; r++)
        for (int c = 0; c < T; c++) _mm256_storeu_ps(tile[T * r + c], o[r][c]);
    for (int k = 0; k < n; k++) {
        const int64_t oh0 = T * ti, ow0 = T * (tj + k);
        float v[4][4];
        for (int r = 0; r < T; r++)
            for (int c = 0; c < T; c++) {
                int64_t oh = oh0 + r, ow = ow0 + c;
                float e = tile[T * r + c][k] + bias;
                if (a->sum && oh < OH && ow < OW) e += a->sum[plane + oh * OW + ow];
                v[r][c] = a->act.kind == OT_FUSED_RELU && !(e > 0.0f) ? 0.0f : e;
            }
        if (a->maxpool_2x2) {
            float *yp = a->y + (img * p->M + m) * PH * PW;
            for (int r = 0; r < T / 2; r++)
                for (int c = 0; c < T / 2; c++) {
                    int64_t ph = oh0 / 2 + r, pw = ow0 / 2 + c;
                    if (ph >= PH || pw >= PW) continue;
                    float x0 = v[2 * r][2 * c] > v[2 * r][2 * c + 1] ? v[2 * r][2 * c] : v[2 * r][2 * c + 1];
                    float x1 =
                        v[2 * r + 1][2 * c] > v[2 * r + 1][2 * c + 1] ? v[2 * r + 1][2 * c] : v[2 * r + 1][2 * c + 1];
                    yp[ph * PW + pw] = x0 > x1 ? x0 : x1;
                }
        } else {
            for (int r = 0; r < T && oh0 + r < OH; r++) {
                float *yr = a->y + plane + (oh0 + r) * OW + ow0;
                int64_t c = 0;
                for (; c < T && ow0 + c < OW; c++) yr[c] = v[r][c];
                if (a->act.kind != OT_FUSED_RELU) ot_fused_act_apply(&a->act, yr, c);
            }
        }
    }
}

__attribute__((target("avx2,fma"))) static void wg_output(const wg_plan *p, const float *ym, int64_t m,
                                                          const wg_run *run) {
    if (p->T == 2)
        wg_output_t(2, p, ym, m, run);
    else
        wg_output_t(4, p, ym, m, run);
}

/* Tiles [t0, t1) (at most WG_TB) as one block, with the slot's V and Yb: the input transform of
 * every run; then per channel block, the T2 products into Yb (in L1) and the output transform of
 * its channels. xp: the padded copy of image img0, the next images after it. */
static void wg_block(const wg_plan *p, const float *xp, int64_t img0, int64_t t0, int64_t t1, float *v, float *yb) {
    wg_run runs[WG_TB]; /* at most 8 tiles, one tile row of one image */
    int n_runs = 0;
    for (int64_t t = t0; t < t1; t += runs[n_runs++].n) {
        wg_run *r = &runs[n_runs];
        r->img = t / (p->th * p->tw), r->ti = t / p->tw % p->th, r->tj = t % p->tw, r->slot = t - t0;
        r->xp = xp + (r->img - img0) * p->pad.image;
        r->n = (int)(p->tw - r->tj < 8 ? p->tw - r->tj : 8);
        if (r->n > t1 - t) r->n = (int)(t1 - t);
        wg_input(p, r, v);
    }
    /* the products run on 16-column halves: a partial one gets zeros, not stale or unset floats */
    const int n = (int)(t1 - t0), cols = n <= 16 ? 16 : WG_TB;
    for (int xi = 0; n < cols && xi < p->T2; xi++)
        for (int64_t c = 0; c < p->C; c++)
            memset(v + xi * p->ldv + c * WG_TB + n, 0, (size_t)(cols - n) * sizeof(float));
    for (int b = 0; b < p->n_blk; b++) {
        wg_products(p, b, v, yb, cols);
        for (int i = 0; i < p->blk_mr[b]; i++)
            for (int k = 0; k < n_runs; k++) wg_output(p, yb + i * WG_TB, p->blk_m0[b] + i, &runs[k]);
    }
}

/* Tile rows [r0, r1) of the batch (image-major) on one slot: the padded rows they read, per image,
 * into the slot's buffer (pad.xp, image r0 / th first), then their tiles in blocks. */
static void wg_rows(const wg_plan *p, ot_conv_pad pad, int64_t r0, int64_t r1, float *v, float *yb) {
    const int64_t img0 = r0 / p->th;
    for (int64_t r = r0; r < r1;) {
        const int64_t img = r / p->th, ti0 = r % p->th, ti1 = r1 - r < p->th - ti0 ? ti0 + (r1 - r) : p->th;
        ot_conv_pad one = pad;
        one.x = p->a->x + img * p->C * pad.H * pad.W, one.xp = pad.xp + (img - img0) * pad.image;
        ot_conv_pad_rows(&one, p->T * ti0, p->T * ti1 + 2); /* tile row ti reads padded rows T ti .. T ti + T + 1 */
        r += ti1 - ti0;
    }
    for (int64_t t0 = r0 * p->tw; t0 < r1 * p->tw; t0 += WG_TB)
        wg_block(p, pad.xp, img0, t0, t0 + WG_TB < r1 * p->tw ? t0 + WG_TB : r1 * p->tw, v, yb);
}

/* Slots [s0, s1), each with its own padded rows, V and Yb. Small batches: slot s takes the s-th
 * band of tile rows, the same rows conv after conv, so a thread reads mostly what it wrote (the
 * other core's cache lines cost several times as much on this VM). Large batches: chunks of images
 * from a shared counter, so a thread slowed down takes fewer. */
static void wg_slots(void *arg, int64_t s0, int64_t s1) {
    const wg_plan *p = arg;
    for (int64_t s = s0; s < s1; s++) {
        float *v = p->work + s * p->work_floats, *yb = v + p->T2 * p->ldv;
        ot_conv_pad pad = p->pad;
        pad.xp += s * p->buf_floats;
        if (!p->chunk) {
            const int64_t rows = p->a->N * p->th;
            wg_rows(p, pad, s * rows / p->n_slots, (s + 1) * rows / p->n_slots, v, yb);
            continue;
        }
        for (int64_t img0; (img0 = __atomic_fetch_add(p->next, p->chunk, __ATOMIC_RELAXED)) < p->a->N;)
            wg_rows(p, pad, img0 * p->th, (img0 + p->chunk < p->a->N ? img0 + p->chunk : p->a->N) * p->th, v, yb);
    }
}

otter_status ot_conv_winograd_run(ot_kernel_ctx *ctx, const ot_conv_direct *a, int T) {
    const ot_conv_window *w = &a->win;
    wg_plan p = {.a = a, .T = T, .T2 = (T + 2) * (T + 2), .C = a->C, .M = a->M, .OH = w->out[1], .OW = w->out[2]};
    p.th = (p.OH + T - 1) / T, p.tw = (p.OW + T - 1) / T;
    const int64_t n_blocks = (a->N * p.th * p.tw + WG_TB - 1) / WG_TB;
    /* Batches of 4 chunks a thread or more go chunk by chunk (a chunk has the images of one block
     * at least), smaller ones in one band of tile rows a thread; either way each thread pads what
     * it transforms into its own buffer while that stays in its L2, as the direct kernel does. */
    const int64_t chunk = (WG_TB + p.th * p.tw - 1) / (p.th * p.tw), rows = a->N * p.th;
    p.chunk = a->N >= 4 * chunk * ctx->n_threads ? chunk : 0;
    p.n_slots = ctx->n_threads < n_blocks ? ctx->n_threads : n_blocks;
    const int64_t band_images = (rows + p.n_slots - 1) / p.n_slots / p.th + 2; /* a band's images, at most */
    /* tile (ti, tj) reads padded rows T ti .. T ti + T + 1 and columns T tj .. T tj + T + 1 */
    p.pad = (ot_conv_pad){.x = a->x,
                          .C = a->C,
                          .H = w->in[1],
                          .W = w->in[2],
                          .pad_h = w->pad_begin[1],
                          .pad_w = w->pad_begin[2],
                          .phases = T,
                          .PH = T * p.th + 2,
                          .QW = p.tw + 1};
    p.pad.row = a->C * T * p.pad.QW;
    p.pad.image = p.pad.PH * p.pad.row;
    /* one cache line more than the matrices need: the T2 planes must not all map to one L1 set */
    p.ldv = p.C * WG_TB + 16, p.ldy = OT_CONV_MR * WG_TB + 16;
    p.work_floats = p.T2 * (p.ldv + p.ldy);
    int64_t max_blk = p.M / 4 + 2;
    p.buf_floats = (p.chunk ? p.chunk : band_images < a->N ? band_images : a->N) * p.pad.image + OT_CONV_PAD_SLACK;
    p.pad.xp = ot_ctx_scratch(ctx, (size_t)(p.n_slots * p.buf_floats) * sizeof(float));
    bool fill_u;
    p.u = ot_conv_packed_weights(ctx, a, T == 2 ? OT_CONV_FORM_WINOGRAD2 : OT_CONV_FORM_WINOGRAD4,
                                 (size_t)(p.T2 * p.M * p.C), &fill_u);
    p.work = ot_ctx_scratch(ctx, (size_t)(p.n_slots * p.work_floats) * sizeof(float));
    p.blk_m0 = ot_ctx_scratch(ctx, (size_t)max_blk * sizeof(int64_t));
    p.blk_mr = ot_ctx_scratch(ctx, (size_t)max_blk * sizeof(int));
    if (!p.pad.xp || !p.u || !p.work || !p.blk_m0 || !p.blk_mr) return OTTER_ERR_NOMEM;
    for (int64_t b = 0; b < p.n_slots; b++) /* vector reads run past the last row */
        memset(p.pad.xp + (b + 1) * p.buf_floats - OT_CONV_PAD_SLACK, 0, OT_CONV_PAD_SLACK * sizeof(float));
    p.n_blk = ot_conv_channel_blocks(p.M, p.blk_m0, p.blk_mr);
    for (int b = 0; fill_u && b < p.n_blk; b++)
        for (int64_t c = 0; c < p.C; c++)
            for (int i = 0; i < p.blk_mr[b]; i++) {
                double u[36];
                int64_t m = p.blk_m0[b] + i;
                wg_weight(T, a->w + (m * p.C + c) * 9, u);
                for (int xi = 0; xi < p.T2; xi++)
                    p.u[(xi * p.M + p.blk_m0[b]) * p.C + c * p.blk_mr[b] + i] = (float)u[xi];
            }
    int64_t next = 0;
    p.next = &next;
    ot_parallel_for(ctx, p.n_slots, 1, wg_slots, &p);
    return OTTER_OK;
}

#else

int ot_conv_winograd_tile(const ot_conv_direct *a, int n_threads) {
    (void)a, (void)n_threads;
    return 0;
}

otter_status ot_conv_winograd_run(ot_kernel_ctx *ctx, const ot_conv_direct *a, int T) {
    (void)a, (void)T;
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "Winograd convolution needs x86-64 with AVX2");
}

#endif
