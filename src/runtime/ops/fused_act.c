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

/* Relu and Clip, the two that run in every product's epilogue (mobile nets' Relu6 is Clip): with
 * max / min, whose NaN rule (the second operand when either is NaN) gives the portable loop's bits:
 * max(v, 0) makes NaN and -0 into +0 as its mask does, min(hi, max(lo, v)) keeps NaN as its two
 * compares do. Measured (perf, mobilenet_v2 inference at batch 32): the 4-lane loop was 3.7% of it. */
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define OT_FA_X86 1

__attribute__((target("avx512f"))) static void relu_clip_avx512(float *y, int64_t n, bool clip, float p0, float p1) {
    const __m512 zero = _mm512_setzero_ps(), lo = _mm512_set1_ps(p0), hi = _mm512_set1_ps(p1);
    int64_t i = 0;
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(m, y + i);
        _mm512_mask_storeu_ps(y + i, m, clip ? _mm512_min_ps(hi, _mm512_max_ps(lo, v)) : _mm512_max_ps(v, zero));
    }
}

__attribute__((target("avx2"))) static void relu_clip_avx2(float *y, int64_t n, bool clip, float p0, float p1) {
    const __m256 zero = _mm256_setzero_ps(), lo = _mm256_set1_ps(p0), hi = _mm256_set1_ps(p1);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(y + i);
        _mm256_storeu_ps(y + i, clip ? _mm256_min_ps(hi, _mm256_max_ps(lo, v)) : _mm256_max_ps(v, zero));
    }
    for (; i < n; i++) {
        if (clip) {
            const float v = y[i] < p0 ? p0 : y[i];
            y[i] = v > p1 ? p1 : v;
        } else {
            y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        }
    }
}
#endif

void ot_fused_act_apply(const ot_fused_act *act, float *y, int64_t n) {
    ot_fused_act_apply_isa(ot_vec_isa_best(), act, y, n);
}

void ot_fused_act_apply_isa(ot_vec_isa isa, const ot_fused_act *act, float *y, int64_t n) {
    if (!act) return;
#ifdef OT_FA_X86
    if ((act->kind == OT_FUSED_RELU || act->kind == OT_FUSED_CLIP) && isa != OT_VEC_PORTABLE) {
        if (isa == OT_VEC_AVX512)
            relu_clip_avx512(y, n, act->kind == OT_FUSED_CLIP, act->p0, act->p1);
        else
            relu_clip_avx2(y, n, act->kind == OT_FUSED_CLIP, act->p0, act->p1);
        return;
    }
#else
    (void)isa;
#endif
    const float p0 = act->p0, p1 = act->p1;
    const ot_v4 zero = {0, 0, 0, 0}, lo = {p0, p0, p0, p0}, hi = {p1, p1, p1, p1};
    int64_t i = 0;
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
