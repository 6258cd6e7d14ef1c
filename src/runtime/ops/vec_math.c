/* Row softmax and activations (see vec_math.h).
 *
 * exp is Cephes' expf scheme: x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-6 polynomial,
 * 2^n put in the exponent bits; inputs below -87.3 (softmax's masked -inf among them) give 0. The
 * portable, AVX2 and AVX-512 paths run the same steps, so they differ only by FMA rounding. */
#include "runtime/ops/vec_math.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "runtime/ops/simd_transpose.h"
#define OT_VEC_X86 1
#endif

#define EXP_LO -87.33654f /* below: e^x underflows float's normal range, result 0 */
#define EXP_HI 88.37626f
#define LOG2E  1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define P0     1.9875691500E-4f
#define P1     1.3981999507E-3f
#define P2     8.3334519073E-3f
#define P3     4.1665795894E-2f
#define P4     1.6666665459E-1f
#define P5     5.0000001201E-1f

static inline float exp_poly(float x) {
    if (x != x) return x;
    if (x < EXP_LO) return 0.0f;
    if (x > EXP_HI) x = EXP_HI;
    float n = floorf(x * LOG2E + 0.5f);
    float r = x - n * LN2_HI - n * LN2_LO;
    float p = ((((P0 * r + P1) * r + P2) * r + P3) * r + P4) * r + P5;
    float e = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return e * scale;
}

/* erfc(z) for z >= 0 as t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), P of degree 9 (Numerical Recipes'
 * erfcc: fractional error below 1.2e-7), so Gelu's tail 0.5 x erfc(|x| / sqrt 2) keeps its relative
 * accuracy where 1 + erf(x) would cancel. */
static const float erfc_coef[10] = {-1.26551223f, 1.00002368f,  0.37409196f, 0.09678418f,  -0.18628806f,
                                    0.27886807f,  -1.13520398f, 1.48851587f, -0.82215223f, 0.17087277f};
/* Cephes' tanhf below |x| = 0.625: x + x^3 T(x^2), relative error ~2e-7 there. */
static const float tanh_coef[5] = {-5.70498872745E-3f, 2.06390887954E-2f, -5.37397155531E-2f, 1.33314422036E-1f,
                                   -3.33332819422E-1f};
#define TANH_SMALL 0.625f
#define SQRT1_2    0.70710678118654752f
#define GELU_K     1.5957691216057308f /* 2 sqrt(2 / pi) */
#define GELU_C     0.044715f

/* 1 / (1 + e^-x) as e^x / (1 + e^x) below 0, so it keeps its relative accuracy (and underflows to 0, not to
 * 1 / (1 + e^88)) on the negative side. */
static inline float sigmoid_scalar(float x) {
    float e = exp_poly(-fabsf(x)), s = 1.0f / (1.0f + e);
    return x >= 0 ? s : e * s;
}

static inline float act_scalar(ot_vec_act act, float alpha, float x) {
    switch (act) {
    case OT_VEC_GELU_ERF: {
        float z = fabsf(x) * SQRT1_2, t = 1.0f / (1.0f + 0.5f * z), p = erfc_coef[9];
        for (int k = 8; k >= 0; k--) p = p * t + erfc_coef[k];
        float erfc = t * exp_poly(p - z * z);
        return 0.5f * x * (x < 0 ? erfc : 2.0f - erfc);
    }
    case OT_VEC_GELU_TANH:
        return x * sigmoid_scalar(GELU_K * (x + GELU_C * x * x * x));
    case OT_VEC_SWISH:
        return x * sigmoid_scalar(alpha * x);
    case OT_VEC_SIGMOID:
        return sigmoid_scalar(x);
    case OT_VEC_TANH: {
        float a = fabsf(x);
        if (a < TANH_SMALL) {
            float z = x * x, p = tanh_coef[0];
            for (int k = 1; k < 5; k++) p = p * z + tanh_coef[k];
            return p * z * x + x;
        }
        return copysignf(1.0f - 2.0f / (exp_poly(2.0f * a) + 1.0f), x);
    }
    case OT_VEC_HARDSWISH: {
        float h = (x + 3.0f) * (1.0f / 6.0f); /* not x / 6 + 1/2: that cancels near x = -3 */
        return x != x ? x : x * (h < 0 ? 0 : h > 1 ? 1 : h);
    }
    }
    return x;
}

