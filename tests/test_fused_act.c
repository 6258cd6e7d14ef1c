/* The fused activations' piecewise-linear kinds (runtime/ops/fused_act.c: Relu, Clip, LeakyRelu,
 * HardSigmoid), on every path this CPU has (portable, AVX2, AVX-512), against their ONNX kernels' rule
 * written out here, bit for bit: Relu makes NaN and -0 into +0, Clip to [lo, hi] keeps NaN (and -0 when
 * lo is 0), LeakyRelu keeps NaN and -0, HardSigmoid makes NaN into 1. Rows of every length from 0 to 40 (whole vectors,
 * masked and scalar tails) and a long one, inputs with NaN, +-inf, +-0, the bounds themselves and values just past
 * them; the floats past the row must stay as they were. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/ops/fused_act.h"
#include "testutil.h"

static float want(const ot_fused_act *a, float v) {
    switch (a->kind) {
    case OT_FUSED_RELU:
        return v > 0.0f ? v : 0.0f;
    case OT_FUSED_LEAKY_RELU:
        return v < 0.0f ? a->p0 * v : v;
    case OT_FUSED_HARD_SIGMOID: {
        const float w = a->p0 * v + a->p1;
        return isnan(w) || w >= 1.0f ? 1.0f : w <= 0.0f ? 0.0f : w;
    }
    default: {
        const float w = v < a->p0 ? a->p0 : v;
        return w > a->p1 ? a->p1 : w;
    }
    }
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

#define LONG_ROW 1000

/* Every length on path isa; the number of floats that differ from want's bits (or changed past the row). */
static int64_t check_act(ot_vec_isa isa, const ot_fused_act *a) {
    static const float special[] = {NAN,       -NAN,  INFINITY, -INFINITY, 0.0f, -0.0f, 6.0f,  6.000001f,
                                    5.999999f, -1.0f, -1e-30f,  1e-30f,    3.0f, 1e30f, -1e30f};
    const int64_t n_special = sizeof special / sizeof *special;
    float x[LONG_ROW + 8], y[LONG_ROW + 8];
    int64_t bad = 0;
    /* every other float special, shifted so that each special value lands at every position */
    for (int64_t shift = 0; shift < 2 * n_special; shift++) {
        for (int64_t i = 0; i < LONG_ROW + 8; i++)
            x[i] =
                (i + shift) % 2 == 0 ? special[(i + shift) / 2 % n_special] : (float)((i * 7919) % 2001 - 1000) / 97.0f;
        for (int64_t n = 0; n <= LONG_ROW; n = n < 40 ? n + 1 : LONG_ROW) {
            memcpy(y, x, sizeof y);
            ot_fused_act_apply_isa(isa, a, y, n);
            for (int64_t i = 0; i < n; i++) bad += bits(y[i]) != bits(want(a, x[i]));
            for (int64_t i = n; i < LONG_ROW + 8; i++) bad += bits(y[i]) != bits(x[i]);
            if (n == LONG_ROW) break;
        }
    }
    return bad;
}

int main(void) {
    static const char *const names[] = {"portable", "avx2", "avx512"};
    static const char *const kinds[] = {[OT_FUSED_RELU] = "Relu",
                                        [OT_FUSED_CLIP] = "Clip",
                                        [OT_FUSED_LEAKY_RELU] = "LeakyRelu",
                                        [OT_FUSED_HARD_SIGMOID] = "HardSigmoid"};
    const ot_fused_act acts[] = {
        {OT_FUSED_RELU, 0, 0},          {OT_FUSED_CLIP, 0.0f, 6.0f},         {OT_FUSED_CLIP, -1.0f, 1.0f},
        {OT_FUSED_LEAKY_RELU, 0.1f, 0}, {OT_FUSED_HARD_SIGMOID, 0.2f, 0.5f}, {OT_FUSED_HARD_SIGMOID, 1.0f / 6, 0.5f}};
    for (int isa = OT_VEC_PORTABLE; isa <= OT_VEC_AVX512; isa++) {
        if (isa > (int)ot_vec_isa_best()) {
            printf("%-8s: skipped (the CPU lacks it)\n", names[isa]);
            continue;
        }
        for (size_t k = 0; k < sizeof acts / sizeof *acts; k++) {
            const int64_t bad = check_act((ot_vec_isa)isa, &acts[k]);
            printf("%-8s: %s (%g, %g): %lld floats differ\n", names[isa], kinds[acts[k].kind], acts[k].p0, acts[k].p1,
                   (long long)bad);
            CHECK(bad == 0);
        }
    }
    return tu_finish("test_fused_act");
}
