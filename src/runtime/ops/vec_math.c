/* In-place row softmax for the attention kernels (see softmax_row.h).
 *
 * exp is Cephes' expf scheme: x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-6 polynomial,
 * 2^n put in the exponent bits; inputs below -87.3 (softmax's masked -inf among them) give 0. The
 * portable and AVX2 paths run the same steps, so they differ only by FMA rounding. */
#include "runtime/ops/vec_math.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
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
#define SQRT1_2 0.70710678118654752f
#define GELU_K  1.5957691216057308f /* 2 sqrt(2 / pi) */
#define GELU_C  0.044715f

static inline float act_scalar(ot_vec_act act, float alpha, float x) {
    switch (act) {
    case OT_VEC_GELU_ERF: {
        float z = fabsf(x) * SQRT1_2, t = 1.0f / (1.0f + 0.5f * z), p = erfc_coef[9];
        for (int k = 8; k >= 0; k--) p = p * t + erfc_coef[k];
        float erfc = t * exp_poly(p - z * z);
        return 0.5f * x * (x < 0 ? erfc : 2.0f - erfc);
    }
    case OT_VEC_GELU_TANH:
        return x / (1.0f + exp_poly(-GELU_K * (x + GELU_C * x * x * x)));
    case OT_VEC_SWISH:
        return x / (1.0f + exp_poly(-alpha * x));
    }
    return x;
}

static void act_portable(ot_vec_act act, float alpha, const float *x, const float *gate, float *y, int64_t n) {
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
__attribute__((target("avx2,fma"))) static inline __m256 exp_avx2(__m256 x) {
    __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_LT_OQ);
    x = _mm256_min_ps(x, _mm256_set1_ps(EXP_HI));
    x = _mm256_max_ps(x, _mm256_set1_ps(EXP_LO));
    __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(LOG2E), _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    __m256 p = _mm256_set1_ps(P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P5));
    __m256 e = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(underflow, _mm256_mul_ps(e, _mm256_castsi256_ps(bits)));
}

__attribute__((target("avx2,fma"))) static inline __m256 act_avx2(ot_vec_act act, __m256 alpha, __m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    switch (act) {
    case OT_VEC_GELU_ERF: {
        __m256 negative = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
        __m256 z = _mm256_mul_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm256_set1_ps(SQRT1_2));
        __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.5f), z, one));
        __m256 p = _mm256_set1_ps(erfc_coef[9]);
        for (int k = 8; k >= 0; k--) p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(erfc_coef[k]));
        __m256 erfc = _mm256_mul_ps(t, exp_avx2(_mm256_fnmadd_ps(z, z, p)));
        __m256 factor = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(2.0f), erfc), erfc, negative);
        return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), factor);
    }
    case OT_VEC_GELU_TANH: {
        __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        __m256 u = _mm256_mul_ps(_mm256_set1_ps(-GELU_K), _mm256_fmadd_ps(_mm256_set1_ps(GELU_C), x3, x));
        return _mm256_div_ps(x, _mm256_add_ps(one, exp_avx2(u)));
    }
    case OT_VEC_SWISH:
        return _mm256_div_ps(x,
                             _mm256_add_ps(one, exp_avx2(_mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), alpha), x))));
    }
    return x;
}

__attribute__((target("avx2,fma"))) static void act_avx2_run(ot_vec_act act, float alpha, const float *x,
                                                             const float *gate, float *y, int64_t n) {
    __m256 va = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = act_avx2(act, va, _mm256_loadu_ps(x + i));
        if (gate) v = _mm256_mul_ps(v, _mm256_loadu_ps(gate + i));
        _mm256_storeu_ps(y + i, v);
    }
    act_portable(act, alpha, x + i, gate ? gate + i : NULL, y + i, n - i);
}

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

__attribute__((target("avx2,fma"))) static void softmax_avx2(float *row, int64_t n) {
    int64_t j = 0, n8 = n & ~(int64_t)7;
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    for (; j < n8; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(row + j));
    float max = hmax_avx2(vmax);
    for (; j < n; j++) max = row[j] > max ? row[j] : max;
    if (max == -INFINITY) {
        memset(row, 0, (size_t)n * sizeof(float));
        return;
    }
    __m256 vm = _mm256_set1_ps(max), vsum = _mm256_setzero_ps();
    for (j = 0; j < n8; j += 8) {
        __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(row + j), vm));
        _mm256_storeu_ps(row + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    float sum = hsum_avx2(vsum);
    for (; j < n; j++) sum += row[j] = exp_poly(row[j] - max);
    __m256 vinv = _mm256_set1_ps(1.0f / sum);
    for (j = 0; j < n8; j += 8) _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), vinv));
    float inv = 1.0f / sum;
    for (; j < n; j++) row[j] *= inv;
}
#endif

#ifdef OT_VEC_X86
static bool use_avx2(void) {
    static atomic_int choice = 0; /* 0 unknown, 1 portable, 2 avx2 */
    int ch = atomic_load(&choice);
    if (ch == 0) {
        __builtin_cpu_init();
        ch = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 2 : 1;
        atomic_store(&choice, ch);
    }
    return ch == 2;
}
#endif

void ot_softmax_row(float *row, int64_t n) {
#ifdef OT_VEC_X86
    if (use_avx2()) {
        softmax_avx2(row, n);
        return;
    }
#endif
    softmax_portable(row, n);
}

void ot_vec_activation(ot_vec_act act, float alpha, const float *x, const float *gate, float *y, int64_t n) {
#ifdef OT_VEC_X86
    if (use_avx2()) {
        act_avx2_run(act, alpha, x, gate, y, n);
        return;
    }
#endif
    act_portable(act, alpha, x, gate, y, n);
}
