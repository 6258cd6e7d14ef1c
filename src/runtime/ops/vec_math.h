/* Float row math: softmax and the transcendental activations (Sigmoid, Tanh, HardSwish, the Gelu family),
 * with AVX-512 and AVX2/FMA paths chosen at run time on x86-64 and a portable one elsewhere. All run the
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
    OT_VEC_SIGMOID,   /* 1 / (1 + e^-x), as e^x / (1 + e^x) below 0 to keep its relative accuracy */
    OT_VEC_TANH,      /* Cephes' tanhf: an odd polynomial below |x| = 0.625, 1 - 2 / (e^2|x| + 1) above */
    OT_VEC_HARDSWISH, /* x min(1, max(0, (x + 3) / 6)) */
} ot_vec_act;

/* y[i] = act(x[i]) (times gate[i] when gate is not NULL: SwiGLU); y may be x. NaN stays NaN. */
void ot_vec_activation(ot_vec_act act, float alpha, const float *x, const float *gate, float *y, int64_t n);

/* The paths, for tests: the functions above run the best this CPU has; the _isa forms run the one
 * asked for, which must not be better than ot_vec_isa_best(). */
typedef enum ot_vec_isa { OT_VEC_PORTABLE, OT_VEC_AVX2, OT_VEC_AVX512 } ot_vec_isa;
ot_vec_isa ot_vec_isa_best(void);
void ot_softmax_row_isa(ot_vec_isa isa, float *row, int64_t n);
void ot_vec_activation_isa(ot_vec_isa isa, ot_vec_act act, float alpha, const float *x, const float *gate, float *y,
                           int64_t n);

#endif
