/* sgemm / dgemm: OpenBLAS when available, else a portable cache-blocked kernel.
 *
 * Portable sgemm (the GotoBLAS/BLIS scheme): for each NC-wide column panel and KC-deep slice,
 * B is packed into NR-wide slabs ([kc][NR], zero-padded), A into MR-tall slabs ([kc][MR], alpha
 * folded in), and a MR x NR micro-kernel accumulates into C. Packing and the micro-kernel loop
 * run on the session's threads (tasks are MC-row x NCH-column tiles of C; with B packed once, runs
 * of rows that pack their own A over all of K, one parallel_for per product). Packing goes through
 * callbacks, so ot_sgemm_packing's callers pack operands that are never stored. Small M (a few rows,
 * as in batch-1 inference) skips packing: rows of C are built with axpy (B not transposed) or dot
 * products (B transposed), split over columns. */
#include "runtime/ops/gemm.h"

#include <stdatomic.h>
#include <string.h>

#include "core/core.h"

#ifdef OTTER_HAVE_BLAS
#include <cblas.h>
#endif

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "runtime/ops/simd_transpose.h"
#define OT_GEMM_X86 1
#endif

#if defined(__wasm_simd128__)
#include <wasm_simd128.h>
#endif

#define MR   OT_SGEMM_MR
#define NR   OT_SGEMM_NR
#define KC   256
#define MC   120 /* multiple of MR */
#define NC   4096
#define NCH  128 /* columns per task, multiple of NR */
#define MSUP (MC * 16)
/* C of more floats: sg_block's row tiles outer (one thread, alternating runs: the encoder's 4096 x
 * 1024 and 4096 x 768 outputs over K 256, 1.02-1.12x; with C in cache, 240x256x256, B's slabs outer
 * stay 3-5% faster) */
#define ROWS_OUTER_FLOATS (1 << 20)

/* ---- micro-kernels: c[mr x nr] += a-slab * b-slab over kc --------------------------------- */

typedef void (*ukr_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int mr, int nr);
/* The same reading A's mr rows where they are stored (a + i * lda + k) instead of a packed slab,
 * and B's rows ldb apart (NR for a packed slab; B's own rows when stored, not transposed, with
 * nr == NR); with init (NR floats), C = init (in every row) + the product instead of C += it: the
 * first K slice then neither clears C nor reads it. With epi (full-width tiles, on the last K slice,
 * no activation or Relu or Clip: ukr_epilogue_in_registers), the tile at row i0, column j0 of C gets
 * the epilogue in registers before it is stored. With stream (the first tile to read this
 * B slab), B's rows PREFETCH_K ahead are prefetched: a slab few rows of A use is read from memory once
 * (the weights of batch-1 convolutions on 2x2 maps: 4 rows against 9 MB of packed weights), and the
 * hardware prefetcher alone kept too few lines in flight (that product 1.1 -> 0.7 ms from DRAM); B's
 * own rows (AVX-512) prefetch the next slab's instead: each row a page apart (1x1 convolutions of
 * 32x32 maps), too many streams for the prefetcher. */
typedef void (*ukr_direct_fn)(int64_t kc, const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                              int64_t ldc, int mr, int nr, const float *init, const ot_sgemm_epilogue *epi, int64_t i0,
                              int64_t j0, bool stream);
#define PREFETCH_K 32 /* k steps: 4 KB of a packed slab ahead (8 to 64 measured: 32 and 64 best) */

#if !defined(__wasm_simd128__) /* the portable and x86 kernels; ukr_wasm below replaces them there */
/* C[0:mr, 0:nr] += the mr x nr corner of a tile computed in full (edge tiles, on zero-padded slabs),
 * its rows ldt floats apart; with init (a row of nr floats), C = init + the corner instead. */
static inline void store_tile_corner(float *restrict c, int64_t ldc, const float *t, int ldt, int mr, int nr,
                                     const float *init) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) c[i * ldc + j] = (init ? init[j] : c[i * ldc + j]) + t[i * ldt + j];
}

static void ukr_generic(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c, int64_t ldc,
                        int mr, int nr) {
    float acc[MR][NR];
    memset(acc, 0, sizeof acc);
    for (int64_t k = 0; k < kc; k++) {
        const float *ak = a + k * MR, *bk = b + k * NR;
        for (int i = 0; i < MR; i++) {
            float ai = ak[i];
            for (int j = 0; j < NR; j++) acc[i][j] += ai * bk[j];
        }
    }
    store_tile_corner(c, ldc, &acc[0][0], NR, mr, nr, NULL);
}
#endif

/* ReluGrad's rule, the gate of ot_sgemm_epilogue: v where its gate is > 0, +0 where it is not
 * (negative, -0, +0 or NaN); the vector forms below compare the same way (ordered >). */
static inline float gate_value(float v, float g) { return g > 0.0f ? v : 0.0f; }

#ifdef OT_GEMM_X86
__attribute__((target("avx512f"), always_inline)) static inline __m512 gate_ps512(__m512 v, __m512 g) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_GT_OQ), v);
}
__attribute__((target("avx2"), always_inline)) static inline __m256 gate_ps256(__m256 v, __m256 g) {
    return _mm256_and_ps(v, _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_GT_OQ));
}

/* Row i of C, columns [j0, j0 + 2 * W) in v0, v1 (vectors of W floats: AVX-512 or AVX2), get the
 * epilogue (no activation, Relu or Clip) as epi_clamp_avx512 / epi_clamp_avx2 apply it, the same
 * operations. */
#define EPI_REGISTERS(V, W, set1, add, max, min, zero, loadu, gate_op)                                                 \
    if (e->row_bias || e->z) {                                                                                         \
        const V bv = set1(e->row_bias ? e->row_bias[i] : 0.0f);                                                        \
        *v0 = add(*v0, bv), *v1 = add(*v1, bv);                                                                        \
    }                                                                                                                  \
    if (e->z) {                                                                                                        \
        const float *z = e->z + i * e->ldz + j0;                                                                       \
        *v0 = add(*v0, loadu(z)), *v1 = add(*v1, loadu(z + W));                                                        \
    }                                                                                                                  \
    const ot_fused_act_kind kind = e->act ? e->act->kind : OT_FUSED_NONE;                                              \
    if (kind == OT_FUSED_RELU) {                                                                                       \
        *v0 = max(*v0, zero()), *v1 = max(*v1, zero());                                                                \
    } else if (kind == OT_FUSED_CLIP) {                                                                                \
        const V lv = set1(e->act->p0), hv = set1(e->act->p1);                                                          \
        *v0 = min(hv, max(lv, *v0)), *v1 = min(hv, max(lv, *v1));                                                      \
    }                                                                                                                  \
    if (e->gate) {                                                                                                     \
        const float *g = e->gate + i * e->ldg + j0;                                                                    \
        *v0 = gate_op(*v0, loadu(g)), *v1 = gate_op(*v1, loadu(g + W));                                                \
    }
__attribute__((target("avx512f,avx2,fma"), always_inline)) static inline void
epi_registers(const ot_sgemm_epilogue *e, int64_t i, int64_t j0, __m512 *v0, __m512 *v1) {
    EPI_REGISTERS(__m512, 16, _mm512_set1_ps, _mm512_add_ps, _mm512_max_ps, _mm512_min_ps, _mm512_setzero_ps,
                  _mm512_loadu_ps, gate_ps512)
}
__attribute__((target("avx2,fma"), always_inline)) static inline void
epi_registers_avx2(const ot_sgemm_epilogue *e, int64_t i, int64_t j0, __m256 *v0, __m256 *v1) {
    EPI_REGISTERS(__m256, 8, _mm256_set1_ps, _mm256_add_ps, _mm256_max_ps, _mm256_min_ps, _mm256_setzero_ps,
                  _mm256_loadu_ps, gate_ps256)
}
#undef EPI_REGISTERS

/* ROWS (1 to 6; a packed slab's an even count) rows of A against 8 (WIDE: 16) columns of B, the half of a slab at b
 * (stride NR): an edge tile (mr or nr short of the slab) runs only the rows and columns it has, instead of multiplying
 * the slabs' zero padding. Each element of C is one FMA chain over k whatever the tile shape, so edge tiles sum in the
 * same order as full ones. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
ukr_avx2_tile(const int ROWS, const bool WIDE, const bool DIRECT, int64_t kc, const float *restrict a, int64_t lda,
              const float *restrict b, int64_t ldb, float *restrict c, int64_t ldc, int mr, int nr, const float *init,
              const ot_sgemm_epilogue *epi, int64_t i0, int64_t j0, bool stream) {
    __m256 c0a = _mm256_setzero_ps(), c0b = _mm256_setzero_ps();
    __m256 c1a = _mm256_setzero_ps(), c1b = _mm256_setzero_ps();
    __m256 c2a = _mm256_setzero_ps(), c2b = _mm256_setzero_ps();
    __m256 c3a = _mm256_setzero_ps(), c3b = _mm256_setzero_ps();
    __m256 c4a = _mm256_setzero_ps(), c4b = _mm256_setzero_ps();
    __m256 c5a = _mm256_setzero_ps(), c5b = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        if (DIRECT && stream) _mm_prefetch((const char *)(b + PREFETCH_K * ldb), _MM_HINT_T0);
        __m256 b0 = _mm256_loadu_ps(b), b1 = WIDE ? _mm256_loadu_ps(b + 8) : b0;
        __m256 av;
#define OT_ROW(i, ca, cb)                                                                                              \
    if (ROWS > i) {                                                                                                    \
        av = _mm256_broadcast_ss(DIRECT ? a + i * lda : a + i);                                                        \
        ca = _mm256_fmadd_ps(av, b0, ca);                                                                              \
        if (WIDE) cb = _mm256_fmadd_ps(av, b1, cb);                                                                    \
    }
        OT_ROW(0, c0a, c0b)
        OT_ROW(1, c1a, c1b)
        OT_ROW(2, c2a, c2b)
        OT_ROW(3, c3a, c3b)
        OT_ROW(4, c4a, c4b)
        OT_ROW(5, c5a, c5b)
#undef OT_ROW
        a += DIRECT ? 1 : MR;
        b += ldb;
    }
    if (WIDE && nr == 16) {
        /* C = init + the tile, or C += the tile, then the epilogue: the mr rows the tile has (a
         * packed slab's padding row is not stored) */
#define OT_STORE(i, ca, cb)                                                                                            \
    if (ROWS > i && i < mr) {                                                                                          \
        __m256 v0 = _mm256_add_ps(_mm256_loadu_ps(init ? init : c + i * ldc), ca);                                     \
        __m256 v1 = _mm256_add_ps(_mm256_loadu_ps(init ? init + 8 : c + i * ldc + 8), cb);                             \
        if (epi) epi_registers_avx2(epi, i0 + i, j0, &v0, &v1);                                                        \
        _mm256_storeu_ps(c + i * ldc, v0);                                                                             \
        _mm256_storeu_ps(c + i * ldc + 8, v1);                                                                         \
    }
        OT_STORE(0, c0a, c0b)
        OT_STORE(1, c1a, c1b)
        OT_STORE(2, c2a, c2b)
        OT_STORE(3, c3a, c3b)
        OT_STORE(4, c4a, c4b)
        OT_STORE(5, c5a, c5b)