static void activation_portable(ot_vec_act act, float alpha, const float *x, const float *gate, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = act_scalar(act, alpha, x[i]) * (gate ? gate[i] : 1.0f);
}

static void softmax_portable(float *row, int64_t n) {
    float max = -INFINITY;
    for (int64_t j = 0; j < n; j++) max = row[j] > max ? row[j] : max;
    if (max == -INFINITY) {
        memset(row, 0, (size_t)n * sizeof(float));
        return;
    }
    float sum = 0;
    for (int64_t j = 0; j < n; j++) sum += row[j] = exp_poly(row[j] - max);
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; j++) row[j] *= inv;
}

#ifdef OT_VEC_X86
#define VM_TARGET         "avx2,fma"
#define VM_SUFFIX         _avx2
#define V                 __m256
#define M                 __m256
#define VN                8
#define V_SET1(f)         _mm256_set1_ps(f)
#define V_ZERO()          _mm256_setzero_ps()
#define V_LOADU(p)        _mm256_loadu_ps(p)
#define V_STOREU(p, v)    _mm256_storeu_ps(p, v)
#define V_ADD(a, b)       _mm256_add_ps(a, b)
#define V_SUB(a, b)       _mm256_sub_ps(a, b)
#define V_MUL(a, b)       _mm256_mul_ps(a, b)
#define V_DIV(a, b)       _mm256_div_ps(a, b)
#define V_MIN(a, b)       _mm256_min_ps(a, b)
#define V_MAX(a, b)       _mm256_max_ps(a, b)
#define V_FMADD(a, b, c)  _mm256_fmadd_ps(a, b, c)
#define V_FNMADD(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define V_FLOOR(x)        _mm256_floor_ps(x)
#define V_AND(a, b)       _mm256_and_ps(a, b)
#define V_ANDNOT(a, b)    _mm256_andnot_ps(a, b)
#define V_OR(a, b)        _mm256_or_ps(a, b)
#define V_XOR(a, b)       _mm256_xor_ps(a, b)
#define V_LT(a, b)        _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define V_UNORD(a, b)     _mm256_cmp_ps(a, b, _CMP_UNORD_Q)
#define V_SELECT(m, t, f) _mm256_blendv_ps(f, t, m)
#define V_POW2(n)                                                                                                      \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define V_HMAX(v)           hmax_avx2(v)
#define V_HSUM(v)           hsum_avx2(v)
#define V_LOADN(p, n)       _mm256_maskload_ps(p, ot_lanes8(n))
#define V_LOADN_OR(p, n, f) _mm256_blendv_ps(_mm256_set1_ps(f), V_LOADN(p, n), _mm256_castsi256_ps(ot_lanes8(n)))
#define V_STOREN(p, v, n)   _mm256_maskstore_ps(p, ot_lanes8(n), v)

