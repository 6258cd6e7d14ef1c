/* Fused activations (see fused_act.h). */
#include "runtime/ops/fused_act.h"

#include <math.h>
#include <string.h>

#include "runtime/ops/broadcast.h"
#include "runtime/ops/vec_math.h"

static const struct {
    const char *name;
    ot_fused_act_kind kind;
    size_t n_params;
    float p0, p1; /* defaults: ONNX's attribute defaults, Clip's float range */
} fused_acts[] = {
    {"Relu", OT_FUSED_RELU, 0, 0, 0},
    {"Clip", OT_FUSED_CLIP, 2, -INFINITY, INFINITY},
    {"LeakyRelu", OT_FUSED_LEAKY_RELU, 1, 0.01f, 0},
    {"HardSigmoid", OT_FUSED_HARD_SIGMOID, 2, 0.2f, 0.5f},
    {"HardSwish", OT_FUSED_HARD_SWISH, 0, 0, 0},
    {"Sigmoid", OT_FUSED_SIGMOID, 0, 0, 0},
    {"Swish", OT_FUSED_SWISH, 0, 0, 0},
    {"Gelu", OT_FUSED_GELU, 0, 0, 0},
    {"GeluTanh", OT_FUSED_GELU_TANH, 0, 0, 0},
};

otter_status ot_fused_act_read(const ot_kernel_ctx *ctx, ot_fused_act *act) {
    *act = (ot_fused_act){OT_FUSED_NONE, 0, 0};
    const char *dom = ctx->node->domain;
    /* com.otter's own attributes (fuse.c sets them): no ONNX schema has them */
    const char *name = dom && !strcmp(dom, "com.otter") ? ot_ctx_attr_string_or(ctx, "activation", "") : "";
    if (!name[0]) return OTTER_OK;
    for (size_t i = 0; i < sizeof fused_acts / sizeof *fused_acts; i++) {
        if (strcmp(name, fused_acts[i].name) != 0) continue;
        const otter_attr *p = otter_node_attr(ctx->node, "activation_params");
        size_t n = p ? p->n_floats : 0;
        if (n != 0 && n != fused_acts[i].n_params)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "fused activation '%s' takes %zu activation_params, got %zu",
                                name, fused_acts[i].n_params, n);
        *act = (ot_fused_act){fused_acts[i].kind, n ? p->floats[0] : fused_acts[i].p0,
                              n > 1 ? p->floats[1] : fused_acts[i].p1};
        return OTTER_OK;
    }
    return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "fused activation '%s' is not supported", name);
}

/* The piecewise-linear ones (Relu, Clip: mobile nets' Relu6, LeakyRelu, HardSigmoid: their SE
 * gates) in AVX-512 or AVX2 registers, with the portable loop's bits: max / min return the second
 * operand when either is NaN (and when both are zeros), so max(v, 0) makes NaN and -0 into +0 as
 * Relu's mask does, min(hi, max(lo, v)) keeps NaN as Clip's two compares do, and HardSigmoid's
 * max(min(a x + b, 1), 0) gives fmax / fmin's results, NaN to 1 (a x + b as a product then a sum:
 * C11 contracts nothing). Measured (perf, batch 32): the 4-lane Relu / Clip loop was 3.6% of
 * mobilenet_v2's inference, the scalar HardSigmoid and LeakyRelu loops 3.5% of mobilenet_v3_small's. */
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "runtime/ops/simd_transpose.h"
#define OT_FA_X86 1

static bool piecewise(ot_fused_act_kind kind) {
    return kind == OT_FUSED_RELU || kind == OT_FUSED_CLIP || kind == OT_FUSED_LEAKY_RELU ||
           kind == OT_FUSED_HARD_SIGMOID;
}

