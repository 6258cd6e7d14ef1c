/* The gradient builder's rule interface.
 *
 * A rule gets one forward node whose outputs have gradients, and appends nodes that turn those
 * into gradients of the node's inputs. Errors are sticky: helpers return NULL once something
 * failed and the builder reports the first failure, so rules read straight through. */
#ifndef OTTER_AUTODIFF_GRAD_H
#define OTTER_AUTODIFF_GRAD_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/registry.h"
#include "otter/autodiff.h"
#include "otter/ir.h"

/* ---- what a rule reads --------------------------------------------------------------------- */

/* Gradient of the node's output i, or NULL when the loss doesn't depend on it (zero). */
const char *ot_grad_dy(ot_grad *g, size_t out_index);
/* Whether the node's input i needs a gradient. */
bool ot_grad_needs(ot_grad *g, size_t in_index);
/* Name to write input i's gradient to (registers the contribution); NULL when not needed. */
const char *ot_grad_dx(ot_grad *g, size_t in_index);
/* Opset of the default domain. */
int64_t ot_grad_opset(const ot_grad *g);
/* The graph being rewritten (for initializers a rule adds itself). */
otter_graph *ot_grad_graph(ot_grad *g);
/* Static type of a tensor (from inputs, initializers, value_info after shape inference); NULL if unknown. */
const otter_type *ot_grad_type(ot_grad *g, const char *name);
/* Fixed rank of a tensor or -1. */
int ot_grad_rank(ot_grad *g, const char *name);

/* ---- what a rule writes -------------------------------------------------------------------- */

/* A fresh tensor name "<node>_Grad/<hint>" (unique in the graph). */
const char *ot_grad_tmp(ot_grad *g, const char *hint);
/* Append a node; NULL on failure. outs entries are tensor names (e.g. from ot_grad_tmp / ot_grad_dx). */
otter_node *ot_grad_emit(ot_grad *g, const char *op_type, const char *domain, size_t n_in, const char *const *ins,
                         size_t n_out, const char *const *outs);
/* Convenience: one-output node writing to `out`; returns out (NULL on failure). */
const char *ot_grad_op1(ot_grad *g, const char *op_type, const char *out, size_t n_in, const char *const *ins);
#define OT_G1(g, op, out, ...)                                                                                         \
    ot_grad_op1((g), (op), (out), sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *),                        \
                (const char *[]){__VA_ARGS__})
/* Constant initializers; returns the name. */
const char *ot_grad_const_i64(ot_grad *g, const char *hint, size_t count, const int64_t *v, bool scalar);
const char *ot_grad_const_f32(ot_grad *g, const char *hint, float v, otter_dtype dtype);
/* ReduceSum of `in` over constant axes (n_axes 0: every axis) into `out`, in the form the model's opset
 * takes (axes as an input from opset 13, an attribute before); returns the node. */
otter_node *ot_grad_reduce_sum(ot_grad *g, const char *in, size_t n_axes, const int64_t *axes, bool keepdims,
                               const char *out);