#undef OT_STORE
        return;
    }
    float t[MR][16];
    _mm256_storeu_ps(t[0], c0a), _mm256_storeu_ps(t[0] + 8, c0b);
    _mm256_storeu_ps(t[1], c1a), _mm256_storeu_ps(t[1] + 8, c1b);
    _mm256_storeu_ps(t[2], c2a), _mm256_storeu_ps(t[2] + 8, c2b);
    _mm256_storeu_ps(t[3], c3a), _mm256_storeu_ps(t[3] + 8, c3b);
    _mm256_storeu_ps(t[4], c4a), _mm256_storeu_ps(t[4] + 8, c4b);
    _mm256_storeu_ps(t[5], c5a), _mm256_storeu_ps(t[5] + 8, c5b);
    store_tile_corner(c, ldc, &t[0][0], 16, mr, nr, init);
}

/* nr (at most 16) columns of the half slab at b; packed A runs the even row count covering mr (the
 * slab is zero-padded), A's own rows (DIRECT) exactly mr. */
#define OT_AVX2_ROWS(rows)                                                                                             \
    case rows:                                                                                                         \
        if (nr > 8)                                                                                                    \
            ukr_avx2_tile(rows, true, direct, kc, a, lda, b, ldb, c, ldc, mr, nr, init, epi, i0, j0, stream);          \
        else                                                                                                           \
            ukr_avx2_tile(rows, false, direct, kc, a, lda, b, ldb, c, ldc, mr, nr, init, epi, i0, j0, stream);         \
        return;
__attribute__((target("avx2,fma"), always_inline)) static inline void
ukr_avx2_half(const bool direct, int64_t kc, const float *restrict a, int64_t lda, const float *restrict b, int64_t ldb,
              float *restrict c, int64_t ldc, int mr, int nr, const float *init, const ot_sgemm_epilogue *epi,
              int64_t i0, int64_t j0, bool stream) {
    switch (direct ? mr : (mr + 1) / 2 * 2) {
        OT_AVX2_ROWS(1)
        OT_AVX2_ROWS(2)
        OT_AVX2_ROWS(3)
        OT_AVX2_ROWS(4)
        OT_AVX2_ROWS(5)
        OT_AVX2_ROWS(6)
    }
}
#undef OT_AVX2_ROWS

/* A slab of NR = 32 columns as two 16-column halves. */
_Static_assert(NR == 32, "the AVX2 and AVX-512 kernels cover 32 columns");
__attribute__((target("avx2,fma"))) static void ukr_avx2(int64_t kc, const float *restrict a, const float *restrict b,
                                                         float *restrict c, int64_t ldc, int mr, int nr) {
    ukr_avx2_half(false, kc, a, 0, b, NR, c, ldc, mr, nr < 16 ? nr : 16, NULL, NULL, 0, 0, false);
    if (nr > 16) ukr_avx2_half(false, kc, a, 0, b + 16, NR, c + 16, ldc, mr, nr - 16, NULL, NULL, 0, 0, false);
}

__attribute__((target("avx2,fma"))) static void ukr_avx2_direct(int64_t kc, const float *restrict a, int64_t lda,
                                                                const float *restrict b, int64_t ldb, float *restrict c,
                                                                int64_t ldc, int mr, int nr, const float *init,
                                                                const ot_sgemm_epilogue *epi, int64_t i0, int64_t j0,
                                                                bool stream) {
    ukr_avx2_half(true, kc, a, lda, b, ldb, c, ldc, mr, nr < 16 ? nr : 16, init, epi, i0, j0, stream);
    if (nr > 16)
        ukr_avx2_half(true, kc, a, lda, b + 16, ldb, c + 16, ldc, mr, nr - 16, init ? init + 16 : NULL, epi, i0,
                      j0 + 16, stream);
}

/* 6 rows of A against 32 (WIDE) or 16 columns of B with AVX-512: per k, one or two B loads and 6
 * broadcasts feed 12 (6) FMAs, each row of C one or two zmm accumulators. A is the zero-padded
 * slab (rows at a + i, k at a + k * MR), or with DIRECT A's own rows (a + i * lda + k: no packing,
 * and only the ROWS rows the tile has are read). Every element of C is one FMA chain over k,
 * whichever variant runs, and padded edge rows are computed in full with only their corner added:
 * every element of C is summed in the same order wherever it falls in the tiling, so equal columns
 * stay bit-equal (a softmax over 1000 equal logits of ~1e4 turns one ulp of difference into 0.4%). */
__attribute__((target("avx512f,avx2,fma"), always_inline)) static inline void
ukr_avx512_tile(const bool WIDE, const bool DIRECT, const int ROWS, int64_t kc, const float *restrict a, int64_t lda,
                const float *restrict b, int64_t ldb, float *restrict c, int64_t ldc, int mr, int nr, const float *init,
                const ot_sgemm_epilogue *epi, int64_t i0, int64_t j0, bool stream) {
    __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps(), c2 = _mm512_setzero_ps();
    __m512 c3 = _mm512_setzero_ps(), c4 = _mm512_setzero_ps(), c5 = _mm512_setzero_ps();
    __m512 d0 = _mm512_setzero_ps(), d1 = _mm512_setzero_ps(), d2 = _mm512_setzero_ps();
    __m512 d3 = _mm512_setzero_ps(), d4 = _mm512_setzero_ps(), d5 = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++, a += DIRECT ? 1 : MR, b += ldb) {
        if (DIRECT && stream && ldb == NR) {
            _mm_prefetch((const char *)(b + PREFETCH_K * ldb), _MM_HINT_T0);
            if (WIDE) _mm_prefetch((const char *)(b + PREFETCH_K * ldb + 16), _MM_HINT_T0);
        } else if (DIRECT && stream) {
            _mm_prefetch((const char *)(b + NR), _MM_HINT_T0);
            _mm_prefetch((const char *)(b + NR + 16), _MM_HINT_T0);
        }
        __m512 b0 = _mm512_loadu_ps(b), b1 = WIDE ? _mm512_loadu_ps(b + 16) : b0, av;
#define OT_ROW(i, ci, di)                                                                                              \
    if (ROWS > i) {                                                                                                    \
        av = _mm512_set1_ps(DIRECT ? a[i * lda] : a[i]);                                                               \
        ci = _mm512_fmadd_ps(av, b0, ci);                                                                              \
        if (WIDE) di = _mm512_fmadd_ps(av, b1, di);                                                                    \
    }
        OT_ROW(0, c0, d0)
        OT_ROW(1, c1, d1)
        OT_ROW(2, c2, d2)
        OT_ROW(3, c3, d3)
        OT_ROW(4, c4, d4)
        OT_ROW(5, c5, d5)
#undef OT_ROW
    }
    if (WIDE && nr == NR) {
        /* C = init + the tile, or C += the tile; then the epilogue (the mr rows it has: an edge tile's
         * rows stored one by one cost as much as the product at small K) */
#define OT_STORE(i, ci, di)                                                                                            \
    if (i < mr) {                                                                                                      \
        __m512 v0 = _mm512_add_ps(_mm512_loadu_ps(init ? init : c + i * ldc), ci);                                     \
        __m512 v1 = _mm512_add_ps(_mm512_loadu_ps(init ? init + 16 : c + i * ldc + 16), di);                           \
        if (epi) epi_registers(epi, i0 + i, j0, &v0, &v1);                                                             \
        _mm512_storeu_ps(c + i * ldc, v0);                                                                             \
        _mm512_storeu_ps(c + i * ldc + 16, v1);                                                                        \
    }
        OT_STORE(0, c0, d0)
        OT_STORE(1, c1, d1)
        OT_STORE(2, c2, d2)
        OT_STORE(3, c3, d3)
        OT_STORE(4, c4, d4)
        OT_STORE(5, c5, d5)
#undef OT_STORE
        return;
    }
    float t[MR][NR];
    _mm512_storeu_ps(t[0], c0), _mm512_storeu_ps(t[0] + 16, d0);
    _mm512_storeu_ps(t[1], c1), _mm512_storeu_ps(t[1] + 16, d1);
    _mm512_storeu_ps(t[2], c2), _mm512_storeu_ps(t[2] + 16, d2);
    _mm512_storeu_ps(t[3], c3), _mm512_storeu_ps(t[3] + 16, d3);
    _mm512_storeu_ps(t[4], c4), _mm512_storeu_ps(t[4] + 16, d4);
    _mm512_storeu_ps(t[5], c5), _mm512_storeu_ps(t[5] + 16, d5);
    store_tile_corner(c, ldc, &t[0][0], NR, mr, nr, init);
}

/* Twelve rows of A against a full packed slab (32 columns): 24 accumulators, so each pair of B
 * vectors feeds 24 FMAs (the six-row tile: 12) and fewer loads share the core's ports with them.
 * A's rows read in place (PACKED false: row i at a + i * lda) or as two consecutive packed slabs
 * (PACKED: the second at a + kc * MR). Each element of C is the same FMA chain over k as in two
 * six-row tiles, stored the same way: the same bits. In place: encoder products (128-1024 rows x
 * 256 x 256-1024) 1.02-1.05x, resnet18 batch 32 1.02-1.03x, mobilenet_v2 batch 32 1.02-1.14x (one
 * process alternating runs, medians). */
