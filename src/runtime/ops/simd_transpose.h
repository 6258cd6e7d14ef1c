/* In-register transposes (AVX-512 16 x 16, AVX2 8 x 8) shared by the kernels that move planes ([channels][positions])
 * into and out of channel-minor layouts (conv_depthwise.c's channel blocks, nn_conv.c's small-image product,
 * conv_lanes.c), and the masks of a vector's first lanes every masked tail uses (AVX-512, AVX2). */
#ifndef OTTER_RUNTIME_OPS_SIMD_TRANSPOSE_H
#define OTTER_RUNTIME_OPS_SIMD_TRANSPOSE_H

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

/* The first n lanes of 16 (n <= 16). */
__attribute__((target("avx512f"), always_inline)) static inline __mmask16 ot_lanes16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* The first n lanes of 8 (n <= 8), for AVX2's maskload / maskstore. */
__attribute__((target("avx2"), always_inline)) static inline __m256i ot_lanes8(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* r[0, 16) as the rows of a 16 x 16 matrix, transposed in place: pairs of rows interleaved, then pairs
 * of pairs, then 128-bit lanes twice (unrolled: the arrays stay in registers). */
__attribute__((target("avx512f"), always_inline)) static inline void ot_transpose16_avx512(__m512 *r) {
    __m512 t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]),
              t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
#pragma GCC unroll 8
    for (int i = 0; i < 4; i++) {
        u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(u[i], u[i + 4], 0x88), t[i + 4] = _mm512_shuffle_f32x4(u[i], u[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(u[i + 8], u[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(u[i + 8], u[i + 12], 0xdd);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88), r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
}

/* r[0, 8) as the rows of an 8 x 8 matrix, transposed in place: the same steps, the last across the two
 * 128-bit halves. */
__attribute__((target("avx2"), always_inline)) static inline void ot_transpose8_avx2(__m256 *r) {
    __m256 t[8], u[8];
#pragma GCC unroll 8
    for (int i = 0; i < 4; i++)
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]),
              t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
#pragma GCC unroll 8
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 4; i++)
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20), r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
}

#endif

#endif