/* Sticky failure from a rule (message names the node). */
void ot_grad_fail(ot_grad *g, otter_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool ot_grad_failed(const ot_grad *g);
/* Fail and return from the (void) rule. */
#define OT_GRAD_FAIL(g, ...)                                                                                           \
    do {                                                                                                               \
        ot_grad_fail((g), __VA_ARGS__);                                                                                \
        return;                                                                                                        \
    } while (0)
#define OT_GRAD_NOMEM(g) OT_GRAD_FAIL((g), OTTER_ERR_NOMEM, "out of memory building gradients")

/* Write `grad` (shaped like `y`, the broadcast result) reduced to the shape of `x` into `out`:
 * ReduceSum over the broadcast axes (and Reshape when some kept axes were reduced), or Identity.
 * When static shapes don't decide the axes, com.microsoft BroadcastGradientArgs computes them at
 * run time (and com.microsoft ReduceSumTraining sums over them below opset 13). */
void ot_grad_unbroadcast(ot_grad *g, const char *grad, const char *x, const char *y, const char *out);
/* Zeros with the shape of `like` and the element type of `dtype_of` (like's when NULL), written to
 * `out` (a fresh name when NULL); returns the name, NULL on failure. */
const char *ot_grad_zeros_like(ot_grad *g, const char *like, const char *dtype_of, const char *out);
/* Declare in value_info that `name` has the static type of `like` (for gradient kernels, such as
 * MaxPoolGrad, whose output shape their inputs don't determine). */
void ot_grad_declare_like(ot_grad *g, const char *name, const char *like);
/* Copy every attribute of the forward node `src` onto the gradient node `dst` (as ORT does). */
void ot_grad_copy_attrs(ot_grad *g, otter_node *dst, const otter_node *src);
/* Add an output to the forward node (e.g. MaxPool's indices) when it lacks one; returns its name. */
const char *ot_grad_forward_output(ot_grad *g, otter_node *n, size_t index, const char *hint);
/* y itself, or when y is output 0 of a training-mode BatchNormalization (float, rank >= 2) a value
 * recomputing it in the backward pass from the BN's input and saved batch statistics (the node
 * becomes BatchNormInternal), so an activation's gradient need not keep y from the forward pass. */
const char *ot_grad_batchnorm_recompute(ot_grad *g, const char *y);

/* ---- rules, by the file that defines them (src/autodiff/rules_<file>.c); the operator registry
 * (src/ops/table.c) names each with its differentiable inputs ---- */
/* rules_elementwise.c */
void ot_grad_add(ot_grad *g, otter_node *n);
void ot_grad_sub(ot_grad *g, otter_node *n);
void ot_grad_mul(ot_grad *g, otter_node *n);
void ot_grad_div(ot_grad *g, otter_node *n);
void ot_grad_neg(ot_grad *g, otter_node *n);
void ot_grad_identity(ot_grad *g, otter_node *n);
void ot_grad_pow(ot_grad *g, otter_node *n);
void ot_grad_sqrt(ot_grad *g, otter_node *n);
void ot_grad_exp(ot_grad *g, otter_node *n);
void ot_grad_log(ot_grad *g, otter_node *n);
void ot_grad_reciprocal(ot_grad *g, otter_node *n);
void ot_grad_abs(ot_grad *g, otter_node *n);
void ot_grad_relu(ot_grad *g, otter_node *n);
void ot_grad_sigmoid(ot_grad *g, otter_node *n);
void ot_grad_tanh(ot_grad *g, otter_node *n);
void ot_grad_gelu(ot_grad *g, otter_node *n); /* Gelu, FastGelu, BiasGelu */
void ot_grad_ms_scale(ot_grad *g, otter_node *n);
void ot_grad_swiglu(ot_grad *g, otter_node *n);
void ot_grad_leaky_relu(ot_grad *g, otter_node *n);
void ot_grad_hard_sigmoid(ot_grad *g, otter_node *n);
void ot_grad_hard_swish(ot_grad *g, otter_node *n);
void ot_grad_erf(ot_grad *g, otter_node *n);
void ot_grad_clip(ot_grad *g, otter_node *n);
void ot_grad_where(ot_grad *g, otter_node *n);
void ot_grad_sum(ot_grad *g, otter_node *n);
void ot_grad_mean(ot_grad *g, otter_node *n);
void ot_grad_cast(ot_grad *g, otter_node *n);
void ot_grad_min_max(ot_grad *g, otter_node *n);
void ot_grad_zero(ot_grad *g, otter_node *n);
void ot_grad_shrink(ot_grad *g, otter_node *n);
void ot_grad_trilu(ot_grad *g, otter_node *n);
void ot_grad_elu(ot_grad *g, otter_node *n);
void ot_grad_selu(ot_grad *g, otter_node *n);
void ot_grad_celu(ot_grad *g, otter_node *n);
void ot_grad_thresholded_relu(ot_grad *g, otter_node *n);
void ot_grad_prelu(ot_grad *g, otter_node *n);
void ot_grad_softplus(ot_grad *g, otter_node *n);
void ot_grad_softsign(ot_grad *g, otter_node *n);
void ot_grad_mish(ot_grad *g, otter_node *n);
void ot_grad_swish(ot_grad *g, otter_node *n);
void ot_grad_sin(ot_grad *g, otter_node *n);
void ot_grad_cos(ot_grad *g, otter_node *n);
void ot_grad_tan(ot_grad *g, otter_node *n);
void ot_grad_asin(ot_grad *g, otter_node *n);
void ot_grad_acos(ot_grad *g, otter_node *n);
void ot_grad_atan(ot_grad *g, otter_node *n);
void ot_grad_sinh(ot_grad *g, otter_node *n);
void ot_grad_cosh(ot_grad *g, otter_node *n);
void ot_grad_asinh(ot_grad *g, otter_node *n);
void ot_grad_acosh(ot_grad *g, otter_node *n);
void ot_grad_atanh(ot_grad *g, otter_node *n);
/* rules_control.c; the builder unrolls Loop and Scan on the gradient path before it starts
 * (ot_grad_unroll_loops), and lets If rules see the outer tensors the branches read as extra inputs of
 * the If node while it runs (ot_grad_expose_captures, then ot_grad_hide_captures). */
otter_status ot_grad_unroll_loops(otter_model *m, const otter_grad_options *o);
otter_status ot_grad_expose_captures(otter_graph *g);
void ot_grad_hide_captures(otter_graph *g);
void ot_grad_if(ot_grad *g, otter_node *n);
/* rules_nn.c */
void ot_grad_gemm(ot_grad *g, otter_node *n);
void ot_grad_matmul(ot_grad *g, otter_node *n);
void ot_grad_fused_matmul(ot_grad *g, otter_node *n);
void ot_grad_conv(ot_grad *g, otter_node *n);
void ot_grad_maxpool(ot_grad *g, otter_node *n);
void ot_grad_avgpool(ot_grad *g, otter_node *n);
void ot_grad_global_avgpool(ot_grad *g, otter_node *n);
void ot_grad_lrn(ot_grad *g, otter_node *n);
void ot_grad_layernorm(ot_grad *g, otter_node *n);
void ot_grad_batchnorm(ot_grad *g, otter_node *n);
void ot_grad_dropout(ot_grad *g, otter_node *n);
void ot_grad_softmax(ot_grad *g, otter_node *n);
void ot_grad_sce(ot_grad *g, otter_node *n);
void ot_grad_nll(ot_grad *g, otter_node *n);
/* rules_rnn.c */
void ot_grad_lstm(ot_grad *g, otter_node *n);
void ot_grad_gru(ot_grad *g, otter_node *n);
void ot_grad_rnn(ot_grad *g, otter_node *n);
/* rules_shape.c */
void ot_grad_reshape_like(ot_grad *g, otter_node *n);
void ot_grad_transpose(ot_grad *g, otter_node *n);
void ot_grad_concat(ot_grad *g, otter_node *n);
void ot_grad_split(ot_grad *g, otter_node *n);
void ot_grad_slice(ot_grad *g, otter_node *n);
void ot_grad_gather(ot_grad *g, otter_node *n);
void ot_grad_expand(ot_grad *g, otter_node *n);
void ot_grad_tile(ot_grad *g, otter_node *n);
void ot_grad_pad(ot_grad *g, otter_node *n);
void ot_grad_einsum(ot_grad *g, otter_node *n);
void ot_grad_convtranspose(ot_grad *g, otter_node *n);
void ot_grad_reverse_sequence(ot_grad *g, otter_node *n);
/* rules_reduce.c */
void ot_grad_reduce(ot_grad *g, otter_node *n);          /* ReduceSum, ReduceMean */
void ot_grad_reduce_extremum(ot_grad *g, otter_node *n); /* ReduceMax, ReduceMin */
void ot_grad_global_maxpool(ot_grad *g, otter_node *n);
void ot_grad_mvn(ot_grad *g, otter_node *n);
void ot_grad_reduce_prod(ot_grad *g, otter_node *n);
void ot_grad_reduce_log_sum_exp(ot_grad *g, otter_node *n);
void ot_grad_reduce_log_sum(ot_grad *g, otter_node *n);
void ot_grad_reduce_l1(ot_grad *g, otter_node *n);
void ot_grad_reduce_l2(ot_grad *g, otter_node *n);
void ot_grad_reduce_sum_square(ot_grad *g, otter_node *n);
void ot_grad_lp_normalization(ot_grad *g, otter_node *n);
/* rules_index.c */
void ot_grad_cumsum(ot_grad *g, otter_node *n);
void ot_grad_topk(ot_grad *g, otter_node *n);
void ot_grad_gather_elements(ot_grad *g, otter_node *n);
void ot_grad_gather_nd(ot_grad *g, otter_node *n);
void ot_grad_scatter(ot_grad *g, otter_node *n); /* ScatterElements, ScatterND */
void ot_grad_depth_to_space(ot_grad *g, otter_node *n);
void ot_grad_space_to_depth(ot_grad *g, otter_node *n);
/* rules_math.c */
void ot_grad_cumprod(ot_grad *g, otter_node *n);
void ot_grad_det(ot_grad *g, otter_node *n);
void ot_grad_lppool(ot_grad *g, otter_node *n);
void ot_grad_global_lppool(ot_grad *g, otter_node *n);
void ot_grad_mod(ot_grad *g, otter_node *n);
void ot_grad_maxunpool(ot_grad *g, otter_node *n);
void ot_grad_center_crop_pad(ot_grad *g, otter_node *n);
void ot_grad_compress(ot_grad *g, otter_node *n);
void ot_grad_dft(ot_grad *g, otter_node *n);
void ot_grad_stft(ot_grad *g, otter_node *n);
/* rules_norm.c */
void ot_grad_instancenorm(ot_grad *g, otter_node *n);
void ot_grad_groupnorm(ot_grad *g, otter_node *n);
void ot_grad_rms_norm(ot_grad *g, otter_node *n);
void ot_grad_simplified_layernorm(ot_grad *g, otter_node *n);
void ot_grad_rotary_embedding(ot_grad *g, otter_node *n);
void ot_grad_resize(ot_grad *g, otter_node *n);
void ot_grad_attention(ot_grad *g, otter_node *n);
/* rules_geometric.c */
void ot_grad_gridsample(ot_grad *g, otter_node *n);
void ot_grad_affine_grid(ot_grad *g, otter_node *n);
void ot_grad_col2im(ot_grad *g, otter_node *n);
void ot_grad_deform_conv(ot_grad *g, otter_node *n);
void ot_grad_roialign(ot_grad *g, otter_node *n);

#endif