__attribute__((target("avx512f,avx2,fma"), always_inline)) static inline void
ukr_avx512_tall_tile(const bool PACKED, int64_t kc, const float *restrict a, int64_t lda, const float *restrict b,
                     int64_t ldb, float *restrict c, int64_t ldc, const float *init, const ot_sgemm_epilogue *epi,
                     int64_t i0, int64_t j0, bool stream) {
    __m512 acc[2 * MR][2];
    const float *restrict a2 = PACKED ? a + kc * MR : a + MR * lda;
#pragma GCC unroll 12
    for (int i = 0; i < 2 * MR; i++) {
        /* C's tile fetched for writing while the products run: stored to lines not in cache (the
         * encoder's 4096 x 1024 outputs), the tile waits on their reads */
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        __builtin_prefetch(c + i * ldc, 1, 3);
        __builtin_prefetch(c + i * ldc + 16, 1, 3);
    }
    for (int64_t k = 0; k < kc; k++, a += PACKED ? MR : 1, a2 += PACKED ? MR : 1, b += ldb) {
        if (stream) {
            _mm_prefetch((const char *)(b + PREFETCH_K * ldb), _MM_HINT_T0);
            _mm_prefetch((const char *)(b + PREFETCH_K * ldb + 16), _MM_HINT_T0);
        }
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
        for (int i = 0; i < 2 * MR; i++) {
            const float *row = i < MR ? a : a2;
            const __m512 av = _mm512_set1_ps(row[(i % MR) * (PACKED ? 1 : lda)]);
            acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < 2 * MR; i++) {
        __m512 v0 = _mm512_add_ps(_mm512_loadu_ps(init ? init : c + i * ldc), acc[i][0]);
        __m512 v1 = _mm512_add_ps(_mm512_loadu_ps(init ? init + 16 : c + i * ldc + 16), acc[i][1]);
        if (epi) epi_registers(epi, i0 + i, j0, &v0, &v1);
        _mm512_storeu_ps(c + i * ldc, v0);
        _mm512_storeu_ps(c + i * ldc + 16, v1);
    }
}

__attribute__((target("avx512f,avx2,fma"))) static void
ukr_avx512_direct_tall(int64_t kc, const float *restrict a, int64_t lda, const float *restrict b, int64_t ldb,
                       float *restrict c, int64_t ldc, const float *init, const ot_sgemm_epilogue *epi, int64_t i0,
                       int64_t j0, bool stream) {
    ukr_avx512_tall_tile(false, kc, a, lda, b, ldb, c, ldc, init, epi, i0, j0, stream);
}

/* Two packed slabs of A (a, a + kc * MR) against a packed slab of B: with init, C = init + the tile.
 * With packed_init below, the weight gradients' products (A stored transposed, so packed), one
 * thread, alternating runs: 4096x256x256 134-150 -> 157-175 GFLOP/s, 256x256x4096 132 -> 163,
 * 1024x256x4096 128 -> 151 (the six-row kernel's C first cleared, then added to: 4% of the time). */
__attribute__((target("avx512f,avx2,fma"))) static void ukr_avx512_packed_tall(int64_t kc, const float *restrict a,
                                                                               const float *restrict b,
                                                                               float *restrict c, int64_t ldc,
                                                                               const float *init) {
    ukr_avx512_tall_tile(true, kc, a, 0, b, NR, c, ldc, init, NULL, 0, 0, false);
}

/* ukr_avx512 with init (a row of NR floats, or NULL): C = init + the tile instead of C += it, so
 * the first K slice neither clears C nor reads it. */
__attribute__((target("avx512f,avx2,fma"))) static void ukr_avx512_packed_init(int64_t kc, const float *restrict a,
                                                                               const float *restrict b,
                                                                               float *restrict c, int64_t ldc, int mr,
                                                                               int nr, const float *init) {
    if (nr > 16)
        ukr_avx512_tile(true, false, MR, kc, a, 0, b, NR, c, ldc, mr, nr, init, NULL, 0, 0, false);
    else
        ukr_avx512_tile(false, false, MR, kc, a, 0, b, NR, c, ldc, mr, nr, init, NULL, 0, 0, false);
}

__attribute__((target("avx512f,avx2,fma"))) static void ukr_avx512(int64_t kc, const float *restrict a,
                                                                   const float *restrict b, float *restrict c,
                                                                   int64_t ldc, int mr, int nr) {
    ukr_avx512_packed_init(kc, a, b, c, ldc, mr, nr, NULL);
}

/* The mr rows of A at a (k contiguous, rows lda apart) against a packed slab: no packing of A. */
#define OT_DIRECT(rows)                                                                                                \
    case rows:                                                                                                         \
        if (nr > 16)                                                                                                   \
            ukr_avx512_tile(true, true, rows, kc, a, lda, b, ldb, c, ldc, mr, nr, init, epi, i0, j0, stream);          \
        else                                                                                                           \
            ukr_avx512_tile(false, true, rows, kc, a, lda, b, ldb, c, ldc, mr, nr, init, epi, i0, j0, stream);         \
        return;
__attribute__((target("avx512f,avx2,fma"))) static void
ukr_avx512_direct(int64_t kc, const float *restrict a, int64_t lda, const float *restrict b, int64_t ldb,
                  float *restrict c, int64_t ldc, int mr, int nr, const float *init, const ot_sgemm_epilogue *epi,
                  int64_t i0, int64_t j0, bool stream) {
    switch (mr) {
        OT_DIRECT(1)
        OT_DIRECT(2)
        OT_DIRECT(3)
        OT_DIRECT(4)
        OT_DIRECT(5)
        OT_DIRECT(6)
    }
}
#undef OT_DIRECT
#endif

#if defined(__wasm_simd128__)
/* WebAssembly SIMD128: the 32-column slab as four 8-column strips, each 6 rows x two f32x4
 * accumulators (12 registers + 2 B vectors + 1 broadcast fit the 16 xmm registers V8 maps them to
 * on x86-64). The A slab is re-read per strip from L1. SIMD128 has no FMA: every element of C is
 * one mul-then-add chain over k, the same operations in the same order as ukr_generic, so the two
 * agree bit for bit. Strips wholly beyond nr are skipped. */
#define WS_STRIP 8
static void ukr_wasm_strip(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c, int64_t ldc,
                           int mr, int nr) {
    v128_t c0a = wasm_f32x4_splat(0), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a;
    v128_t c3a = c0a, c3b = c0a, c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a;
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR) {
        v128_t b0 = wasm_v128_load(b), b1 = wasm_v128_load(b + 4), av;
#define OT_ROW(i, ca, cb)                                                                                              \
    av = wasm_v128_load32_splat(a + i);                                                                                \
    ca = wasm_f32x4_add(ca, wasm_f32x4_mul(av, b0));                                                                   \
    cb = wasm_f32x4_add(cb, wasm_f32x4_mul(av, b1));
        OT_ROW(0, c0a, c0b)
        OT_ROW(1, c1a, c1b)
        OT_ROW(2, c2a, c2b)
        OT_ROW(3, c3a, c3b)
        OT_ROW(4, c4a, c4b)
        OT_ROW(5, c5a, c5b)
#undef OT_ROW
    }
    if (mr == MR && nr >= WS_STRIP) {
#define OT_STORE(i, ca, cb)                                                                                            \
    wasm_v128_store(c + i * ldc, wasm_f32x4_add(wasm_v128_load(c + i * ldc), ca));                                     \
    wasm_v128_store(c + i * ldc + 4, wasm_f32x4_add(wasm_v128_load(c + i * ldc + 4), cb));
        OT_STORE(0, c0a, c0b)
        OT_STORE(1, c1a, c1b)
        OT_STORE(2, c2a, c2b)
        OT_STORE(3, c3a, c3b)
        OT_STORE(4, c4a, c4b)
        OT_STORE(5, c5a, c5b)
#undef OT_STORE
        return;
    }
    float t[MR][WS_STRIP];
    wasm_v128_store(t[0], c0a), wasm_v128_store(t[0] + 4, c0b);
    wasm_v128_store(t[1], c1a), wasm_v128_store(t[1] + 4, c1b);
    wasm_v128_store(t[2], c2a), wasm_v128_store(t[2] + 4, c2b);
    wasm_v128_store(t[3], c3a), wasm_v128_store(t[3] + 4, c3b);
    wasm_v128_store(t[4], c4a), wasm_v128_store(t[4] + 4, c4b);
    wasm_v128_store(t[5], c5a), wasm_v128_store(t[5] + 4, c5b);
    int cols = nr < WS_STRIP ? nr : WS_STRIP;
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < cols; j++) c[i * ldc + j] += t[i][j];
}

_Static_assert(NR % WS_STRIP == 0, "the SIMD128 kernel covers the slab in 8-column strips");
static void ukr_wasm(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c, int64_t ldc,
                     int mr, int nr) {
    for (int j = 0; j < nr; j += WS_STRIP) ukr_wasm_strip(kc, a, b + j, c + j, ldc, mr, nr - j);
}
#undef WS_STRIP
#endif

/* The micro-kernels in use (ot_gemm_isa): the best the CPU runs unless a test chose others. */
static atomic_int kernel_isa = -1;

ot_gemm_isa ot_gemm_isa_best(void) {
#ifdef OT_GEMM_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return __builtin_cpu_supports("avx512f") ? OT_GEMM_AVX512 : OT_GEMM_AVX2;
#endif
    return OT_GEMM_GENERIC;
}

bool ot_gemm_use_isa(ot_gemm_isa isa) {
    if (isa > ot_gemm_isa_best()) return false;
    atomic_store(&kernel_isa, (int)isa);
    return true;
}

static ukr_fn pick_ukr(void) {
    int isa = atomic_load(&kernel_isa);
    if (isa < 0) atomic_store(&kernel_isa, isa = (int)ot_gemm_isa_best());
#ifdef OT_GEMM_X86
    return isa == OT_GEMM_AVX512 ? ukr_avx512 : isa == OT_GEMM_AVX2 ? ukr_avx2 : ukr_generic;
#elif defined(__wasm_simd128__)
    (void)isa;
    return ukr_wasm;
#else
    (void)isa;
    return ukr_generic;
#endif
}

/* The kernel that reads A unpacked, where there is one (AVX-512, AVX2); else NULL (A gets packed). */
static ukr_direct_fn pick_ukr_direct(void) {
#ifdef OT_GEMM_X86
    ukr_fn k = pick_ukr();
    return k == ukr_avx512 ? ukr_avx512_direct : k == ukr_avx2 ? ukr_avx2_direct : NULL;
#else
    return NULL;
#endif
}

/* Whether the direct kernel k applies e in registers to full tiles (epi_registers). */
static bool ukr_epilogue_in_registers(ukr_direct_fn k, const ot_sgemm_epilogue *e) {
#ifdef OT_GEMM_X86
    const ot_fused_act_kind kind = e->act ? e->act->kind : OT_FUSED_NONE;
    return (k == ukr_avx512_direct || k == ukr_avx2_direct) &&
           (kind == OT_FUSED_NONE || kind == OT_FUSED_RELU || kind == OT_FUSED_CLIP);
#else
    (void)k, (void)e;
    return false;
#endif
}

#ifdef OTTER_HAVE_BLAS
static bool own_float_kernels(void);
#endif

const char *ot_gemm_backend(void) {
#ifdef OTTER_HAVE_BLAS
    if (!own_float_kernels()) return "openblas";
#endif
#ifdef OT_GEMM_X86
    if (pick_ukr() == ukr_avx512) return "portable-avx512";
    if (pick_ukr() == ukr_avx2) return "portable-avx2";
#endif
#if defined(__wasm_simd128__)
    return "portable-simd128";
#else
    return "portable";
#endif
}

/* ---- threading helpers ---------------------------------------------------------------------- */

static void run_range(const ot_kernel_ctx *ctx, int64_t n, int64_t grain, ot_range_fn fn, void *arg) {
    if (n <= 0) return;
    if (ctx && ctx->n_threads > 1 && n > grain)
        ot_parallel_for(ctx, n, grain, fn, arg);
    else
        fn(arg, 0, n);
}

static void scale_rows_f(float *C, int64_t ldc, int64_t m, int64_t n, float beta) {
    for (int64_t i = 0; i < m; i++) {
        float *c = C + i * ldc;
        if (beta == 0.0f)
            memset(c, 0, (size_t)n * sizeof(float));
        else if (beta != 1.0f)
            for (int64_t j = 0; j < n; j++) c[j] *= beta;
    }
}

/* C = beta * bias in every row when bias, else C *= beta. (SSE on x86-64: GCC's -O2 leaves these
 * loops scalar, and the epilogues run over every element of a transformer's projections.) */
static void init_rows_f(float *C, int64_t ldc, int64_t m, int64_t n, float beta, const float *bias) {
    if (!bias) {
        scale_rows_f(C, ldc, m, n, beta);
        return;
    }
    for (int64_t i = 0; i < m; i++) {
        float *c = C + i * ldc;
        int64_t j = 0;
#ifdef OT_GEMM_X86
        const __m128 b = _mm_set1_ps(beta);
        for (; j + 4 <= n; j += 4) _mm_storeu_ps(c + j, _mm_mul_ps(b, _mm_loadu_ps(bias + j)));
#endif
        for (; j < n; j++) c[j] = beta * bias[j];
    }
}