__attribute__((target("avx512f"), always_inline)) static inline __m512
piecewise_avx512(ot_fused_act_kind kind, __m512 v, __m512 p0, __m512 p1) {
    const __m512 zero = _mm512_setzero_ps();
    switch (kind) {
    case OT_FUSED_CLIP:
        return _mm512_min_ps(p1, _mm512_max_ps(p0, v));
    case OT_FUSED_LEAKY_RELU:
        return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, p0);
    case OT_FUSED_HARD_SIGMOID:
        return _mm512_max_ps(_mm512_min_ps(_mm512_add_ps(_mm512_mul_ps(p0, v), p1), _mm512_set1_ps(1.0f)), zero);
    default:
        return _mm512_max_ps(v, zero);
    }
}

__attribute__((target("avx2"), always_inline)) static inline __m256 piecewise_avx2(ot_fused_act_kind kind, __m256 v,
                                                                                   __m256 p0, __m256 p1) {
    const __m256 zero = _mm256_setzero_ps();
    switch (kind) {
    case OT_FUSED_CLIP:
        return _mm256_min_ps(p1, _mm256_max_ps(p0, v));
    case OT_FUSED_LEAKY_RELU:
        return _mm256_blendv_ps(v, _mm256_mul_ps(v, p0), _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
    case OT_FUSED_HARD_SIGMOID:
        return _mm256_max_ps(_mm256_min_ps(_mm256_add_ps(_mm256_mul_ps(p0, v), p1), _mm256_set1_ps(1.0f)), zero);
    default:
        return _mm256_max_ps(v, zero);
    }
}

/* One loop per kind (a constant after inlining); the floats done. AVX-512 does all (a masked tail),
 * AVX2 whole vectors, leaving the tail to the portable loop. */
__attribute__((target("avx512f"), always_inline)) static inline int64_t avx512_rows(ot_fused_act_kind kind, float *y,
                                                                                    int64_t n, float p0, float p1) {
    const __m512 v0 = _mm512_set1_ps(p0), v1 = _mm512_set1_ps(p1);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = ot_lanes16(n - i);
        _mm512_mask_storeu_ps(y + i, m, piecewise_avx512(kind, _mm512_maskz_loadu_ps(m, y + i), v0, v1));
    }
    return n;
}

__attribute__((target("avx512f"))) static int64_t piecewise_rows_avx512(ot_fused_act_kind kind, float *y, int64_t n,
                                                                        float p0, float p1) {
    switch (kind) {
    case OT_FUSED_CLIP:
        return avx512_rows(OT_FUSED_CLIP, y, n, p0, p1);
    case OT_FUSED_LEAKY_RELU:
        return avx512_rows(OT_FUSED_LEAKY_RELU, y, n, p0, p1);
    case OT_FUSED_HARD_SIGMOID:
        return avx512_rows(OT_FUSED_HARD_SIGMOID, y, n, p0, p1);
    default:
        return avx512_rows(OT_FUSED_RELU, y, n, p0, p1);
    }
}

__attribute__((target("avx2"), always_inline)) static inline int64_t avx2_rows(ot_fused_act_kind kind, float *y,
                                                                               int64_t n, float p0, float p1) {
    const __m256 v0 = _mm256_set1_ps(p0), v1 = _mm256_set1_ps(p1);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, piecewise_avx2(kind, _mm256_loadu_ps(y + i), v0, v1));
    return i;
}

__attribute__((target("avx2"))) static int64_t piecewise_rows_avx2(ot_fused_act_kind kind, float *y, int64_t n,
                                                                   float p0, float p1) {
    switch (kind) {
    case OT_FUSED_CLIP:
        return avx2_rows(OT_FUSED_CLIP, y, n, p0, p1);
    case OT_FUSED_LEAKY_RELU:
        return avx2_rows(OT_FUSED_LEAKY_RELU, y, n, p0, p1);
    case OT_FUSED_HARD_SIGMOID:
        return avx2_rows(OT_FUSED_HARD_SIGMOID, y, n, p0, p1);
    default:
        return avx2_rows(OT_FUSED_RELU, y, n, p0, p1);
    }
}
#endif

