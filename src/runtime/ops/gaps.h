/* Kernels for operators that had a shape rule but no kernel (issue 13): the random generators
 * (random.c), Lp normalization and pooling (lp_norm.c), the Bitwise* operators (bitwise.c), Gelu
 * and com.microsoft QuickGelu (gelu.c) and GroupNormalization (group_norm.c). Declared here so
 * the operator registry can name them; until then runtime/op_table.c lists the tables. */
#ifndef OTTER_RUNTIME_OPS_GAPS_H
#define OTTER_RUNTIME_OPS_GAPS_H

#include "runtime/op.h"

extern const ot_op_def ot_ops_random[];  /* RandomNormal(Like), RandomUniform(Like), Bernoulli, Multinomial */
extern const ot_op_def ot_ops_lp_norm[]; /* LpNormalization, GlobalLpPool */
extern const ot_op_def ot_ops_bitwise[];
extern const ot_op_def ot_ops_gelu[]; /* Gelu, com.microsoft QuickGelu */
extern const ot_op_def ot_ops_group_norm[];

/* ---- random.c: each node draws from its own stream, kept with the session ---- */
otter_status ot_kernel_random_normal(ot_kernel_ctx *ctx);
otter_status ot_kernel_random_uniform(ot_kernel_ctx *ctx);
otter_status ot_kernel_random_normal_like(ot_kernel_ctx *ctx);
otter_status ot_kernel_random_uniform_like(ot_kernel_ctx *ctx);
otter_status ot_kernel_bernoulli(ot_kernel_ctx *ctx);
otter_status ot_kernel_multinomial(ot_kernel_ctx *ctx);

/* ---- lp_norm.c ---- */
otter_status ot_kernel_lp_normalization(ot_kernel_ctx *ctx);
otter_status ot_kernel_global_lp_pool(ot_kernel_ctx *ctx);

/* ---- bitwise.c, gelu.c, group_norm.c ---- */
otter_status ot_kernel_bitwise_and(ot_kernel_ctx *ctx);
otter_status ot_kernel_bitwise_or(ot_kernel_ctx *ctx);
otter_status ot_kernel_bitwise_xor(ot_kernel_ctx *ctx);
otter_status ot_kernel_bitwise_not(ot_kernel_ctx *ctx);
otter_status ot_kernel_gelu(ot_kernel_ctx *ctx);
otter_status ot_kernel_quick_gelu(ot_kernel_ctx *ctx);
otter_status ot_kernel_group_normalization(ot_kernel_ctx *ctx);

/* Input i, required, of a floating-point type (float16, bfloat16, float, double); else an error
 * naming the node and the input. */
otter_status ot_ctx_float_input(const ot_kernel_ctx *ctx, size_t i, const otter_tensor **t);

#endif