static void scale_rows_d(double *C, int64_t ldc, int64_t m, int64_t n, double beta) {
    for (int64_t i = 0; i < m; i++) {
        double *c = C + i * ldc;
        if (beta == 0.0)
            memset(c, 0, (size_t)n * sizeof(double));
        else if (beta != 1.0)
            for (int64_t j = 0; j < n; j++) c[j] *= beta;
    }
}

/* ---- portable sgemm ------------------------------------------------------------------------- */

/* Depth of the K slices: K cut into equal slices of at most KC (784 = 4 x 196, not 3 x 256 + 16:
 * a thin last slice would cost a C load and store per tile for a few products). */
static int64_t kc_step(int64_t K) {
    int64_t n = (K + KC - 1) / KC;
    return n > 0 ? (K + n - 1) / n : 1;
}

typedef struct sg_args {
    bool ta, tb;
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B;
    int64_t lda, ldb, ldc;
    float *C;
    ot_sgemm_pack_fn pack_a, pack_b; /* mat_pack_a / mat_pack_b (arg: this struct) or the caller's */
    const void *parg;
    int64_t k0; /* offset of this product's K range in the callbacks' (a part of a split K) */
    /* current block */
    int64_t jc, nc, pc, kc, ic, mc;
    float *pa, *pb;
    int64_t n_nch, mcb; /* column tasks per row block, rows per block (MC or fewer) */
    ukr_fn ukr;
    ukr_direct_fn direct; /* A (stored, alpha 1, not transposed) read unpacked: g->pa unused */
    bool b_rows;          /* with direct, B's full slabs read where stored (sg_b_rows_pays_off) */
    bool rows_outer;      /* sg_block's order: C larger than the caches */
    /* B packed beforehand (sg_prepacked_tasks): threads, row slabs per task, runs of columns, column
     * slabs per run, floats of A per run */
    int64_t threads, row_slabs, col_runs, run_slabs;
    size_t na;
    const float *bias;            /* ot_sgemm_prepacked's bias row: C's first value, times beta */
    const ot_sgemm_epilogue *epi; /* each tile's, on its last K slice (or NULL) */
} sg_args;

#ifdef OT_GEMM_X86
/* The epilogue with no activation, Relu or Clip (KIND) in AVX-512 (masked edges) or AVX2 vectors
 * (scalar edges), as the micro-kernels: the SSE sums and ot_fused_act_apply's compare masks took as
 * long as a tile's product when K is small (1x1 expand convolutions of 16-24 channels). Bitwise as
 * ot_fused_act_apply: max(x, 0) returns its second operand for NaN and for -0 (Relu's 0), max(lo,
 * x) and min(hi, x) their second (Clip keeps NaN and the sign of a zero). */
#define EPI_ROW_SETUP                                                                                                  \
    const float lo = KIND == OT_FUSED_CLIP ? e->act->p0 : 0.0f, hi = KIND == OT_FUSED_CLIP ? e->act->p1 : 0.0f;        \
    const bool sums = e->row_bias || e->z;                                                                             \
    float *restrict c = C + i * ldc + j0;                                                                              \
    const float *restrict z = e->z ? e->z + i * e->ldz + j0 : NULL;                                                    \
    const float *restrict gate = e->gate ? e->gate + i * e->ldg + j0 : NULL;                                           \
    const float bm = e->row_bias ? e->row_bias[i] : 0.0f;
#define EPI_VEC(add, max, min, zero, zload)                                                                            \
    if (sums) v = add(v, bv);                                                                                          \
    if (z) v = add(v, zload);                                                                                          \
    if (KIND == OT_FUSED_RELU) v = max(v, zero);                                                                       \
    if (KIND == OT_FUSED_CLIP) v = min(hv, max(lv, v));

__attribute__((target("avx512f,avx2,fma"), always_inline)) static inline void
epi_clamp_avx512_kind(const ot_fused_act_kind KIND, const ot_sgemm_epilogue *e, float *C, int64_t ldc, int64_t i0,
                      int64_t m, int64_t j0, int64_t n) {
    for (int64_t i = i0; i < i0 + m; i++) {
        EPI_ROW_SETUP
        const __m512 bv = _mm512_set1_ps(bm), lv = _mm512_set1_ps(lo), hv = _mm512_set1_ps(hi);
        for (int64_t j = 0; j < n; j += 16) {
            const __mmask16 k = ot_lanes16(n - j);
            __m512 v = _mm512_maskz_loadu_ps(k, c + j);
            EPI_VEC(_mm512_add_ps, _mm512_max_ps, _mm512_min_ps, _mm512_setzero_ps(), _mm512_maskz_loadu_ps(k, z + j))
            if (gate) v = gate_ps512(v, _mm512_maskz_loadu_ps(k, gate + j));
            _mm512_mask_storeu_ps(c + j, k, v);
        }
    }
}

__attribute__((target("avx2,fma"), always_inline)) static inline void
epi_clamp_avx2_kind(const ot_fused_act_kind KIND, const ot_sgemm_epilogue *e, float *C, int64_t ldc, int64_t i0,
                    int64_t m, int64_t j0, int64_t n) {
    for (int64_t i = i0; i < i0 + m; i++) {
        EPI_ROW_SETUP
        const __m256 bv = _mm256_set1_ps(bm), lv = _mm256_set1_ps(lo), hv = _mm256_set1_ps(hi);
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            __m256 v = _mm256_loadu_ps(c + j);
            EPI_VEC(_mm256_add_ps, _mm256_max_ps, _mm256_min_ps, _mm256_setzero_ps(), _mm256_loadu_ps(z + j))
            if (gate) v = gate_ps256(v, _mm256_loadu_ps(gate + j));
            _mm256_storeu_ps(c + j, v);
        }
        for (; j < n; j++) {
            float v = c[j];
            if (sums) v = v + bm;
            if (z) v = v + z[j];
            if (KIND == OT_FUSED_RELU) v = v > 0.0f ? v : 0.0f;
            if (KIND == OT_FUSED_CLIP) {
                v = v < lo ? lo : v;
                v = v > hi ? hi : v;
            }
            c[j] = gate ? gate_value(v, gate[j]) : v;
        }
    }
}
#undef EPI_ROW_SETUP
#undef EPI_VEC

/* false for the other activations */
#define EPI_KINDS(fn)                                                                                                  \
    switch (e->act ? e->act->kind : OT_FUSED_NONE) {                                                                   \
    case OT_FUSED_NONE:                                                                                                \
        fn(OT_FUSED_NONE, e, C, ldc, i0, m, j0, n);                                                                    \
        return true;                                                                                                   \
    case OT_FUSED_RELU:                                                                                                \
        fn(OT_FUSED_RELU, e, C, ldc, i0, m, j0, n);                                                                    \
        return true;                                                                                                   \
    case OT_FUSED_CLIP:                                                                                                \
        fn(OT_FUSED_CLIP, e, C, ldc, i0, m, j0, n);                                                                    \
        return true;                                                                                                   \
    default:                                                                                                           \
        return false;                                                                                                  \
    }
__attribute__((target("avx512f,avx2,fma"))) static bool
epi_clamp_avx512(const ot_sgemm_epilogue *e, float *C, int64_t ldc, int64_t i0, int64_t m, int64_t j0, int64_t n) {
    EPI_KINDS(epi_clamp_avx512_kind)
}
__attribute__((target("avx2,fma"))) static bool epi_clamp_avx2(const ot_sgemm_epilogue *e, float *C, int64_t ldc,
                                                               int64_t i0, int64_t m, int64_t j0, int64_t n) {
    EPI_KINDS(epi_clamp_avx2_kind)
}
#undef EPI_KINDS
#endif

/* Rows [i0, i0 + m), columns [j0, j0 + n) of C get the epilogue e (see ot_sgemm_epilogue): the
 * sums (ot_add_bias_row: (c + row_bias) + z), the activation, then the gate. */
static void epi_apply(const ot_sgemm_epilogue *e, float *C, int64_t ldc, int64_t i0, int64_t m, int64_t j0, int64_t n) {
#ifdef OT_GEMM_X86
    /* the vector kernels' ISA (the CPU has it) */
    const int isa = atomic_load(&kernel_isa);
    if (isa == OT_GEMM_AVX512 && epi_clamp_avx512(e, C, ldc, i0, m, j0, n)) return;
    if (isa == OT_GEMM_AVX2 && epi_clamp_avx2(e, C, ldc, i0, m, j0, n)) return;
#endif
    for (int64_t i = i0; i < i0 + m; i++) {
        float *restrict c = C + i * ldc + j0;
        if (e->row_bias || e->z)
            ot_add_bias_row(c, e->z ? e->z + i * e->ldz + j0 : NULL, e->row_bias ? e->row_bias[i] : 0.0f, n);
        ot_fused_act_apply(e->act, c, n);
        const float *restrict g = e->gate ? e->gate + i * e->ldg + j0 : NULL;
        for (int64_t j = 0; g && j < n; j++) c[j] = gate_value(c[j], g[j]);
    }
}

#if defined(__wasm_simd128__)
/* The columns of a 4 x 4 block of rows r0..r3, as r0..r3 (SIMD128 shuffles). */
#define WS_TRANSPOSE4(r0, r1, r2, r3)                                                                                  \
    do {                                                                                                               \
        v128_t t0 = wasm_i32x4_shuffle(r0, r1, 0, 4, 1, 5), t1 = wasm_i32x4_shuffle(r2, r3, 0, 4, 1, 5);               \
        v128_t t2 = wasm_i32x4_shuffle(r0, r1, 2, 6, 3, 7), t3 = wasm_i32x4_shuffle(r2, r3, 2, 6, 3, 7);               \
        r0 = wasm_i32x4_shuffle(t0, t1, 0, 1, 4, 5), r1 = wasm_i32x4_shuffle(t0, t1, 2, 3, 6, 7);                      \
        r2 = wasm_i32x4_shuffle(t2, t3, 0, 1, 4, 5), r3 = wasm_i32x4_shuffle(t2, t3, 2, 3, 6, 7);                      \
    } while (0)

/* B stored transposed (Gemm's transB, the forward pass of every Linear layer): the slab's columns are
 * rows of the stored matrix, so 4 x 4 blocks are loaded along those rows and transposed (4 vector stores
 * instead of 16 scalar ones and 16 strided loads); the ragged edges as mat_pack_b. Copies only, so the
 * packed slab is the scalar one bit for bit. */
static void mat_pack_b_trans_wasm(const float *B, int64_t ldb, int64_t j0, int64_t nr, int64_t p0, int64_t kc,
                                  float *dst) {
    const int64_t nr4 = nr & ~(int64_t)3, kc4 = kc & ~(int64_t)3;
    for (int64_t k = 0; k < kc4; k += 4) {
        float *d = dst + k * NR;
        for (int64_t j = 0; j < nr4; j += 4) {
            const float *src = B + (j0 + j) * ldb + p0 + k;
            v128_t r0 = wasm_v128_load(src), r1 = wasm_v128_load(src + ldb), r2 = wasm_v128_load(src + 2 * ldb),
                   r3 = wasm_v128_load(src + 3 * ldb);
            WS_TRANSPOSE4(r0, r1, r2, r3);
            wasm_v128_store(d + j, r0), wasm_v128_store(d + NR + j, r1);
            wasm_v128_store(d + 2 * NR + j, r2), wasm_v128_store(d + 3 * NR + j, r3);
        }
    }
    for (int64_t k = 0; k < kc; k++) {
        float *d = dst + k * NR;
        for (int64_t j = k < kc4 ? nr4 : 0; j < nr; j++) d[j] = B[(j0 + j) * ldb + p0 + k];
        for (int64_t j = nr; j < NR; j++) d[j] = 0.0f;
    }
}
#endif

