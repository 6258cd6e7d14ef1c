/* Shape rules for operators that had a kernel but no rule (issue 13): quantized convolution and
 * matmul, GridSample, MaxUnpool, RoiAlign, NonMaxSuppression, Unique, the signal operators, text
 * operators, Multinomial (infer_extra.c), sequences and optionals (infer_sequence.c), and the
 * training and fused operators of other domains (infer_training_ops.c).
 *
 * Each rule is declared here so the operator registry can name it; until then infer.c lists the
 * tables declared below. */
#ifndef OTTER_INFER_GAPS_H
#define OTTER_INFER_GAPS_H

#include "infer/infer_internal.h"

/* Rule tables, {NULL, NULL}-terminated. Default domain: */
extern const ot_infer_rule ot_infer_rules_extra[];
extern const ot_infer_rule ot_infer_rules_sequence[];
extern const ot_infer_rule ot_infer_rules_legacy_training[]; /* ConvGrad, MaxPoolGrad, ... (infer_training_ops.c) */
/* com.microsoft training operators, com.otter fused operators, ai.onnx.preview.training Gradient */
extern const ot_infer_rule ot_infer_rules_ms_training[];
extern const ot_infer_rule ot_infer_rules_otter[];
extern const ot_infer_rule ot_infer_rules_gradient[];

/* Dimension d of input i; unknown when the input's shape is not known or has no such dim. */
static inline ot_idim ot_in_dim(const ot_inode *n, size_t i, int d) {
    const ot_ival *v = ot_in(n, i);
    return ot_in_has_shape(n, i) && d < v->rank ? v->dims[d] : OT_DIM_UNKNOWN;
}

/* ---- infer_extra.c ---- */

/* Run the rule for `op_type` in `table` on this node seen with other inputs: n_in records `in`
 * (NULL: omitted) named `names`, at `opset`; its outputs land in n->out. For operators defined
 * as another one's shapes (the quantized and fused operators, training variants). */
otter_status ot_infer_as(ot_inode *n, const ot_infer_rule *table, const char *op_type, int64_t opset, size_t n_in,
                         const ot_ival *const *in, const char *const *names);
/* Same with the node's own inputs picked by index (-1: omitted), element types hidden on request. */
otter_status ot_infer_as_picked(ot_inode *n, const ot_infer_rule *table, const char *op_type, int64_t opset,
                                size_t n_pick, const int *pick, bool hide_types);

otter_status ot_infer_conv_integer(ot_inode *n);
otter_status ot_infer_qlinear_conv(ot_inode *n);
otter_status ot_infer_qlinear_matmul(ot_inode *n);
otter_status ot_infer_gridsample(ot_inode *n);
otter_status ot_infer_maxunpool(ot_inode *n);
otter_status ot_infer_roialign(ot_inode *n);
otter_status ot_infer_nonmaxsuppression(ot_inode *n);
otter_status ot_infer_unique(ot_inode *n);
otter_status ot_infer_dft(ot_inode *n);
otter_status ot_infer_stft(ot_inode *n);
otter_status ot_infer_window(ot_inode *n); /* HannWindow, HammingWindow, BlackmanWindow */
otter_status ot_infer_melweightmatrix(ot_inode *n);
otter_status ot_infer_stringnormalizer(ot_inode *n);
otter_status ot_infer_tfidfvectorizer(ot_inode *n);
otter_status ot_infer_multinomial(ot_inode *n);

/* ---- infer_sequence.c ---- */
otter_status ot_infer_sequence_empty(ot_inode *n);
otter_status ot_infer_sequence_construct(ot_inode *n);
otter_status ot_infer_sequence_insert(ot_inode *n);
otter_status ot_infer_sequence_at(ot_inode *n);
otter_status ot_infer_sequence_erase(ot_inode *n);
otter_status ot_infer_sequence_length(ot_inode *n);
otter_status ot_infer_split_to_sequence(ot_inode *n);
otter_status ot_infer_concat_from_sequence(ot_inode *n);
otter_status ot_infer_sequence_map(ot_inode *n);
otter_status ot_infer_optional(ot_inode *n);
otter_status ot_infer_optional_has_element(ot_inode *n);
otter_status ot_infer_optional_get_element(ot_inode *n);

/* ---- infer_training_ops.c ---- */
otter_status ot_infer_adamw_optimizer(ot_inode *n);
otter_status ot_infer_batch_norm_grad(ot_inode *n);
otter_status ot_infer_batch_norm_internal(ot_inode *n);
otter_status ot_infer_concat_training(ot_inode *n);
otter_status ot_infer_conv_grad(ot_inode *n);
otter_status ot_infer_conv_transpose_grad(ot_inode *n);
otter_status ot_infer_otter_fused_conv(ot_inode *n);
otter_status ot_infer_otter_fused_gemm(ot_inode *n);
otter_status ot_infer_ms_fused_matmul(ot_inode *n);
otter_status ot_infer_otter_fused_matmul(ot_inode *n);
otter_status ot_infer_gather_elements_grad(ot_inode *n);
otter_status ot_infer_gather_grad(ot_inode *n);
otter_status ot_infer_gather_nd_grad(ot_inode *n);
otter_status ot_infer_gradient(ot_inode *n);
otter_status ot_infer_inplace_accumulator_v2(ot_inode *n);
otter_status ot_infer_layer_norm_grad(ot_inode *n);
otter_status ot_infer_output_like_input0(ot_inode *n);
otter_status ot_infer_pool_grad(ot_inode *n);
otter_status ot_infer_reduce_all_l2(ot_inode *n);
otter_status ot_infer_sce_loss_grad(ot_inode *n);
otter_status ot_infer_sce_loss_internal(ot_inode *n);
otter_status ot_infer_sgd_optimizer_v2(ot_inode *n);
otter_status ot_infer_simplified_layer_norm(ot_inode *n);
otter_status ot_infer_slice_grad(ot_inode *n);
otter_status ot_infer_split_training(ot_inode *n);

#endif