void ot_add_bias_row(float *restrict y, const float *restrict z, float b, int64_t n) {
    const ot_v4 bv = {b, b, b, b};
    int64_t j = 0;
    if (z) {
        for (; j + 4 <= n; j += 4) ot_v4_store(y + j, ot_v4_load(y + j) + bv + ot_v4_load(z + j));
        for (; j < n; j++) y[j] = y[j] + b + z[j];
    } else {
        for (; j + 4 <= n; j += 4) ot_v4_store(y + j, ot_v4_load(y + j) + bv);
        for (; j < n; j++) y[j] += b;
    }
}

void ot_fused_act_apply(const ot_fused_act *act, float *y, int64_t n) {
    ot_fused_act_apply_isa(ot_vec_isa_best(), act, y, n);
}

void ot_fused_act_apply_isa(ot_vec_isa isa, const ot_fused_act *act, float *y, int64_t n) {
    if (!act) return;
    const float p0 = act->p0, p1 = act->p1;
    int64_t i = 0; /* the floats the vector paths did; the loops below do the rest */
#ifdef OT_FA_X86
    if (piecewise(act->kind) && isa == OT_VEC_AVX512) i = piecewise_rows_avx512(act->kind, y, n, p0, p1);
    if (piecewise(act->kind) && isa == OT_VEC_AVX2) i = piecewise_rows_avx2(act->kind, y, n, p0, p1);
#else
    (void)isa;
#endif
    const ot_v4 zero = {0, 0, 0, 0}, lo = {p0, p0, p0, p0}, hi = {p1, p1, p1, p1};
    switch (act->kind) {
    case OT_FUSED_NONE:
        break;
    case OT_FUSED_RELU: /* four lanes with compare masks: the scalar loop is a mispredicted branch */
        for (; i + 4 <= n; i += 4) {
            const ot_v4 v = ot_v4_load(y + i);
            ot_v4_store(y + i, (ot_v4)((ot_i4)v & (v > zero)));
        }
        for (; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        break;
    case OT_FUSED_CLIP: /* as the Clip kernel: NaN stays NaN (both compares false) */
        for (; i + 4 <= n; i += 4) {
            const ot_v4 v = ot_v4_load(y + i);
            const ot_i4 below = v < lo;
            const ot_v4 w = (ot_v4)((below & (ot_i4)lo) | (~below & (ot_i4)v));
            const ot_i4 above = w > hi;
            ot_v4_store(y + i, (ot_v4)((above & (ot_i4)hi) | (~above & (ot_i4)w)));
        }
        for (; i < n; i++) {
            float v = y[i] < p0 ? p0 : y[i];
            y[i] = v > p1 ? p1 : v;
        }
        break;
    case OT_FUSED_LEAKY_RELU:
        for (; i < n; i++) y[i] = y[i] < 0.0f ? p0 * y[i] : y[i];
        break;
    case OT_FUSED_HARD_SIGMOID: /* as the HardSigmoid kernel: NaN becomes 1 */
        for (; i < n; i++) y[i] = (float)fmax(0.0f, fmin(1.0f, p0 * y[i] + p1));
        break;
    /* the transcendental ones: vec_math's row functions (a switch, not a table scan: the product
     * epilogues call this per row of a tile) */
    case OT_FUSED_HARD_SWISH:
        ot_vec_activation(OT_VEC_HARDSWISH, 0.0f, y, NULL, y, n);
        break;
    case OT_FUSED_SIGMOID:
        ot_vec_activation(OT_VEC_SIGMOID, 0.0f, y, NULL, y, n);
        break;
    case OT_FUSED_SWISH:
        ot_vec_activation(OT_VEC_SWISH, 1.0f, y, NULL, y, n);
        break;
    case OT_FUSED_GELU:
        ot_vec_activation(OT_VEC_GELU_ERF, 0.0f, y, NULL, y, n);
        break;
    case OT_FUSED_GELU_TANH:
        ot_vec_activation(OT_VEC_GELU_TANH, 0.0f, y, NULL, y, n);
        break;
    }
}