#if defined(__wasm_simd128__)
_Static_assert(MR == 6, "ot_sgemm_pack_rows_wasm covers 6 rows");
int64_t ot_sgemm_pack_rows_wasm(const float *src, int64_t ld, int64_t kc, float alpha, float *dst) {
    const v128_t al = wasm_f32x4_splat(alpha);
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4) {
        const float *s = src + k;
        v128_t r0 = wasm_v128_load(s), r1 = wasm_v128_load(s + ld), r2 = wasm_v128_load(s + 2 * ld),
               r3 = wasm_v128_load(s + 3 * ld), r4 = wasm_v128_load(s + 4 * ld), r5 = wasm_v128_load(s + 5 * ld);
        if (alpha != 1.0f) {
            r0 = wasm_f32x4_mul(al, r0), r1 = wasm_f32x4_mul(al, r1), r2 = wasm_f32x4_mul(al, r2);
            r3 = wasm_f32x4_mul(al, r3), r4 = wasm_f32x4_mul(al, r4), r5 = wasm_f32x4_mul(al, r5);
        }
        WS_TRANSPOSE4(r0, r1, r2, r3);
        /* rows 4 and 5 interleaved: the (4, 5) pair of column k is 64-bit lane k % 2 */
        v128_t lo = wasm_i32x4_shuffle(r4, r5, 0, 4, 1, 5), hi = wasm_i32x4_shuffle(r4, r5, 2, 6, 3, 7);
        float *d = dst + k * MR;
        wasm_v128_store(d, r0), wasm_v128_store64_lane(d + 4, lo, 0);
        wasm_v128_store(d + MR, r1), wasm_v128_store64_lane(d + MR + 4, lo, 1);
        wasm_v128_store(d + 2 * MR, r2), wasm_v128_store64_lane(d + 2 * MR + 4, hi, 0);
        wasm_v128_store(d + 3 * MR, r3), wasm_v128_store64_lane(d + 3 * MR + 4, hi, 1);
    }
    return k;
}
#endif

/* Packing callbacks over the stored matrices A and B (arg: the sg_args). B transposed (B stored
 * not transposed: pack_stretches below). */
static void mat_pack_b(const void *arg, int64_t j0, int64_t nr, int64_t p0, int64_t kc, float *dst) {
    const sg_args *g = arg;
#if defined(__wasm_simd128__)
    mat_pack_b_trans_wasm(g->B, g->ldb, j0, nr, p0, kc, dst);
#else
    int64_t k4 = 0, j4 = 0; /* [0, k4) x [0, j4) is packed by 4 x 4 blocks */
#ifdef OT_GEMM_X86
    /* SSE 4 x 4 transposes: gathering a column of B^T reads NR rows a float at a time (attention's
     * K^T, the input gradients' W^T) */
    const int64_t ld = g->ldb;
    k4 = kc / 4 * 4, j4 = nr / 4 * 4;
    for (int64_t k = 0; k < k4; k += 4)
        for (int64_t j = 0; j < j4; j += 4) {
            const float *src = g->B + (j0 + j) * ld + p0 + k;
            __m128 r0 = _mm_loadu_ps(src), r1 = _mm_loadu_ps(src + ld), r2 = _mm_loadu_ps(src + 2 * ld),
                   r3 = _mm_loadu_ps(src + 3 * ld);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            float *d = dst + k * NR + j;
            _mm_storeu_ps(d, r0), _mm_storeu_ps(d + NR, r1);
            _mm_storeu_ps(d + 2 * NR, r2), _mm_storeu_ps(d + 3 * NR, r3);
        }
#endif
    for (int64_t k = 0; k < kc; k++) {
        float *d = dst + k * NR;
        const float *src = g->B + j0 * g->ldb + p0 + k;
        int64_t j = k < k4 ? j4 : 0;
        for (; j < nr; j++) d[j] = src[j * g->ldb];
        for (; j < NR; j++) d[j] = 0.0f;
    }
#endif
}

/* A not transposed (stored transposed: pack_stretches), alpha folded in. */
static void mat_pack_a(const void *arg, int64_t i0, int64_t mr, int64_t p0, int64_t kc, float *dst) {
    const sg_args *g = arg;
    int64_t k0 = 0;
#ifdef OT_GEMM_X86
    /* A full slab of rows, 4 columns at a time through SSE transposes: 2 stores per column instead of
     * 6 scalar ones (packing A is most of the work besides the micro-kernel when N is small). */
    _Static_assert(MR == 6, "the SSE packing below loads 6 rows");
    if (!g->ta && mr == MR) {
        const float *src = g->A + i0 * g->lda + p0;
        const __m128 al = _mm_set1_ps(g->alpha), zero = _mm_setzero_ps();
        for (; k0 + 4 <= kc; k0 += 4) {
            __m128 r0 = _mm_mul_ps(al, _mm_loadu_ps(src + k0)), r1 = _mm_mul_ps(al, _mm_loadu_ps(src + g->lda + k0)),
                   r2 = _mm_mul_ps(al, _mm_loadu_ps(src + 2 * g->lda + k0)),
                   r3 = _mm_mul_ps(al, _mm_loadu_ps(src + 3 * g->lda + k0)),
                   r4 = _mm_mul_ps(al, _mm_loadu_ps(src + 4 * g->lda + k0)),
                   r5 = _mm_mul_ps(al, _mm_loadu_ps(src + 5 * g->lda + k0)), r6 = zero, r7 = zero;
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            _MM_TRANSPOSE4_PS(r4, r5, r6, r7);
            float *d = dst + k0 * MR;
            _mm_storeu_ps(d, r0), _mm_storel_pi((__m64 *)(d + 4), r4);
            _mm_storeu_ps(d + MR, r1), _mm_storel_pi((__m64 *)(d + MR + 4), r5);
            _mm_storeu_ps(d + 2 * MR, r2), _mm_storel_pi((__m64 *)(d + 2 * MR + 4), r6);
            _mm_storeu_ps(d + 3 * MR, r3), _mm_storel_pi((__m64 *)(d + 3 * MR + 4), r7);
        }
    }
#endif
#if defined(__wasm_simd128__)
    /* A full slab of rows through SIMD128 transposes, as the SSE packing above. */
    if (mr == MR && !g->ta) k0 = ot_sgemm_pack_rows_wasm(g->A + i0 * g->lda + p0, g->lda, kc, g->alpha, dst);
#endif
    for (int64_t i = 0; i < MR; i++) {
        if (i >= mr) {
            for (int64_t k = k0; k < kc; k++) dst[k * MR + i] = 0.0f;
        } else {
            const float *src = g->A + (i0 + i) * g->lda + p0;
            for (int64_t k = k0; k < kc; k++) dst[k * MR + i] = g->alpha * src[k];
        }
    }
}

/* Slabs [s0, s1) of width W (MR rows of A stored transposed, NR columns of B stored not transposed),
 * alpha folded in: a slab's k-th row is W consecutive floats of the stored matrix's row k (src + k *
 * ld, the slab's first at column c0 + s * W, short of W at end). Packed slab by slab, each k would
 * read W floats of a row ld floats past the last (the weight gradients' operands: 1-16 KB, a page or
 * more a row, rows in the same L1 sets: a miss each); groups of `group` slabs are packed k by k
 * instead, reading a stretch of each row (4096x256x256 with A transposed: packing A 17% -> 12.5% of
 * the product's perf samples with groups of 16; 256x1024x4096: packing B 27% -> 14%, 20 -> 16 ms).
 * Inlined: W constant, the copies are a few vector moves, not calls. */
static inline __attribute__((always_inline)) void pack_stretches(const float *src, int64_t ld, int64_t kc, int64_t c0,
                                                                 int64_t end, int W, float alpha, int64_t group,
                                                                 float *dst, int64_t s0, int64_t s1) {
    for (int64_t sb = s0; sb < s1; sb += group) {
        const int64_t se = sb + group < s1 ? sb + group : s1;
        for (int64_t k = 0; k < kc; k++) {
            const float *restrict row = src + k * ld;
            for (int64_t s = sb; s < se; s++) {
                const int64_t i0 = c0 + s * W, w = end - i0 < W ? end - i0 : W;
                float *restrict d = dst + s * kc * W + k * W;
                if (w == W && alpha == 1.0f) {
                    memcpy(d, row + i0, (size_t)W * sizeof(float));
                    continue;
                }
#ifdef OT_GEMM_X86
                if (w == MR && W == MR) {
                    const __m128 al = _mm_set1_ps(alpha);
                    _mm_storeu_ps(d, _mm_mul_ps(al, _mm_loadu_ps(row + i0)));
                    _mm_storel_pi((__m64 *)(d + 4),
                                  _mm_mul_ps(al, _mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)(row + i0 + 4))));
                    continue;
                }
#endif
                for (int64_t i = 0; i < W; i++) d[i] = i < w ? alpha * row[i0 + i] : 0.0f;
            }
        }
    }
}

/* Pack B[pc:pc+kc, jc:jc+nc] slabs [s0, s1) of NR columns. */
static void sg_pack_b(void *arg, int64_t s0, int64_t s1) {
    sg_args *g = arg;
    if (g->pack_b == mat_pack_b && !g->tb) { /* mat_pack_b is for B transposed */
        pack_stretches(g->B + (g->k0 + g->pc) * g->ldb, g->ldb, g->kc, g->jc, g->jc + g->nc, NR, 1.0f, 32, g->pb, s0,
                       s1);
        return;
    }
    for (int64_t s = s0; s < s1; s++) {
        int64_t j0 = g->jc + s * NR;
        int64_t nr = g->jc + g->nc - j0 < NR ? g->jc + g->nc - j0 : NR;
        g->pack_b(g->parg, j0, nr, g->k0 + g->pc, g->kc, g->pb + s * g->kc * NR);
    }
}

/* Pack A[ic:ic+mc, pc:pc+kc] slabs [s0, s1) of MR rows. */
static void sg_pack_a(void *arg, int64_t s0, int64_t s1) {
    sg_args *g = arg;
    if (g->pack_a == mat_pack_a && g->ta) {
        pack_stretches(g->A + (g->k0 + g->pc) * g->lda, g->lda, g->kc, g->ic, g->ic + g->mc, MR, g->alpha, 16, g->pa,
                       s0, s1);
        return;
    }
    for (int64_t s = s0; s < s1; s++) {
        int64_t i0 = g->ic + s * MR;
        int64_t mr = g->ic + g->mc - i0 < MR ? g->ic + g->mc - i0 : MR;
        g->pack_a(g->parg, i0, mr, g->k0 + g->pc, g->kc, g->pa + s * g->kc * MR);
    }
}

