/* The activation a com.otter fused node (FusedConv, FusedGemm, FusedMatMul from runtime/fuse.c)
 * applies to its output while each block is in cache: one descriptor, read once per run from the
 * node's attributes
 *
 *     activation = "Relu" | "Clip" | "LeakyRelu" | "HardSigmoid" | "HardSwish" | "Sigmoid" | "Swish"
 *                  | "Gelu" | "GeluTanh" | ""
 *     activation_params = Clip's min and max, LeakyRelu's alpha, HardSigmoid's alpha and beta
 *
 * (ONNX Runtime's com.microsoft FusedConv spelling; "Swish" is x * Sigmoid(x), fused from that
 * pair of nodes; "Gelu" and "GeluTanh" are Gelu-20 with approximate "none" and "tanh"), and one
 * apply function for every product and convolution path. Each activation gives the bits of its
 * ONNX node in otter (the transcendental ones through vec_math.c, as the elementwise kernels run
 * them). */
#ifndef OTTER_RUNTIME_OPS_FUSED_ACT_H
#define OTTER_RUNTIME_OPS_FUSED_ACT_H

#include <stdint.h>

#include "runtime/op.h"
#include "runtime/ops/vec_math.h"

typedef enum ot_fused_act_kind {
    OT_FUSED_NONE,
    OT_FUSED_RELU,         /* x > 0 ? x : 0 (NaN becomes 0, as the Relu kernel) */
    OT_FUSED_CLIP,         /* min(max(x, p0), p1) */
    OT_FUSED_LEAKY_RELU,   /* x < 0 ? p0 x : x */
    OT_FUSED_HARD_SIGMOID, /* max(0, min(1, p0 x + p1)) */
    OT_FUSED_HARD_SWISH,
    OT_FUSED_SIGMOID,
    OT_FUSED_SWISH,     /* x Sigmoid(x) */
    OT_FUSED_GELU,      /* 0.5 x (1 + erf(x / sqrt 2)) */
    OT_FUSED_GELU_TANH, /* Gelu's tanh approximation */
} ot_fused_act_kind;

typedef struct ot_fused_act {
    ot_fused_act_kind kind;
    float p0, p1;
} ot_fused_act;

/* The activation of ctx's node: OT_FUSED_NONE unless it is a com.otter node with one; an error
 * naming the node for an unknown name or missing parameters. */
otter_status ot_fused_act_read(const ot_kernel_ctx *ctx, ot_fused_act *act);

/* y[0, n) = (y + b) + z[0, n) (z NULL: y + b): the bias and the summed input every product and
 * convolution path adds before the activation, in one order, so every path gives the same bits. */
void ot_add_bias_row(float *y, const float *z, float b, int64_t n);

/* y[0, n) = act(y) in place; act may be NULL (none). */
void ot_fused_act_apply(const ot_fused_act *act, float *y, int64_t n);

/* The same on the vector path isa (for tests; not better than ot_vec_isa_best()): Relu and Clip run in
 * AVX-512 or AVX2 registers with the portable loop's bits, the others as ot_fused_act_apply. */
void ot_fused_act_apply_isa(ot_vec_isa isa, const ot_fused_act *act, float *y, int64_t n);

#endif
