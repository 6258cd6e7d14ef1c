/* Float row math for the fused transformer kernels: softmax and the sigmoid-gated activations,
 * with an AVX2/FMA path chosen at run time on x86-64 and a portable one elsewhere. Both run the
 * same steps (a Cephes-style polynomial exp within 2 ulp of expf; erfc as Numerical Recipes' erfcc on
 * it, relative error ~1e-6 in float), so they differ only by FMA rounding. */
#ifndef OTTER_RUNTIME_OPS_VEC_MATH_H
#define OTTER_RUNTIME_OPS_VEC_MATH_H

#include <stdint.h>

/* row[0, n) = softmax(row): exp(x - max) / sum. A row whose every entry is -inf (fully masked)
 * becomes zeros, not NaN (ONNX 1.23's Attention rule). */
void ot_softmax_row(float *row, int64_t n);

typedef enum ot_vec_act {
    OT_VEC_GELU_ERF,  /* 0.5 x (1 + erf(x / sqrt 2)) */
    OT_VEC_GELU_TANH, /* 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) = x sigmoid(2 * that) */
    OT_VEC_SWISH,     /* x sigmoid(alpha x) (Swish, QuickGelu, SiLU) */
} ot_vec_act;

/* y[i] = act(x[i]) (times gate[i] when gate is not NULL: SwiGLU); y may be x. */
void ot_vec_activation(ot_vec_act act, float alpha, const float *x, const float *gate, float *y, int64_t n);

#endif