/* The tile of C at row r (relative to ic: 6 rows, or 12 with tall), column q (relative to jc: nr
 * <= NR columns) += its rows of A times B's slab bp (rows ldb apart) over the current K slice; with
 * init, C = init + the product instead. regs: the epilogue in registers (full tiles), else over
 * the tile when the block has one in registers. stream: the first tile to read this slab of B. */
static void sg_tile(const sg_args *g, int64_t r, int64_t r1, bool tall, int64_t q, int nr, const float *bp, int64_t ldb,
                    const float *init, const ot_sgemm_epilogue *regs, bool stream) {
    float *c = g->C + (g->ic + r) * g->ldc + g->jc + q;
#ifdef OT_GEMM_X86
    if (tall && g->direct == ukr_avx512_direct) {
        ukr_avx512_direct_tall(g->kc, g->A + (g->ic + r) * g->lda + g->pc, g->lda, bp, ldb, c, g->ldc, init, regs,
                               g->ic + r, g->jc + q, stream);
        return;
    }
    if (tall) {
        ukr_avx512_packed_tall(g->kc, g->pa + (r / MR) * g->kc * MR, bp, c, g->ldc, init);
        return;
    }
    if (!g->direct && g->ukr == ukr_avx512) { /* no epilogue in registers: the block's, after */
        const int mr = (int)(r1 - r < MR ? r1 - r : MR);
        ukr_avx512_packed_init(g->kc, g->pa + (r / MR) * g->kc * MR, bp, c, g->ldc, mr, nr, init);
        return;
    }
#else
    (void)tall;
#endif
    const int mr = (int)(r1 - r < MR ? r1 - r : MR);
    const bool full = regs && nr == NR && (g->direct || mr == MR);
    if (g->direct)
        g->direct(g->kc, g->A + (g->ic + r) * g->lda + g->pc, g->lda, bp, ldb, c, g->ldc, mr, nr, init,
                  full ? regs : NULL, g->ic + r, g->jc + q, stream);
    else
        g->ukr(g->kc, g->pa + (r / MR) * g->kc * MR, bp, c, g->ldc, mr, nr);
    if (regs && !full) epi_apply(g->epi, g->C, g->ldc, g->ic + r, mr, g->jc + q, nr);
}

/* The tiles of rows [r, r + step) (step 2 * MR: one tall tile where the slab is full) of the
 * block's slab at column q, its last column q1; fresh: C starts from beta * bias. */
static void sg_tiles(const sg_args *g, int64_t r, int64_t step, int64_t r0, int64_t r1, int64_t q, int64_t q1,
                     bool fresh, const ot_sgemm_epilogue *regs) {
    const int nr = (int)(q1 - q < NR ? q1 - q : NR);
    const float *bp = g->pb + (q / NR) * g->kc * NR;
    int64_t ldb = NR;
    if (g->b_rows && nr == NR) bp = g->B + (g->k0 + g->pc) * g->ldb + g->jc + q, ldb = g->ldb;
    /* C's first values: beta * bias (the bias row itself when beta is 1: the kernels read the nr it has),
     * or zeros; not copied per tile (a 32-float copy is 1-3% of a tile at K 64-256) */
    static const float zeros[NR];
    float scaled[NR];
    const float *init = !fresh ? NULL : !g->bias ? zeros : g->beta == 1.0f ? g->bias + g->jc + q : scaled;
    for (int j = 0; init == scaled && j < NR; j++) scaled[j] = j < nr ? g->beta * g->bias[g->jc + q + j] : 0.0f;
    const bool tall = step == 2 * MR && nr == NR && ldb == NR;
    for (int64_t t = r; t < r + step && t < r1; t += tall ? step : MR)
        sg_tile(g, t, r1, tall, q, nr, bp, ldb, init, regs, t == r0);
}

/* C[ic + r0 : ic + r1, jc + q0 : jc + q1] (r0 a multiple of MR, q0 of NR) += the packed rows of A
 * (g->pa) times the packed columns of B (g->pb) over the current K slice; first, on the first
 * slice, C *= beta, or with g->bias C = beta * bias (each row); after the last, g->epi: in
 * registers (the AVX-512 kernel's full tiles) or L1 (its edge tiles) where epi_registers can, else
 * over the block. B's slabs outer, each read from L1 by the block's row tiles; or, with
 * g->rows_outer (C larger than the caches), row tiles outer: a tile's rows of A stay in L1, B's
 * slabs come from L2, and C is written along 6 or 12 rows at a time, which the prefetchers follow
 * (down a slab's rows, each tile wrote 6-12 new pages: too many streams for them). */
static void sg_block(const sg_args *g, int64_t r0, int64_t r1, int64_t q0, int64_t q1) {
#ifdef OT_GEMM_X86
    const bool tall512 = g->direct == ukr_avx512_direct || (!g->direct && g->ukr == ukr_avx512);
#else
    const bool tall512 = false;
#endif
    /* the direct and AVX-512 kernels start C themselves from beta * bias (or zeros) on the first slice */
    const bool fresh = (g->direct || tall512) && g->pc == 0 && (g->bias || g->beta == 0.0f);
    const bool last = g->pc + g->kc == g->K;
    /* the direct kernels apply the vector epilogues to full-width tiles as they store them */
    const ot_sgemm_epilogue *regs = last && g->epi && ukr_epilogue_in_registers(g->direct, g->epi) ? g->epi : NULL;
    if (g->pc == 0 && !fresh)
        init_rows_f(g->C + (g->ic + r0) * g->ldc + g->jc + q0, g->ldc, r1 - r0, q1 - q0, g->beta,
                    g->bias ? g->bias + g->jc + q0 : NULL);
#define STEP(r) (tall512 && (r) + 2 * MR <= r1 ? 2 * MR : MR)
    if (g->rows_outer)
        for (int64_t qc = q0; qc < q1; qc += NCH) /* NCH columns of B at a time in L2 */
            for (int64_t r = r0; r < r1; r += STEP(r))
                for (int64_t q = qc; q < q1 && q < qc + NCH; q += NR)
                    sg_tiles(g, r, STEP(r), r0, r1, q, q1, fresh, regs);
    else
        for (int64_t q = q0; q < q1; q += NR)
            for (int64_t r = r0; r < r1; r += STEP(r)) sg_tiles(g, r, STEP(r), r0, r1, q, q1, fresh, regs);
#undef STEP
    /* the other epilogues over the block's rows at once: vec_math's transcendental activations
     * called per 32-float row of a tile cost more than L1 saves (the encoder's FusedMatMul Gelu) */
    if (last && g->epi && !regs) epi_apply(g->epi, g->C, g->ldc, g->ic + r0, r1 - r0, g->jc + q0, q1 - q0);
}

/* Tasks: (row block of g->mcb rows within the current ic chunk) x (NCH columns within the jc panel). */
static void sg_compute(void *arg, int64_t t0, int64_t t1) {
    sg_args *g = arg;
    for (int64_t t = t0; t < t1; t++) {
        int64_t mb = t / g->n_nch, nb = t % g->n_nch;
        int64_t r0 = mb * g->mcb, r1 = r0 + g->mcb < g->mc ? r0 + g->mcb : g->mc; /* relative to ic */
        int64_t q0 = nb * NCH, q1 = q0 + NCH < g->nc ? q0 + NCH : g->nc;          /* relative to jc */
        sg_block(g, r0, r1, q0, q1);
    }
}

/* Floats of the packing buffers of an M x N x K product: B's (first) and A's. */
static void sg_pack_sizes(int64_t M, int64_t N, int64_t K, size_t *nb, size_t *na) {
    int64_t ncap = N < NC ? N : NC, mcap = M < MSUP ? M : MSUP, kcap = kc_step(K);
    *nb = (size_t)((ncap + NR - 1) / NR * NR * kcap);
    *na = (size_t)((mcap + MR - 1) / MR * MR * kcap);
}

/* With B packed beforehand, a task is a run of MR-row slabs of the current ic block times a run of
 * g->run_slabs NR-column slabs of the jc panel, over every K slice: it packs its own rows of A
 * (into the buffer of its column run), so a block is one parallel_for, without a barrier per
 * slice. */
static void sg_prepacked_tasks(void *arg, int64_t t0, int64_t t1) {
    const sg_args *g0 = arg;
    const int64_t step = kc_step(g0->K), slabs = (g0->nc + NR - 1) / NR;
    const int64_t runs = (slabs + g0->run_slabs - 1) / g0->run_slabs;
    for (int64_t t = t0; t < t1; t++) {
        sg_args g = *g0;
        int64_t s0 = t / runs * g.row_slabs, s1 = s0 + g.row_slabs, r1 = s1 * MR < g.mc ? s1 * MR : g.mc;
        int64_t q0 = t % runs * g.run_slabs * NR, q1 = q0 + g.run_slabs * NR < g.nc ? q0 + g.run_slabs * NR : g.nc;
        float *pa = g0->direct ? NULL : g0->pa + (size_t)(t % runs) * g.na;
        for (g.pc = 0; g.pc < g.K; g.pc += g.kc) {
            g.kc = g.K - g.pc < step ? g.K - g.pc : step;
            /* slab s at g.pa + s * kc * MR, inside this task's part [s0, s1) * step * MR of the buffer
             * whatever the slice's depth (the other tasks may be on another slice) */
            if (!g.direct) {
                g.pa = pa + s0 * (step - g.kc) * MR;
                sg_pack_a(&g, s0, (r1 + MR - 1) / MR);
            }
            sg_block(&g, s0 * MR, r1, q0, q1);
            g.pb += slabs * NR * g.kc;
        }
    }
}

/* Rows (or row slabs) of a block of `rows` where a block takes at most cap: cap, but a last block of
 * at most a quarter of cap joins the one before (the encoder's 128-token products at MC 120: 120 + 8
 * rows, and the 8 read all of B again, from L3; 128 x 256 x 1024 on one thread, Zen 3, 83 -> 87
 * GFLOP/s, best of 10). */
static int64_t rows_per_block(int64_t rows, int64_t cap) { return rows > cap && rows <= cap + cap / 4 ? rows : cap; }

/* The blocked product with g's callbacks and packing buffers (g->pb, g->pa of sg_pack_sizes); with
 * no pack_b, g->pb is B packed beforehand and the tasks are sg_prepacked_tasks: two runs of rows
 * per thread (at most MC rows, or rows_per_block's; a thread that is late, on a busy machine, leaves
 * half its share to the others), or all rows when the columns are split. */