__attribute__((target("avx2,fma"))) static float hmax_avx2(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

__attribute__((target("avx2,fma"))) static float hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

#include "runtime/ops/vec_math_simd.inc"
#include "runtime/ops/vec_math_simd_undef.inc"

/* AVX-512F only (its float and/or/xor need DQ, so they go through the integer forms). */
#define VM_TARGET         "avx512f"
#define VM_SUFFIX         _avx512
#define V                 __m512
#define M                 __mmask16
#define VN                16
#define V_SET1(f)         _mm512_set1_ps(f)
#define V_ZERO()          _mm512_setzero_ps()
#define V_LOADU(p)        _mm512_loadu_ps(p)
#define V_STOREU(p, v)    _mm512_storeu_ps(p, v)
#define V_ADD(a, b)       _mm512_add_ps(a, b)
#define V_SUB(a, b)       _mm512_sub_ps(a, b)
#define V_MUL(a, b)       _mm512_mul_ps(a, b)
#define V_DIV(a, b)       _mm512_div_ps(a, b)
#define V_MIN(a, b)       _mm512_min_ps(a, b)
#define V_MAX(a, b)       _mm512_max_ps(a, b)
#define V_FMADD(a, b, c)  _mm512_fmadd_ps(a, b, c)
#define V_FNMADD(a, b, c) _mm512_fnmadd_ps(a, b, c)
#define V_FLOOR(x)        _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
#define V_BITS(op, a, b)  _mm512_castsi512_ps(op(_mm512_castps_si512(a), _mm512_castps_si512(b)))
#define V_AND(a, b)       V_BITS(_mm512_and_si512, a, b)
#define V_ANDNOT(a, b)    V_BITS(_mm512_andnot_si512, a, b)
#define V_OR(a, b)        V_BITS(_mm512_or_si512, a, b)
#define V_XOR(a, b)       V_BITS(_mm512_xor_si512, a, b)
#define V_LT(a, b)        _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define V_UNORD(a, b)     _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q)
#define V_SELECT(m, t, f) _mm512_mask_blend_ps(m, f, t)
#define V_POW2(n)                                                                                                      \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
#define V_HMAX(v)           _mm512_reduce_max_ps(v)
#define V_HSUM(v)           _mm512_reduce_add_ps(v)
#define V_LOADN(p, n)       _mm512_maskz_loadu_ps(ot_lanes16(n), p)
#define V_LOADN_OR(p, n, f) _mm512_mask_loadu_ps(_mm512_set1_ps(f), ot_lanes16(n), p)
#define V_STOREN(p, v, n)   _mm512_mask_storeu_ps(p, ot_lanes16(n), v)

#include "runtime/ops/vec_math_simd.inc"
#include "runtime/ops/vec_math_simd_undef.inc"
#undef V_BITS
#endif

ot_vec_isa ot_vec_isa_best(void) {
#ifdef OT_VEC_X86
    static atomic_int choice = -1;
    int ch = atomic_load(&choice);
    if (ch < 0) {
        __builtin_cpu_init();
        ch = __builtin_cpu_supports("avx512f")                                 ? OT_VEC_AVX512
             : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? OT_VEC_AVX2
                                                                               : OT_VEC_PORTABLE;
        atomic_store(&choice, ch);
    }
    return (ot_vec_isa)ch;
#else
    return OT_VEC_PORTABLE;
#endif
}

void ot_softmax_row_isa(ot_vec_isa isa, float *row, int64_t n) {
    switch (isa) {
#ifdef OT_VEC_X86
    case OT_VEC_AVX512:
        softmax_avx512(row, n);
        return;
    case OT_VEC_AVX2:
        softmax_avx2(row, n);
        return;
#endif
    default:
        softmax_portable(row, n);
    }
}

void ot_vec_activation_isa(ot_vec_isa isa, ot_vec_act act, float alpha, const float *x, const float *gate, float *y,
                           int64_t n) {
    switch (isa) {
#ifdef OT_VEC_X86
    case OT_VEC_AVX512:
        activation_avx512(act, alpha, x, gate, y, n);
        return;
    case OT_VEC_AVX2:
        activation_avx2(act, alpha, x, gate, y, n);
        return;
#endif
    default:
        activation_portable(act, alpha, x, gate, y, n);
    }
}

void ot_softmax_row(float *row, int64_t n) { ot_softmax_row_isa(ot_vec_isa_best(), row, n); }

void ot_vec_activation(ot_vec_act act, float alpha, const float *x, const float *gate, float *y, int64_t n) {
    ot_vec_activation_isa(ot_vec_isa_best(), act, alpha, x, gate, y, n);
}