static void sg_blocked(const ot_kernel_ctx *ctx, sg_args *g) {
    g->rows_outer = g->M * g->N > ROWS_OUTER_FLOATS;
    for (g->jc = 0; g->jc < g->N; g->jc += NC) {
        g->nc = g->N - g->jc < NC ? g->N - g->jc : NC;
        const int64_t step = kc_step(g->K), slabs = (g->nc + NR - 1) / NR;
        if (!g->pack_b) {
            g->run_slabs = (slabs + g->col_runs - 1) / g->col_runs;
            for (g->ic = 0; g->ic < g->M; g->ic += MSUP) {
                g->mc = g->M - g->ic < MSUP ? g->M - g->ic : MSUP;
                int64_t rows = (g->mc + MR - 1) / MR, parts = g->threads > 1 ? 2 * g->threads : 1,
                        per = (rows + parts - 1) / parts;
                g->row_slabs = g->col_runs > 1 ? rows : per < MC / MR ? per : rows_per_block(per, MC / MR);
                run_range(ctx, (rows + g->row_slabs - 1) / g->row_slabs * ((slabs + g->run_slabs - 1) / g->run_slabs),
                          1, sg_prepacked_tasks, g);
            }
            g->pb += slabs * NR * g->K; /* the next panel */
            continue;
        }
        g->n_nch = (g->nc + NCH - 1) / NCH;
        for (g->pc = 0; g->pc < g->K; g->pc += g->kc) {
            g->kc = g->K - g->pc < step ? g->K - g->pc : step;
            if (!g->b_rows)
                run_range(ctx, slabs, 4, sg_pack_b, g);
            else if (g->nc % NR) /* the short slab at the panel's edge: the kernels read a full one */
                sg_pack_b(g, slabs - 1, slabs);
            for (g->ic = 0; g->ic < g->M; g->ic += MSUP) {
                g->mc = g->M - g->ic < MSUP ? g->M - g->ic : MSUP;
                if (!g->direct) run_range(ctx, (g->mc + MR - 1) / MR, 4, sg_pack_a, g);
                /* fewer column blocks than threads (batch-1 1x1 convolutions of 8x8 maps: one block of
                 * 64 columns): rows split so that every thread has a block */
                const int64_t threads = ctx && ctx->n_threads > 1 ? ctx->n_threads : 1;
                const int64_t split = ((g->mc + threads - 1) / threads + MR - 1) / MR * MR;
                g->mcb = g->n_nch < threads && split < MC ? split : rows_per_block(g->mc, MC);
                run_range(ctx, ((g->mc + g->mcb - 1) / g->mcb) * g->n_nch, 1, sg_compute, g);
            }
        }
    }
}

/* Few rows: no packing. Columns [j0, j1) of every row. */
static void sg_small_m(void *arg, int64_t j0, int64_t j1) {
    sg_args *g = arg;
    for (int64_t i = 0; i < g->M; i++) {
        float *c = g->C + i * g->ldc;
        if (!g->tb) {
            scale_rows_f(c + j0, g->ldc, 1, j1 - j0, g->beta);
            for (int64_t k = 0; k < g->K; k++) {
                float a = g->alpha * (g->ta ? g->A[k * g->lda + i] : g->A[i * g->lda + k]);
                const float *restrict b = g->B + k * g->ldb;
                float *restrict cc = c;
                for (int64_t j = j0; j < j1; j++) cc[j] += a * b[j];
            }
        } else {
            /* A row contiguous when !ta; gather it otherwise (rare). */
            for (int64_t j = j0; j < j1; j++) {
                const float *b = g->B + j * g->ldb;
                float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                int64_t k = 0;
                if (!g->ta) {
                    const float *a = g->A + i * g->lda;
                    for (; k + 4 <= g->K; k += 4) {
                        s0 += a[k] * b[k];
                        s1 += a[k + 1] * b[k + 1];
                        s2 += a[k + 2] * b[k + 2];
                        s3 += a[k + 3] * b[k + 3];
                    }
                    for (; k < g->K; k++) s0 += a[k] * b[k];
                } else {
                    for (; k < g->K; k++) s0 += g->A[k * g->lda + i] * b[k];
                }
                float s = g->alpha * ((s0 + s1) + (s2 + s3));
                c[j] = g->beta == 0.0f ? s : g->beta * c[j] + s;
            }
        }
    }
    if (g->epi) epi_apply(g->epi, g->C, g->ldc, 0, g->M, j0, j1 - j0);
}

/* No product (K == 0 or alpha == 0): rows [i0, i1) of C get only beta and the epilogue. */
static void sg_scale(void *arg, int64_t i0, int64_t i1) {
    sg_args *g = arg;
    init_rows_f(g->C + i0 * g->ldc, g->ldc, i1 - i0, g->N, g->beta, g->bias);
    if (g->epi) epi_apply(g->epi, g->C, g->ldc, i0, i1 - i0, 0, g->N);
}

/* The direct kernels read B's rows where they are stored (not transposed) instead of packed slabs
 * when few rows of A would amortize packing (1x1 convolutions, B the image: 6-row tiles over 24-64
 * output channels ran 1.3-2x faster at 8x8 to 32x32 maps) and a K slice of them spans at most
 * 256 KiB (a slab whose rows lie on more pages than the L1 DTLB holds re-reads them through TLB
 * misses for each row tile: 256x256x784 took 1.2x the packed time, 512^3 1.7x). A slab read in
 * place is 2 lines a row, ldb floats apart: at ldb 256 its rows fall in 8 of the 64 L1 sets, so it
 * leaves L1 between row tiles, and from 192 rows on packing pays (one thread, Xeon with 48 KB L1:
 * N 64-256, K 128-512: even at 192 rows, packed 1.13-1.25x faster at 384 and 768; the encoder's
 * 4096x1024 by 1024x256 126 -> 170 GFLOP/s). */
static bool sg_b_rows_pays_off(int64_t M, int64_t K, int64_t ldb) {
    return M < 32 * MR && kc_step(K) * ldb * (int64_t)sizeof(float) <= 256 * 1024;
}

/* The portable product with an epilogue (or NULL). */
static otter_status sg_run(const ot_kernel_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                           int64_t ldc, const ot_sgemm_epilogue *epi) {
    if (M <= 0 || N <= 0) return OTTER_OK;
    if (epi && !epi->row_bias && !epi->z && !epi->gate && (!epi->act || epi->act->kind == OT_FUSED_NONE)) epi = NULL;
    sg_args g = {.ta = trans_a,
                 .tb = trans_b,
                 .M = M,
                 .N = N,
                 .K = K,
                 .alpha = alpha,
                 .beta = beta,
                 .A = A,
                 .B = B,
                 .lda = lda,
                 .ldb = ldb,
                 .ldc = ldc,
                 .C = C,
                 .pack_a = mat_pack_a,
                 .pack_b = mat_pack_b,
                 .parg = &g,
                 .ukr = pick_ukr(),
                 .direct = !trans_a && alpha == 1.0f ? pick_ukr_direct() : NULL,
                 .epi = epi};
    if (K <= 0 || alpha == 0.0f) {
        run_range(ctx, M, 16, sg_scale, &g);
        return OTTER_OK;
    }
    if (M <= 4) {
        run_range(ctx, N, 64, sg_small_m, &g);
        return OTTER_OK;
    }
    g.b_rows = g.direct && !trans_b && sg_b_rows_pays_off(M, K, ldb);
    size_t nb, na;
    sg_pack_sizes(M, N, K, &nb, &na);
    if (g.direct) na = 0;                /* A read where stored */
    if (g.b_rows && N % NR == 0) nb = 0; /* B too (a short edge slab is packed) */
    if (nb + na > 0) {
        if (!(g.pb = ot_malloc((nb + na) * sizeof(float)))) return OT_NOMEM();
        g.pa = g.pb + nb;
    }
    sg_blocked(ctx, &g);
    ot_free(g.pb);
    return OTTER_OK;
}

otter_status ot_sgemm_portable(const ot_kernel_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                               float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                               float *C, int64_t ldc) {
    return sg_run(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL);
}

/* ---- B packed once: products with constant weights ------------------------------------------ */

/* The packed blocks in the order ot_sgemm_prepacked visits them: per NC panel, per KC slice, the
 * panel's NR-column slabs. */
size_t ot_sgemm_packed_b_size(int64_t K, int64_t N) {
    size_t n = 0;
    for (int64_t jc = 0; jc < N; jc += NC) {
        int64_t nc = N - jc < NC ? N - jc : NC;
        n += (size_t)((nc + NR - 1) / NR * NR * K);
    }
    return n;
}

void ot_sgemm_pack_b(const ot_kernel_ctx *ctx, bool trans_b, int64_t K, int64_t N, const float *B, int64_t ldb,
                     float *packed) {
    sg_args g = {.tb = trans_b, .N = N, .K = K, .B = B, .ldb = ldb, .pack_b = mat_pack_b, .parg = &g, .pb = packed};
    const int64_t kcap = kc_step(K);
    for (g.jc = 0; g.jc < N; g.jc += NC) {
        g.nc = N - g.jc < NC ? N - g.jc : NC;
        for (g.pc = 0; g.pc < K; g.pc += g.kc) {
            g.kc = K - g.pc < kcap ? K - g.pc : kcap;
            run_range(ctx, (g.nc + NR - 1) / NR, 4, sg_pack_b, &g);
            g.pb += (g.nc + NR - 1) / NR * NR * g.kc;
        }
    }
}

otter_status ot_sgemm_prepacked(const ot_kernel_ctx *ctx, bool trans_a, int64_t M, int64_t N, int64_t K, float alpha,
                                const float *A, int64_t lda, const float *packed_b, float beta, float *C, int64_t ldc,
                                const float *bias, const ot_fused_act *act) {
    if (M <= 0 || N <= 0) return OTTER_OK;
    sg_args g = {.ta = trans_a,
                 .M = M,
                 .N = N,
                 .K = K,
                 .alpha = alpha,
                 .beta = beta,
                 .A = A,
                 .lda = lda,
                 .ldc = ldc,
                 .C = C,
                 .pack_a = mat_pack_a,
                 .parg = &g,
                 .ukr = pick_ukr(),
                 /* (the packed slab folds alpha in; A's own rows can't) */
                 .direct = !trans_a && alpha == 1.0f ? pick_ukr_direct() : NULL,
                 .bias = bias};
    const ot_sgemm_epilogue epi = {.act = act};
    if (act && act->kind != OT_FUSED_NONE) g.epi = &epi;
    if (K <= 0 || alpha == 0.0f) {
        run_range(ctx, M, 16, sg_scale, &g);
        return OTTER_OK;
    }
    /* Enough row slabs for every thread: runs of rows; else (a few rows) all rows per task and the
     * columns cut into one run per thread, each packing its own copy of the small A. */
    size_t nb;
    sg_pack_sizes(M, N, K, &nb, &g.na);
    g.threads = ctx && ctx->n_threads > 1 ? ctx->n_threads : 1;
    g.col_runs = ((M < MSUP ? M : MSUP) + MR - 1) / MR >= 2 * g.threads ? 1 : g.threads;
    if (!g.direct && !(g.pa = ot_malloc((size_t)g.col_runs * g.na * sizeof(float)))) return OT_NOMEM();
    g.pb = (float *)(uintptr_t)packed_b; /* read only: without pack_b nothing writes it */
    sg_blocked(ctx, &g);
    ot_free(g.pa);
    return OTTER_OK;
}

/* ---- operands from packing callbacks ---------------------------------------------------------- */

/* A K split over parts: part t runs the blocked product over its K range on one thread, into C
 * (part 0, with beta) or its own M x N buffer (beta 0). */
typedef struct sk_args {
    const sg_args *g;
    int64_t parts, kpart;
    size_t nb, na; /* packing floats per part */
    float *buf;    /* per part: packing buffers; then parts - 1 buffers of M x N */
} sk_args;

static void sk_part(void *arg, int64_t t0, int64_t t1) {
    const sk_args *s = arg;
    for (int64_t t = t0; t < t1; t++) {
        sg_args g = *s->g;
        g.k0 = t * s->kpart;
        g.K = g.K - g.k0 < s->kpart ? g.K - g.k0 : s->kpart;
        g.pb = s->buf + (size_t)t * (s->nb + s->na);
        g.pa = g.pb + s->nb;
        if (t > 0) {
            g.C = s->buf + (size_t)s->parts * (s->nb + s->na) + (size_t)(t - 1) * (size_t)(g.M * g.N);
            g.ldc = g.N;
            g.beta = 0.0f;
        }
        sg_blocked(NULL, &g);
    }
}

/* Rows [i0, i1) of C += the other parts' sums, in part order. */
static void sk_reduce(void *arg, int64_t i0, int64_t i1) {
    const sk_args *s = arg;
    const sg_args *g = s->g;
    const float *parts = s->buf + (size_t)s->parts * (s->nb + s->na);
    for (int64_t i = i0; i < i1; i++)
        for (int64_t t = 1; t < s->parts; t++) {
            const float *restrict src = parts + (size_t)(t - 1) * (size_t)(g->M * g->N) + i * g->N;
            float *restrict c = g->C + i * g->ldc;
            for (int64_t j = 0; j < g->N; j++) c[j] += src[j];
        }
}

otter_status ot_sgemm_packing(const ot_kernel_ctx *ctx, int64_t M, int64_t N, int64_t K, ot_sgemm_pack_fn pack_a,
                              ot_sgemm_pack_fn pack_b, const void *arg, float beta, float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return OTTER_OK;
    sg_args g = {.M = M,
                 .N = N,
                 .K = K,
                 .beta = beta,
                 .ldc = ldc,
                 .C = C,
                 .pack_a = pack_a,
                 .pack_b = pack_b,
                 .parg = arg,
                 .ukr = pick_ukr()};
    if (K <= 0) {
        run_range(ctx, M, 16, sg_scale, &g);
        return OTTER_OK;
    }
    /* A long K with a small C (weight gradients) gives few tiles per KC slice (unbalanced below
     * about 8 per thread) and three thread barriers per slice: split K over the threads instead
     * (at least 4 slices each; the copies of C stay small). */
    int64_t threads = ctx && ctx->n_threads > 1 ? ctx->n_threads : 1, parts = K / (4 * KC);
    int64_t tiles = (M < MSUP ? (M + MC - 1) / MC : MSUP / MC) * (((N < NC ? N : NC) + NCH - 1) / NCH);
    if (parts > threads) parts = threads;
    if (tiles >= 8 * threads) parts = 1;
    if (parts < 1) parts = 1;
    sk_args s = {.g = &g, .parts = parts, .kpart = (K + parts - 1) / parts};
    if (parts > 1) s.kpart = (s.kpart + KC - 1) / KC * KC;
    sg_pack_sizes(M, N, parts > 1 ? s.kpart : K, &s.nb, &s.na);
    s.buf = ot_malloc(((size_t)parts * (s.nb + s.na) + (size_t)(parts - 1) * (size_t)(M * N)) * sizeof(float));
    if (!s.buf) return OT_NOMEM();
    if (parts == 1) {
        g.pb = s.buf;
        g.pa = s.buf + s.nb;
        sg_blocked(ctx, &g);
    } else {
        ot_parallel_for(ctx, parts, 1, sk_part, &s);
        run_range(ctx, M, 8, sk_reduce, &s);
    }
    ot_free(s.buf);
    return OTTER_OK;
}

/* ---- portable dgemm: row-wise axpy / dot, parallel over rows -------------------------------- */

typedef struct dg_args {
    bool ta, tb;
    int64_t M, N, K;
    double alpha, beta;
    const double *A, *B;
    int64_t lda, ldb, ldc;
    double *C;
} dg_args;

static void dg_rows(void *arg, int64_t i0, int64_t i1) {
    dg_args *g = arg;
    for (int64_t i = i0; i < i1; i++) {
        double *c = g->C + i * g->ldc;
        if (!g->tb) {
            scale_rows_d(c, g->ldc, 1, g->N, g->beta);
            for (int64_t k = 0; k < g->K; k++) {
                double a = g->alpha * (g->ta ? g->A[k * g->lda + i] : g->A[i * g->lda + k]);
                const double *restrict b = g->B + k * g->ldb;
                double *restrict cc = c;
                for (int64_t j = 0; j < g->N; j++) cc[j] += a * b[j];
            }
        } else {
            for (int64_t j = 0; j < g->N; j++) {
                const double *b = g->B + j * g->ldb;
                double s = 0;
                for (int64_t k = 0; k < g->K; k++) s += (g->ta ? g->A[k * g->lda + i] : g->A[i * g->lda + k]) * b[k];
                c[j] = g->beta == 0.0 ? g->alpha * s : g->beta * c[j] + g->alpha * s;
            }
        }
    }
}

otter_status ot_dgemm_portable(const ot_kernel_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                               double alpha, const double *A, int64_t lda, const double *B, int64_t ldb, double beta,
                               double *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return OTTER_OK;
    dg_args g = {.ta = trans_a,
                 .tb = trans_b,
                 .M = M,
                 .N = N,
                 .K = K < 0 ? 0 : K,
                 .alpha = alpha,
                 .beta = beta,
                 .A = A,
                 .B = B,
                 .lda = lda,
                 .ldb = ldb,
                 .ldc = ldc,
                 .C = C};
    run_range(ctx, M, 4, dg_rows, &g);
    return OTTER_OK;
}

/* ---- entry points ----------------------------------------------------------------------------- */

#ifndef OTTER_HAVE_BLAS
void ot_gemm_session_start(void) {}
#else
/* Float products run on otter's own kernels wherever the CPU has AVX2 and FMA, OpenBLAS's only
 * below that (its SSE/AVX kernels then beat the generic C one). Two reasons. Results: OpenBLAS picks
 * its kernels from the CPU model when it loads, and each kernel sums in its own order, so one
 * model gave different bits on different machines; on a Zen 5 EPYC (OpenBLAS 0.3.21 picks
 * Haswell there) the 1000 equal logits of ONNX's light_squeezenet came out a few ULPs apart at
 * 9.5e9, and its softmax collapsed to 0 where every other machine gave 0.001. otter's kernels
 * sum each element of C as one FMA chain over k in KC slices: an order fixed by the code, not by
 * the CPU model. Speed: otter's kernels carry the fused epilogues, the prepacked weights and the
 * streaming B, and on a model newer than the library OpenBLAS falls back to its SSE3 "Prescott"
 * kernels (0.3.21 on an Emerald Rapids Xeon: 128x256 by 256x1024 2.2 ms against ~0.6). */
static bool own_float_kernels(void) { return ot_gemm_isa_best() != OT_GEMM_GENERIC; }

/* Not in cblas.h: OpenBLAS's own call that stops its thread pool (it starts it again when a product
 * needs it). Weak, so an OpenBLAS build without it links all the same. */
extern int blas_thread_shutdown_(void) __attribute__((weak));

void ot_gemm_session_start(void) {
    static atomic_flag done = ATOMIC_FLAG_INIT;
    if (own_float_kernels() && blas_thread_shutdown_ && !atomic_flag_test_and_set(&done)) blas_thread_shutdown_();
}

static atomic_int blas_threads = 0;
static void blas_set_threads(int n) {
    if (atomic_exchange(&blas_threads, n) != n) openblas_set_num_threads(n);
}

/* One row: sgemv over columns [j0, j1) of C. */
typedef struct gemv_args {
    bool ta, tb;
    int64_t K, lda, ldb;
    float alpha, beta;
    const float *A, *B;
    float *C;
} gemv_args;

static void gemv_cols(void *arg, int64_t j0, int64_t j1) {
    const gemv_args *g = arg;
    if (g->beta == 0.0f) memset(g->C + j0, 0, (size_t)(j1 - j0) * sizeof(float)); /* never read C's garbage */
    int inc_a = g->ta ? (int)g->lda : 1, n = (int)(j1 - j0);
    if (g->tb)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, (int)g->K, g->alpha, g->B + j0 * g->ldb, (int)g->ldb, g->A, inc_a,
                    g->beta, g->C + j0, 1);
    else
        cblas_sgemv(CblasRowMajor, CblasTrans, (int)g->K, n, g->alpha, g->B + j0, (int)g->ldb, g->A, inc_a, g->beta,
                    g->C + j0, 1);
}
#endif

otter_status ot_sgemm(const ot_kernel_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                      int64_t ldc) {
#ifdef OTTER_HAVE_BLAS
    if (own_float_kernels())
        return ot_sgemm_portable(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (M <= 0 || N <= 0) return OTTER_OK;
    if (K <= 0 || alpha == 0.0f) {
        scale_rows_f(C, ldc, M, N, beta);
        return OTTER_OK;
    }
    if (M == 1) {
        /* One row (batch-1 inference): sgemv streams op(B) once, where sgemm would first pack it all.
         * Its columns split over the session's threads (chunks of at least 32K products), with
         * OpenBLAS on one thread: its own workers would spin on the cores the session's use. */
        gemv_args g = {.ta = trans_a,
                       .tb = trans_b,
                       .K = K,
                       .lda = lda,
                       .ldb = ldb,
                       .alpha = alpha,
                       .beta = beta,
                       .A = A,
                       .B = B,
                       .C = C};
        blas_set_threads(1);
        run_range(ctx, N, K < 32768 ? 32768 / K : 1, gemv_cols, &g);
        return OTTER_OK;
    }
    blas_set_threads(ctx && ctx->n_threads > 0 ? ctx->n_threads : 1);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return OTTER_OK;
#else
    return ot_sgemm_portable(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

#ifdef OTTER_HAVE_BLAS
/* Rows [i0, i1) of C get the epilogue (after an OpenBLAS product). */
static void sg_epilogue_rows(void *arg, int64_t i0, int64_t i1) {
    const sg_args *g = arg;
    epi_apply(g->epi, g->C, g->ldc, i0, i1 - i0, 0, g->N);
}
#endif

otter_status ot_sgemm_fused(const ot_kernel_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                            int64_t ldc, const ot_sgemm_epilogue *epi) {
#ifdef OTTER_HAVE_BLAS
    if (!own_float_kernels()) {
        OT_TRY(ot_sgemm(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc));
        sg_args g = {.N = N, .C = C, .ldc = ldc, .epi = epi};
        if (epi) run_range(ctx, M, 16, sg_epilogue_rows, &g);
        return OTTER_OK;
    }
#endif
    return sg_run(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc, epi);
}

otter_status ot_dgemm(const ot_kernel_ctx *ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                      double alpha, const double *A, int64_t lda, const double *B, int64_t ldb, double beta, double *C,
                      int64_t ldc) {
#ifdef OTTER_HAVE_BLAS
    if (M <= 0 || N <= 0) return OTTER_OK;
    if (K <= 0 || alpha == 0.0) {
        scale_rows_d(C, ldc, M, N, beta);
        return OTTER_OK;
    }
    blas_set_threads(ctx && ctx->n_threads > 0 ? ctx->n_threads : 1);
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return OTTER_OK;
#else
    return ot_dgemm_portable(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}
